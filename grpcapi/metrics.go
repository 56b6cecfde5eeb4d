package grpcapi

import (
	"math"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/internal/promreg"
)

// metrics are the per-rule counters the reference exports, labelled by
// domain and rule, and the calls answered by code. Decisions, permits and
// Redis latency are the service's core.Observer's.
type metrics struct {
	hits, over, near, within, shadow *prometheus.CounterVec
	globalShadow                     prometheus.Counter
	requests                         *prometheus.CounterVec
	conns                            prometheus.Gauge
	connsRefused                     prometheus.Counter
	ref                              *refMetrics // the reference's names (nil: off)

	mu   sync.RWMutex // read on every call: readers do not wait on each other
	kept map[[2]string]*ruleSeries
}

// refMetrics are the counters under the names the reference server's
// Prometheus exporter gives them (src/stats/prom/default_mapper.yaml),
// labelled by domain and the first two parts of the rule's key, so that
// dashboards and alerts written for the reference read limitd's.
type refMetrics struct {
	hits, over, near, within, shadow *prometheus.CounterVec
	globalShadow                     prometheus.Counter
	errors                           *prometheus.CounterVec // by err_type
	requests                         prometheus.Counter     // total_requests of ShouldRateLimit
	responseTime                     prometheus.Observer    // response_time of ShouldRateLimit
}

func (m *metrics) withReference(reg *prometheus.Registry) {
	vec := func(name, help string) *prometheus.CounterVec {
		return counterVec(reg, name, help, "domain", "key1", "key2")
	}
	r := &refMetrics{
		hits:   vec("ratelimit_service_rate_limit_total_hits", "The reference server's total_hits of each rule (limitd_ratelimit_hits_total under its name)."),
		over:   vec("ratelimit_service_rate_limit_over_limit", "The reference server's over_limit of each rule (limitd_ratelimit_over_limit_total under its name)."),
		near:   vec("ratelimit_service_rate_limit_near_limit", "The reference server's near_limit of each rule (limitd_ratelimit_near_limit_total under its name)."),
		within: vec("ratelimit_service_rate_limit_within_limit", "The reference server's within_limit of each rule (limitd_ratelimit_within_limit_total under its name)."),
		shadow: vec("ratelimit_service_rate_limit_shadow_mode", "The reference server's shadow_mode of each rule (limitd_ratelimit_shadow_mode_total under its name)."),
		globalShadow: counter(reg, "ratelimit_service_global_shadow_mode",
			"The reference server's global_shadow_mode (limitd_ratelimit_global_shadow_mode_total under its name)."),
		errors: counterVec(reg, "ratelimit_service_should_rate_limit_error",
			"The reference server's should_rate_limit errors: redis_error (Redis failed the call: answered UNAVAILABLE), service_error (the service could not decide: no rules loaded yet, a request without a domain or descriptors or otherwise refused as invalid, an internal error).",
			"err_type"),
		requests: counterVec(reg, "ratelimit_service_total_requests",
			"The reference server's total_requests of each gRPC method (limitd_grpc_requests_total summed over codes).",
			"grpc_method").WithLabelValues("ShouldRateLimit"),
		// the reference's exporter maps its millisecond timer to seconds,
		// with Prometheus' DefBuckets
		responseTime: promreg.Register("grpcapi", reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ratelimit_service_response_time_seconds",
			Help:    "The reference server's response_time of each gRPC method: the time to answer a ShouldRateLimit call, seconds.",
			Buckets: prometheus.DefBuckets,
		}, []string{"grpc_method"})).WithLabelValues("ShouldRateLimit"),
	}
	m.ref = r
	m.globalShadow = tee{m.globalShadow, r.globalShadow}
}

// errClass is a failed call's class in the reference's should_rate_limit
// errors.
type errClass int

const (
	noError      errClass = iota // answered, or failed for no fault of the service (a token missing, the caller gone)
	redisError                   // Redis failed the call
	serviceError                 // the service could not decide: no rules yet, a request it refused, an internal error
)

var errTypes = [...]string{redisError: "redis_error", serviceError: "service_error"}

// called counts a ShouldRateLimit call (took 0: refused before it was read).
func (m *metrics) called(code codes.Code, class errClass, took time.Duration) {
	m.requests.WithLabelValues(code.String()).Inc()
	if m.ref == nil {
		return
	}
	m.ref.requests.Inc()
	if took > 0 {
		m.ref.responseTime.Observe(took.Seconds())
	}
	if class != noError {
		m.ref.errors.WithLabelValues(errTypes[class]).Inc()
	}
}

// ruleSeries are one rule's counters.
type ruleSeries struct{ hits, over, near, within, shadow tee }

// tee is limitd's counter, counted in the reference's too (ref nil: off).
type tee struct {
	prometheus.Counter
	ref prometheus.Counter
}

func (t tee) Inc() { t.Add(1) }

func (t tee) Add(v float64) {
	t.Counter.Add(v)
	if t.ref != nil {
		t.ref.Add(v)
	}
}

// maxKeptRules bounds the rule series kept at hand (detailed_metric can
// make many); past it they start over.
const maxKeptRules = 1 << 14

func counterVec(reg *prometheus.Registry, name, help string, labels ...string) *prometheus.CounterVec {
	return promreg.Register("grpcapi", reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels))
}

func counter(reg *prometheus.Registry, name, help string) prometheus.Counter {
	return promreg.Register("grpcapi", reg, prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help}))
}

func newMetrics(reg *prometheus.Registry) *metrics {
	vec := func(name, help string) *prometheus.CounterVec {
		return counterVec(reg, name, help, "domain", "rule")
	}
	return &metrics{
		hits:   vec("limitd_ratelimit_hits_total", "Hits asked of each descriptor rule over gRPC (a descriptor's hits_addend), by domain and rule."),
		over:   vec("limitd_ratelimit_over_limit_total", "Hits refused by a rule (shadow-mode rules included), by domain and rule."),
		near:   vec("limitd_ratelimit_near_limit_total", "Granted hits past the near-limit ratio (LIMITD_GRPC_NEAR_LIMIT_RATIO, 80% by default) of a window rule's limit, by domain and rule."),
		within: vec("limitd_ratelimit_within_limit_total", "Hits granted by a rule, by domain and rule."),
		shadow: vec("limitd_ratelimit_shadow_mode_total", "Hits a shadow-mode rule refused and answered OK all the same, by domain and rule."),
		globalShadow: counter(reg, "limitd_ratelimit_global_shadow_mode_total",
			"gRPC rate limit calls over the limit answered OK because of LIMITD_SHADOW_MODE."),
		requests: counterVec(reg, "limitd_grpc_requests_total",
			"ShouldRateLimit calls answered, by gRPC code (OK also for an OVER_LIMIT answer).", "code"),
		conns: promreg.Register("grpcapi", reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "limitd_grpc_connections",
			Help: "gRPC connections open.",
		})),
		connsRefused: counter(reg, "limitd_grpc_connections_refused_total",
			"gRPC connections closed as soon as accepted because the most that may be open (LIMITD_GRPC_MAX_CONNECTIONS) were open."),
		kept: map[[2]string]*ruleSeries{},
	}
}

func (m *metrics) series(domain, rule string) *ruleSeries {
	k := [2]string{domain, rule}
	m.mu.RLock()
	r, ok := m.kept[k]
	m.mu.RUnlock()
	if ok {
		return r
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if r, ok := m.kept[k]; ok {
		return r
	}
	if len(m.kept) >= maxKeptRules {
		clear(m.kept)
	}
	r = &ruleSeries{hits: tee{Counter: m.hits.WithLabelValues(domain, rule)}, over: tee{Counter: m.over.WithLabelValues(domain, rule)},
		near: tee{Counter: m.near.WithLabelValues(domain, rule)}, within: tee{Counter: m.within.WithLabelValues(domain, rule)},
		shadow: tee{Counter: m.shadow.WithLabelValues(domain, rule)}}
	if ref := m.ref; ref != nil {
		// split at its dots as the reference's statsd name is
		key1, rest, _ := strings.Cut(rule, ".")
		key2, _, _ := strings.Cut(rest, ".")
		r.hits.ref, r.over.ref = ref.hits.WithLabelValues(domain, key1, key2), ref.over.WithLabelValues(domain, key1, key2)
		r.near.ref, r.within.ref = ref.near.WithLabelValues(domain, key1, key2), ref.within.WithLabelValues(domain, key1, key2)
		r.shadow.ref = ref.shadow.WithLabelValues(domain, key1, key2)
	}
	m.kept[k] = r
	return r
}

// count counts one descriptor's hits in its rule's series as the reference
// does. A window's count before and after the hits splits them: the part
// past the limit is over_limit (and shadow_mode in shadow mode), the part
// between nearRatio of the limit and the limit near_limit, and a call
// within the limit is within_limit. Without a count (a schedule or smooth
// rule, a strict call that counted nothing) hits are over_limit when over,
// within_limit when counted, else total_hits alone.
func (r *ruleSeries) count(hits uint64, c core.Count, nearRatio float32) {
	h := float64(hits)
	r.hits.Add(h)
	if !c.Counted || !c.Window {
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
		r.near.Add(after - max(near, before))
	}
}
