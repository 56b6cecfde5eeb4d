package api

import (
	"cmp"
	"context"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/limitd/limitd/core"
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

// signalCollector exposes the sampler's last round (no Redis call at the
// scrape), as the help of each series says, and the data losses this limitd
// found.
type signalCollector struct {
	watcher                             func() *core.Watcher
	core                                *core.Service
	use, wait, granted, refused, shadow *prometheus.Desc
	backlog, remaining, inUse, slots    *prometheus.Desc
	held, wanted, capacity              *prometheus.Desc
	sampled, dataLosses                 *prometheus.Desc
}

// SignalMetrics is the collector of w's gauges, as the API's /metrics
// serves them, for a process that runs a sampler without the API (limitd
// ratelimit without LIMITD_ADDR).
func SignalMetrics(w *core.Watcher, svc *core.Service) prometheus.Collector {
	return newSignalCollector(func() *core.Watcher { return w }, svc)
}

func newSignalCollector(w func() *core.Watcher, c *core.Service) *signalCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &signalCollector{
		watcher: w, core: c,
		use: d("limitd_limiter_utilization",
			"A named limiter's utilization, sampled every second: a rate limiter's granted permits/s over the last 10 s (as its state in Redis counts them, whoever took them) over its rate; a window's permits taken over its limit; a share limiter's capacity held over its capacity; a concurrency limiter's slots in use over its limit.", "limiter"),
		wait: d("limitd_limiter_wait_seconds",
			"How long a new caller asking one permit of a named limiter would wait, sampled every second (0: granted at once; a lease kind: 0).", "limiter"),
		granted: d("limitd_limiter_granted_per_second",
			"A named limiter's permits granted a second over the Redis time between two samples at least 5 s apart: a rate kind's as its state in Redis counts them (every path), a lease kind's as limitd's front ends count them.", "limiter"),
		refused: d("limitd_limiter_refused_per_second",
			"A named limiter's permits refused a second over the Redis time between two samples at least 5 s apart, as every front end counts them (0 in shadow mode).", "limiter"),
		shadow: d("limitd_limiter_shadow_refused_per_second",
			"A named limiter in shadow mode: the permits it would have refused a second (nobody was refused).", "limiter"),
		backlog:   d("limitd_limiter_backlog_seconds", "A scheduled limiter's wait time, sampled every second (schedule: how far behind its schedule it is; smooth: its stored time).", "limiter"),
		remaining: d("limitd_window_remaining", "A window limiter's permits left in its current window, sampled every second.", "limiter"),
		inUse:     d("limitd_slots_in_use", "A concurrency limiter's slots held now, sampled every second.", "limiter"),
		slots:     d("limitd_slots_limit", "A concurrency limiter's limit.", "limiter"),
		held:      d("limitd_share_held", "A share limiter's capacity its holders hold, sampled every second.", "limiter"),
		wanted:    d("limitd_share_wanted", "A share limiter's capacity its holders want in all, sampled every second.", "limiter"),
		capacity:  d("limitd_share_capacity", "A share limiter's capacity.", "limiter"),
		sampled:   d("limitd_limiters_scraped", "How many limiters the last sample read from Redis (the named ones, at most 1000 in name order, and those watched)."),
		dataLosses: d("limitd_redis_data_lost_total",
			"Times this limitd found that Redis lost its data (limitd's marker gone: a restart without persistence, a FLUSHALL)."),
	}
}

func (c *signalCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.use, c.wait, c.granted, c.refused, c.shadow, c.backlog, c.remaining,
		c.inUse, c.slots, c.held, c.wanted, c.capacity, c.sampled, c.dataLosses} {
		ch <- d
	}
}

func (c *signalCollector) Collect(ch chan<- prometheus.Metric) {
	n := 0
	if r := c.watcher().Last(); r != nil {
		for name, e := range r.Entries {
			if e.Err != nil || e.Limiter.Template != "" {
				continue // an instance counts under its template
			}
			n++
			gauge := func(d *prometheus.Desc, v float64) {
				ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, name)
			}
			s := e.Signals
			gauge(c.use, s.Utilization)
			gauge(c.wait, time.Duration(s.Wait).Seconds())
			if s.Span > 0 {
				gauge(c.granted, s.GrantedPerS)
				gauge(c.refused, s.RefusedPerS)
				if s.Shadow {
					gauge(c.shadow, s.ShadowRefusedPerS)
				}
			}
			switch r := s.Reading; {
			case r.Counted:
				gauge(c.remaining, float64(r.Remaining))
			case r.Scheduled:
				gauge(c.backlog, time.Duration(r.Backlog).Seconds())
			case r.Slots:
				gauge(c.inUse, float64(r.InUse))
				gauge(c.slots, float64(r.Limit))
			case r.Shares:
				gauge(c.held, r.Held)
				gauge(c.wanted, r.Wanted)
				gauge(c.capacity, r.Capacity)
			}
		}
	}
	ch <- prometheus.MustNewConstMetric(c.sampled, prometheus.GaugeValue, float64(n))
	_, _, lost := c.core.DataLoss()
	ch <- prometheus.MustNewConstMetric(c.dataLosses, prometheus.CounterValue, float64(lost))
}

const (
	// templatesFor is how long a scrape reuses what an earlier one read of
	// templates: a key scan and two ZUNIONSTOREs per template.
	templatesFor = 10 * time.Second
	// maxTemplatesScraped bounds the templates one scrape reads, in
	// matching order; topScraped the instances per template and ranking.
	maxTemplatesScraped = 100
	topScraped          = 5
	// templatesScrapeTimeout bounds the Redis work of one read.
	templatesScrapeTimeout = 5 * time.Second
)

// templateCollector answers, at a scrape, the ledger's overflow (see
// core.Ledger), and each template's live and busiest instances, read again
// from Redis at most every templatesFor. An instance that leaves the top has
// no series at the next read.
type templateCollector struct {
	core                     *core.Service
	instances, top, overflow *prometheus.Desc

	mu      sync.Mutex
	at      time.Time
	metrics []prometheus.Metric
}

func newTemplateCollector(c *core.Service) *templateCollector {
	return &templateCollector{
		core: c,
		instances: prometheus.NewDesc("limitd_template_instances",
			"A template's live instances (a bounded scan of their keys), read at most every 10 s.", []string{"template"}, nil),
		top: prometheus.NewDesc("limitd_template_top_permits",
			"Permits refused or granted (by) over the last 5 minutes to a template's 5 busiest instances by each (key: the instance's name), across every limitd on the Redis; read at most every 10 s.",
			[]string{"template", "key", "by"}, nil),
		overflow: prometheus.NewDesc("limitd_ledger_overflow_total",
			"Decisions counted in Redis totals only under their template, not their own name: this limitd had counted its most names (10,000) that second.", nil, nil),
	}
}

func (c *templateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.instances
	ch <- c.top
	ch <- c.overflow
}

func (c *templateCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.overflow, prometheus.CounterValue, float64(c.core.LedgerOverflow()))
	c.mu.Lock()
	defer c.mu.Unlock() // one scrape reads Redis, the others wait for it
	if c.metrics == nil || time.Since(c.at) >= templatesFor {
		c.metrics, c.at = c.read(), time.Now()
	}
	for _, m := range c.metrics {
		ch <- m
	}
}

// read reads what Collect answers; with Redis down, nothing.
func (c *templateCollector) read() []prometheus.Metric {
	ctx, cancel := context.WithTimeout(context.Background(), templatesScrapeTimeout)
	defer cancel()
	ts, err := c.core.Templates(ctx)
	if err != nil {
		return []prometheus.Metric{}
	}
	out := []prometheus.Metric{}
	for _, t := range ts[:min(len(ts), maxTemplatesScraped)] {
		if n, _, err := c.core.CachedInstances(ctx, t); err == nil {
			out = append(out, prometheus.MustNewConstMetric(c.instances, prometheus.GaugeValue, float64(n), t.ID))
		}
		for _, by := range []string{"refused", "granted"} {
			top, err := c.core.Top(ctx, t.ID, by, topScraped, core.DefaultTopMinutes)
			if err != nil {
				continue
			}
			for _, i := range top.Instances {
				v := i.Granted
				if by == "refused" {
					v = i.Refused
				}
				if v > 0 {
					out = append(out, prometheus.MustNewConstMetric(c.top, prometheus.GaugeValue, float64(v), t.ID, i.Name, by))
				}
			}
		}
	}
	return out
}
