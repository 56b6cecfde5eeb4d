package api

import (
	"cmp"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/limitd/limitd/internal/promreg"
)

// metrics are the HTTP API's own series on /metrics: requests, problems
// and event streams. Decisions and store calls are counted by the service's
// observer (internal/coremetrics), in the same registry.
type metrics struct {
	requests            *prometheus.CounterVec   // by method, route template, status
	duration            *prometheus.HistogramVec // by method, route template
	errors              *prometheus.CounterVec   // by problem type
	eventStreams        prometheus.Gauge
	eventStreamsDropped prometheus.Counter
}

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

// methodLabels are the method labels; made-up methods count as "other".
var methodLabels = [...]string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut,
	http.MethodPatch, http.MethodDelete, http.MethodOptions, "other"}

// request counts and times one answered request.
func (m *metrics) request(rt *route, method string, status int, took time.Duration) {
	mi := slices.Index(methodLabels[:len(methodLabels)-1], method)
	if mi < 0 {
		mi = len(methodLabels) - 1
	}
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
