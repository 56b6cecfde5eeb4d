package api

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/limitd/limitd/core"
)

// metrics are the collectors /metrics serves. They observe the service
// (core.Observer): every decision and store call; requests and problems are
// counted by the handler's middleware.
type metrics struct {
	requests  *prometheus.CounterVec   // by method, route template, status
	duration  *prometheus.HistogramVec // by method, route template
	decisions *prometheus.CounterVec   // by limiter name or template id, and decision
	capacity  *prometheus.CounterVec   // share: capacity decisions, labelled as decisions
	slots     *prometheus.CounterVec   // concurrency: slot acquisitions, labelled as decisions
	leases    *prometheus.CounterVec   // concurrency: renewals, releases, lost leases
	errors    *prometheus.CounterVec   // by problem type
	backlog   *prometheus.GaugeVec     // by limiter name; never a template instance
	redis     [core.NumOps]prometheus.Observer
}

func newMetrics(reg *prometheus.Registry) *metrics {
	m := &metrics{
		requests: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "limitd_http_requests_total",
			Help: "HTTP requests answered, by method, route template (unmatched: no route) and status.",
		}, []string{"method", "route", "status"})),
		duration: register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "limitd_http_request_duration_seconds",
			Help:    "Time to answer an HTTP request, by method and route template; a blocking acquire includes its wait.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"method", "route"})),
		decisions: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "limitd_acquire_decisions_total",
			Help: "Acquire decisions (granted, denied) by limiter name, or by template id (limiter=\"\") for template instances.",
		}, []string{"limiter", "template", "decision"})),
		capacity: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "limitd_capacity_decisions_total",
			Help: "Capacity decisions of share limiters (full: got all it wants; partial; none: got 0 of a positive want; learning: got what it reported holding), by limiter name, or by template id (limiter=\"\") for template instances.",
		}, []string{"limiter", "template", "decision"})),
		slots: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "limitd_slot_acquisitions_total",
			Help: "Slot acquisitions of concurrency limiters (granted, denied), by limiter name, or by template id (limiter=\"\") for template instances.",
		}, []string{"limiter", "template", "decision"})),
		leases: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "limitd_slot_lease_events_total",
			Help: "Concurrency leases renewed, released, or lost (a renewal or release of a lease the limiter no longer holds: released already, or expired), by limiter name, or by template id (limiter=\"\").",
		}, []string{"limiter", "template", "event"})),
		errors: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "limitd_errors_total",
			Help: "Problem responses by problem type (invalid, unauthorized, not-found, ..., unavailable, timeout, internal).",
		}, []string{"type"})),
		backlog: register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "limitd_limiter_backlog_seconds",
			Help: "A named limiter's wait time (schedule: its backlog behind schedule; smooth: its stored time) as last seen by an acquire or /wait through this process.",
		}, []string{"limiter"})),
	}
	rh := register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "limitd_redis_call_duration_seconds",
		Help:    "Latency of store calls to Redis (one script or command round trip, more for list and view), by operation.",
		Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
	}, []string{"op"}))
	for op := range core.NumOps {
		m.redis[op] = rh.WithLabelValues(op.String())
	}
	// Runtime metrics belong on every limitd /metrics; a registry that has
	// them already keeps its own (the error says so, and changes nothing).
	_ = reg.Register(collectors.NewGoCollector())
	_ = reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// register adds c to reg, or returns the equal collector reg holds already
// (a second handler on the same registry shares the series).
func register[C prometheus.Collector](reg *prometheus.Registry, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if old, ok := are.ExistingCollector.(C); ok {
				return old
			}
		}
		panic("api: registering metrics: " + err.Error())
	}
	return c
}

// StoreCall is core.Observer's: limitd_redis_call_duration_seconds.
func (m *metrics) StoreCall(op core.Op, took time.Duration) {
	if op >= 0 && op < core.NumOps {
		m.redis[op].Observe(took.Seconds())
	}
}

// Decided is core.Observer's: the decision counters.
func (m *metrics) Decided(e core.Event) {
	var c *prometheus.CounterVec
	switch e.Kind {
	case core.EventRate:
		c = m.decisions
	case core.EventCapacity:
		c = m.capacity
	case core.EventSlot:
		c = m.slots
	case core.EventLease:
		c = m.leases
	default:
		return
	}
	c.WithLabelValues(e.Limiter, e.Template, e.Outcome).Inc()
}

// Backlog is core.Observer's: limitd_limiter_backlog_seconds.
func (m *metrics) Backlog(limiter string, wait time.Duration) {
	m.backlog.WithLabelValues(limiter).Set(wait.Seconds())
}

// Deleted is core.Observer's: a deleted limiter's backlog series goes.
func (m *metrics) Deleted(limiter string) { m.backlog.DeleteLabelValues(limiter) }
