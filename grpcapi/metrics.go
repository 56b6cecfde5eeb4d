package grpcapi

import (
	"math"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/internal/promreg"
)

// metrics are the per-rule counters the reference exports (total hits, over
// limit, near limit, within limit, shadow mode), labelled by domain and rule,
// and the calls answered by code. Decisions, permits and Redis latency are
// counted by the core.Observer of the service, in the same series as the
// HTTP API's.
type metrics struct {
	hits, over, near, within, shadow *prometheus.CounterVec
	globalShadow                     prometheus.Counter
	requests                         *prometheus.CounterVec
	conns                            prometheus.Gauge   // limits.go: Listener
	connsRefused                     prometheus.Counter // limits.go: Listener

	mu   sync.Mutex
	kept map[[2]string]*ruleSeries
}

// ruleSeries are one rule's counters.
type ruleSeries struct{ hits, over, near, within, shadow prometheus.Counter }

// maxKeptRules bounds the rule series kept at hand (detailed_metric can
// make many); past it they start over (the series stay in the registry).
const maxKeptRules = 1 << 14

func newMetrics(reg *prometheus.Registry) *metrics {
	vec := func(name, help string) *prometheus.CounterVec {
		return promreg.Register("grpcapi", reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"domain", "rule"}))
	}
	return &metrics{
		hits:   vec("limitd_ratelimit_hits_total", "Hits asked of each descriptor rule over gRPC (a descriptor's hits_addend), by domain and rule."),
		over:   vec("limitd_ratelimit_over_limit_total", "Hits refused by a rule (shadow-mode rules included), by domain and rule."),
		near:   vec("limitd_ratelimit_near_limit_total", "Granted hits past 80% of a window rule's limit, by domain and rule."),
		within: vec("limitd_ratelimit_within_limit_total", "Hits granted by a rule, by domain and rule."),
		shadow: vec("limitd_ratelimit_shadow_mode_total", "Hits a shadow-mode rule refused and answered OK all the same, by domain and rule."),
		globalShadow: promreg.Register("grpcapi", reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "limitd_ratelimit_global_shadow_mode_total",
			Help: "gRPC rate limit calls over the limit answered OK because of LIMITD_SHADOW_MODE."})),
		requests: promreg.Register("grpcapi", reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "limitd_grpc_requests_total",
			Help: "ShouldRateLimit calls answered, by gRPC code (OK also for an OVER_LIMIT answer).",
		}, []string{"code"})),
		conns: promreg.Register("grpcapi", reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "limitd_grpc_connections",
			Help: "gRPC connections open.",
		})),
		connsRefused: promreg.Register("grpcapi", reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "limitd_grpc_connections_refused_total",
			Help: "gRPC connections closed as soon as accepted because the most that may be open (LIMITD_GRPC_MAX_CONNECTIONS) were open.",
		})),
		kept: map[[2]string]*ruleSeries{},
	}
}

// series returns a rule's counters.
func (m *metrics) series(domain, rule string) *ruleSeries {
	k := [2]string{domain, rule}
	m.mu.Lock()
	defer m.mu.Unlock()
	if r, ok := m.kept[k]; ok {
		return r
	}
	if len(m.kept) >= maxKeptRules {
		clear(m.kept)
	}
	r := &ruleSeries{hits: m.hits.WithLabelValues(domain, rule), over: m.over.WithLabelValues(domain, rule),
		near: m.near.WithLabelValues(domain, rule), within: m.within.WithLabelValues(domain, rule),
		shadow: m.shadow.WithLabelValues(domain, rule)}
	m.kept[k] = r
	return r
}

// count counts one descriptor's hits in its rule's series as the reference
// does. A window's counter is read before and after the hits: a call whose
// count passes the limit has the part past it over_limit (all of them if
// it was past already), and the part between the near threshold
// (nearRatio of the limit) and the limit near_limit; a call within the
// limit is within_limit, and near_limit for the part past the threshold;
// a shadow-mode rule's over part is shadow_mode too. A schedule or smooth
// rule has no count: its hits are over_limit (and shadow_mode) when over,
// else within_limit; so are a window's in a strict call that refused them.
// Hits a strict call did not count because another rule refused it are
// total_hits alone.
func (r *ruleSeries) count(hits uint64, c core.Count, nearRatio float32) {
	h := float64(hits)
	r.hits.Add(h)
	if !c.Counted || !c.Window {
		// No count to read: a schedule or smooth rule, or a strict call
		// that counted nothing (refused, or voided by another rule).
		switch {
		case c.Over:
			r.over.Add(h)
			if c.Shadow {
				r.shadow.Add(h)
			}
		case c.Counted:
			r.within.Add(h)
		}
		return
	}
	limit := float64(c.Limit)
	near := math.Floor(float64(float32(limit) * nearRatio))
	after := float64(c.Used)
	before := after - h
	if c.Over {
		overPart := h
		if before < limit {
			overPart = after - limit
			r.near.Add(limit - max(near, before))
		}
		r.over.Add(overPart)
		if c.Shadow {
			r.shadow.Add(overPart)
		}
		return
	}
	r.within.Add(h)
	if after > near {
		if before >= near {
			r.near.Add(h)
		} else {
			r.near.Add(after - near)
		}
	}
}
