package api

import (
	"cmp"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/internal/promreg"
)

// metrics are the collectors /metrics serves. They observe the service
// (core.Observer): every decision and store call; requests and problems are
// counted by the handler's middleware.
type metrics struct {
	requests  *prometheus.CounterVec   // by method, route template, status
	duration  *prometheus.HistogramVec // by method, route template
	decisions *prometheus.CounterVec   // by limiter name or template id, and decision
	permits   *prometheus.CounterVec   // the same, counting permits
	delay     *prometheus.HistogramVec // granted: the caller's wait, by limiter name or template id
	lateness  *prometheus.HistogramVec // granted: start − scheduled, the same
	capacity  *prometheus.CounterVec   // share: capacity decisions, labelled as decisions
	slots     *prometheus.CounterVec   // concurrency: slot acquisitions, labelled as decisions
	leases    *prometheus.CounterVec   // concurrency: renewals, releases, lost leases
	errors    *prometheus.CounterVec   // by problem type
	// eventStreams are the event streams open; eventStreamsDropped those
	// closed because their client did not read.
	eventStreams        prometheus.Gauge
	eventStreamsDropped prometheus.Counter
	redis               [core.NumOps]prometheus.Observer

	// The series of rate decisions, found once and kept: a label lookup
	// hashes every value and takes the vector's lock.
	decided  sync.Map // decisionKey → *rateSeries
	nDecided atomic.Int64
}

// delayBuckets are the buckets of the delay and lateness histograms: 0 (a
// caller that starts at once) apart, from 1 ms to 1 min.
var delayBuckets = []float64{0, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

func newMetrics(reg *prometheus.Registry, version string) *metrics {
	m := &metrics{
		requests: promreg.Register("api", reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "limitd_http_requests_total",
			Help: "HTTP requests answered, by method, route template (unmatched: no route) and status.",
		}, []string{"method", "route", "status"})),
		duration: promreg.Register("api", reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "limitd_http_request_duration_seconds",
			Help:    "Time to answer an HTTP request, by method and route template; a blocking acquire includes its wait.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"method", "route"})),
		decisions: promreg.Register("api", reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "limitd_acquire_decisions_total",
			Help: "Acquire decisions (granted, denied, shadow: refused and let through in shadow mode, voided: would have granted in a several-limit call another limiter refused, charged: permits taken by a charge whatever was left) by limiter name, or by template id (limiter=\"\") for template instances.",
		}, []string{"limiter", "template", "decision"})),
		permits: promreg.Register("api", reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "limitd_permits_total",
			Help: "Permits asked for in acquires and pool grants, and taken by charges, by decision as limitd_acquire_decisions_total (an acquire of 100 counts 100), by limiter name, or by template id (limiter=\"\") for template instances.",
		}, []string{"limiter", "template", "decision"})),
		delay: promreg.Register("api", reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "limitd_acquire_delay_seconds",
			Help:    "How long a granted caller waits before it may start (0: at once), by limiter name, or by template id (limiter=\"\").",
			Buckets: delayBuckets,
		}, []string{"limiter", "template"})),
		lateness: promreg.Register("api", reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "limitd_acquire_lateness_seconds",
			Help:    "How late a granted request starts against its place on the schedule (start − scheduled: the backlog it caught up), by limiter name, or by template id (limiter=\"\").",
			Buckets: delayBuckets,
		}, []string{"limiter", "template"})),
		capacity: promreg.Register("api", reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "limitd_capacity_decisions_total",
			Help: "Capacity decisions of share limiters (full: got all it wants; partial; none: got 0 of a positive want; learning: got what it reported holding), by limiter name, or by template id (limiter=\"\") for template instances.",
		}, []string{"limiter", "template", "decision"})),
		slots: promreg.Register("api", reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "limitd_slot_acquisitions_total",
			Help: "Slot acquisitions of concurrency limiters (granted, denied, shadow: refused and let through in shadow mode), by limiter name, or by template id (limiter=\"\") for template instances.",
		}, []string{"limiter", "template", "decision"})),
		leases: promreg.Register("api", reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "limitd_slot_lease_events_total",
			Help: "Concurrency leases renewed, released, or lost (a renewal or release of a lease the limiter no longer holds: released already, or expired), by limiter name, or by template id (limiter=\"\").",
		}, []string{"limiter", "template", "event"})),
		errors: promreg.Register("api", reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "limitd_errors_total",
			Help: "Problem responses by problem type (invalid, unauthorized, not-found, ..., unavailable, timeout, internal).",
		}, []string{"type"})),
		eventStreams: promreg.Register("api", reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "limitd_event_streams",
			Help: "Event streams (GET /v1/events) open now; they share one sampling loop.",
		})),
		eventStreamsDropped: promreg.Register("api", reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "limitd_event_streams_dropped_total",
			Help: "Event streams closed because their client did not read: a write blocked for 10 s, or 64 samples and changes waiting.",
		})),
	}
	rh := promreg.Register("api", reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "limitd_redis_call_duration_seconds",
		Help:    "Latency of store calls to Redis (one script or command round trip, more for list and view), by operation.",
		Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
	}, []string{"op"}))
	for op := range core.NumOps {
		m.redis[op] = rh.WithLabelValues(op.String())
	}
	info := promreg.Register("api", reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "limitd_build_info",
		Help: "Always 1: the version of limitd serving and the Go version it was built with.",
	}, []string{"version", "goversion"}))
	info.WithLabelValues(cmp.Or(version, "dev"), runtime.Version()).Set(1)
	// Runtime metrics belong on every limitd /metrics; a registry that has
	// them already keeps its own (the error says so, and changes nothing).
	_ = reg.Register(collectors.NewGoCollector())
	_ = reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Observer returns the core.Observer that counts decisions and store calls
// in the series of reg that New's /metrics serves (New with the same
// Registry): how another front end (the gRPC one) counts in the same
// series as the HTTP API.
func Observer(reg *prometheus.Registry, version string) core.Observer {
	return newMetrics(reg, version)
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

// route is one route of the API as metrics and the access log see it.
type route struct {
	label   string // the OpenAPI path, "unmatched" for no route
	probe   bool   // /healthz or /readyz: never in the access log
	methods [len(methodLabels)]atomic.Pointer[httpSeries]
}

// httpSeries are the request series of one method on one route.
type httpSeries struct {
	duration prometheus.Observer
	byStatus sync.Map // int → prometheus.Counter
}

// methodLabels are the method labels; made-up methods count as "other", so
// that they add no series.
var methodLabels = [...]string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut,
	http.MethodPatch, http.MethodDelete, http.MethodOptions, "other"}

func methodIndex(m string) int {
	for i, l := range methodLabels[:len(methodLabels)-1] {
		if m == l {
			return i
		}
	}
	return len(methodLabels) - 1
}

// request counts and times one answered request.
func (m *metrics) request(rt *route, method string, status int, took time.Duration) {
	mi := methodIndex(method)
	hs := rt.methods[mi].Load()
	if hs == nil {
		hs = &httpSeries{duration: m.duration.WithLabelValues(methodLabels[mi], rt.label)}
		if !rt.methods[mi].CompareAndSwap(nil, hs) {
			hs = rt.methods[mi].Load()
		}
	}
	hs.duration.Observe(took.Seconds())
	c, ok := hs.byStatus.Load(status)
	if !ok {
		c, _ = hs.byStatus.LoadOrStore(status, m.requests.WithLabelValues(methodLabels[mi], rt.label, strconv.Itoa(status)))
	}
	c.(prometheus.Counter).Inc()
}

// decisionKey names one series of limitd_acquire_decisions_total.
type decisionKey struct{ limiter, template, outcome string }

// rateSeries are the series one rate decision adds to: its decision and
// permits counters and, for a grant, the delay and lateness histograms.
type rateSeries struct {
	decisions, permits prometheus.Counter
	delay, lateness    prometheus.Observer // nil for a denial
}

// maxKept bounds the decision series kept at hand; past it
// they start over (the series stay in the registry).
const maxKept = 1 << 14

// decision returns the counter of one rate decision's series.
func (m *metrics) decision(k decisionKey) *rateSeries {
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
