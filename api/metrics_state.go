package api

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitd/limitd/core"
)

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
