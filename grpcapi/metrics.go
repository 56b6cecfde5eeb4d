package grpcapi

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

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
