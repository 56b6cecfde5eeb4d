// Package coremetrics counts what a core.Service does in Prometheus series:
// its Observer sees every decision and every store call. limitd serve hands
// one to core.New, so that every front end counts in the same series.
//
// Layer: core's observer, beside the front ends: it imports core and
// internal/promreg, and nothing imports it but cmd/limitd (and tests).
package coremetrics

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/internal/promreg"
)

// Observer is the core.Observer whose series live in a registry (New).
type Observer struct {
	decisions *prometheus.CounterVec   // by limiter name or template id, and decision
	permits   *prometheus.CounterVec   // the same, counting permits
	delay     *prometheus.HistogramVec // granted: the caller's wait, by limiter name or template id
	lateness  *prometheus.HistogramVec // granted: start − scheduled, the same
	capacity  *prometheus.CounterVec   // share: capacity decisions, labelled as decisions
	slots     *prometheus.CounterVec   // concurrency: slot acquisitions, labelled as decisions
	leases    *prometheus.CounterVec   // concurrency: renewals, releases, lost leases
	redis     [core.NumOps]prometheus.Observer

	// a label lookup hashes every value and takes the vector's lock
	decided  sync.Map // decisionKey → *rateSeries
	nDecided atomic.Int64
}

// delayBuckets: 0 (a caller that starts at once) apart, then 1 ms to 1 min.
var delayBuckets = []float64{0, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// New registers the observer's series in reg (two observers of one
// registry count in the same series).
func New(reg *prometheus.Registry) *Observer {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return promreg.Register("coremetrics", reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels))
	}
	histogram := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		return promreg.Register("coremetrics", reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels))
	}
	m := &Observer{
		decisions: counter("limitd_acquire_decisions_total",
			"Acquire decisions (granted, denied, shadow: refused and let through in shadow mode, voided: would have granted in a several-limit call another limiter refused, charged: permits taken by a charge whatever was left) by limiter name, or by template id (limiter=\"\") for template instances.",
			"limiter", "template", "decision"),
		permits: counter("limitd_permits_total",
			"Permits asked for in acquires and pool grants, and taken by charges, by decision as limitd_acquire_decisions_total (an acquire of 100 counts 100), by limiter name, or by template id (limiter=\"\") for template instances.",
			"limiter", "template", "decision"),
		delay: histogram("limitd_acquire_delay_seconds",
			"How long a granted caller waits before it may start (0: at once), by limiter name, or by template id (limiter=\"\").",
			delayBuckets, "limiter", "template"),
		lateness: histogram("limitd_acquire_lateness_seconds",
			"How late a granted request starts against its place on the schedule (start − scheduled: the backlog it caught up), by limiter name, or by template id (limiter=\"\").",
			delayBuckets, "limiter", "template"),
		capacity: counter("limitd_capacity_decisions_total",
			"Capacity decisions of share limiters (full: got all it wants; partial; none: got 0 of a positive want; learning: got what it reported holding), by limiter name, or by template id (limiter=\"\") for template instances.",
			"limiter", "template", "decision"),
		slots: counter("limitd_slot_acquisitions_total",
			"Slot acquisitions of concurrency limiters (granted, denied, shadow: refused and let through in shadow mode), by limiter name, or by template id (limiter=\"\") for template instances.",
			"limiter", "template", "decision"),
		leases: counter("limitd_slot_lease_events_total",
			"Concurrency leases renewed, released, or lost (a renewal or release of a lease the limiter no longer holds: released already, or expired), by limiter name, or by template id (limiter=\"\").",
			"limiter", "template", "event"),
	}
	rh := histogram("limitd_redis_call_duration_seconds",
		"Latency of store calls to Redis (one script or command round trip, more for list and view), by operation.",
		[]float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}, "op")
	for op := range core.NumOps {
		m.redis[op] = rh.WithLabelValues(op.String())
	}
	return m
}

// StoreCall is core.Observer's: limitd_redis_call_duration_seconds.
func (m *Observer) StoreCall(op core.Op, took time.Duration) {
	if op >= 0 && op < core.NumOps {
		m.redis[op].Observe(took.Seconds())
	}
}

// Decided is core.Observer's: the decision counters.
func (m *Observer) Decided(e core.Event) {
	var c *prometheus.CounterVec
	switch e.Kind {
	case core.EventRate:
		r := m.decision(decisionKey{e.Limiter, e.Template, e.Outcome})
		r.decisions.Inc()
		r.permits.Add(float64(e.Permits))
		if r.delay != nil {
			r.delay.Observe(e.Delay.Seconds())
			r.lateness.Observe(e.Lateness.Seconds())
		}
		return
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

type decisionKey struct{ limiter, template, outcome string }

type rateSeries struct {
	decisions, permits prometheus.Counter
	delay, lateness    prometheus.Observer // nil for a denial
}

// maxKept bounds the decision series kept at hand; past it they start over.
const maxKept = 1 << 14

func (m *Observer) decision(k decisionKey) *rateSeries {
	if r, ok := m.decided.Load(k); ok {
		return r.(*rateSeries)
	}
	if m.nDecided.Add(1) > maxKept {
		m.decided.Clear()
		m.nDecided.Store(1)
	}
	r := &rateSeries{decisions: m.decisions.WithLabelValues(k.limiter, k.template, k.outcome),
		permits: m.permits.WithLabelValues(k.limiter, k.template, k.outcome)}
	if k.outcome == "granted" {
		r.delay, r.lateness = m.delay.WithLabelValues(k.limiter, k.template), m.lateness.WithLabelValues(k.limiter, k.template)
	}
	v, _ := m.decided.LoadOrStore(k, r)
	return v.(*rateSeries)
}
