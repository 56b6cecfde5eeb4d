package api

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/limiter"
)

const (
	// maxScraped bounds the limiters whose state one scrape reads: the
	// first ones in name order, their configs in one pipeline (List) and
	// their live states in another (core.Views), but a lease limiter's,
	// one round trip each.
	maxScraped = 1000
	// scrapeTimeout bounds the Redis work of one scrape; limiters not read
	// by then are left out of it.
	scrapeTimeout = 5 * time.Second
)

// stateCollector reads every limiter's live state from Redis when /metrics
// is scraped: a rate limiter's backlog, a share limiter's held and total
// capacity, a concurrency limiter's slots in use and its limit, whichever
// process took the permits. Template instances are not listed (they are
// per-key state, counted under their template by the decision metrics).
type stateCollector struct {
	core                                  *core.Service
	backlog, held, capacity, inUse, slots *prometheus.Desc
	remaining                             *prometheus.Desc
	scraped                               *prometheus.Desc
}

func newStateCollector(c *core.Service) *stateCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &stateCollector{
		core:      c,
		backlog:   d("limitd_limiter_backlog_seconds", "A rate limiter's wait time read from Redis at the scrape (schedule: how far behind its schedule it is; smooth: its stored time).", "limiter"),
		held:      d("limitd_share_held", "A share limiter's capacity its holders hold now, read from Redis at the scrape.", "limiter"),
		capacity:  d("limitd_share_capacity", "A share limiter's capacity.", "limiter"),
		inUse:     d("limitd_slots_in_use", "A concurrency limiter's slots held now, read from Redis at the scrape.", "limiter"),
		slots:     d("limitd_slots_limit", "A concurrency limiter's limit.", "limiter"),
		remaining: d("limitd_window_remaining", "A window limiter's permits left in its current window, read from Redis at the scrape.", "limiter"),
		scraped:   d("limitd_limiters_scraped", "How many limiters this scrape read from Redis (at most 1000, in name order, within 5 s)."),
	}
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.backlog, c.held, c.capacity, c.inUse, c.slots, c.remaining, c.scraped} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	page, err := c.core.List(ctx, "", maxScraped)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(c.scraped, prometheus.GaugeValue, 0)
		return // Redis down: limitd_errors_total and /readyz say so
	}
	n := 0
	views, errs := c.core.Views(ctx, page.Limiters)
	for i, l := range views {
		if errs[i] != nil {
			continue // deleted since the list, or Redis too slow for the scrape
		}
		n++
		gauge := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l.Name)
		}
		switch {
		case l.State != nil && l.State.Window: // a window: Wait is the permits left
			remaining := l.State.Wait
			if !l.State.Started {
				remaining = l.State.Limit
			}
			gauge(c.remaining, float64(remaining))
		case l.State != nil:
			gauge(c.backlog, time.Duration(l.State.Wait).Seconds())
		case l.Holders != nil && l.Holders.Kind == limiter.KindShare:
			gauge(c.held, l.Holders.Held)
			if l.Config.Capacity != nil {
				gauge(c.capacity, *l.Config.Capacity)
			}
		case l.Holders != nil && l.Holders.Kind == limiter.KindConcurrency:
			gauge(c.inUse, float64(len(l.Holders.Slots)))
			if l.Config.Limit != nil {
				gauge(c.slots, float64(*l.Config.Limit))
			}
		}
	}
	ch <- prometheus.MustNewConstMetric(c.scraped, prometheus.GaugeValue, float64(n))
}

// signalCollector exposes the signals sampler's last samples (no Redis call
// at the scrape): each sampled limiter's utilization and the wait of a new
// caller, and the data losses this limitd found.
type signalCollector struct {
	sig        *signals
	core       *core.Service
	use, wait  *prometheus.Desc
	dataLosses *prometheus.Desc
}

func newSignalCollector(g *signals, c *core.Service) *signalCollector {
	return &signalCollector{
		sig: g, core: c,
		use: prometheus.NewDesc("limitd_limiter_utilization",
			"A named limiter's utilization, sampled every second: a rate limiter's granted permits/s over the last 10 s over its rate; a window's permits taken over its limit; a share limiter's capacity held over its capacity; a concurrency limiter's slots in use over its limit.", []string{"limiter"}, nil),
		wait: prometheus.NewDesc("limitd_limiter_wait_seconds",
			"How long a new caller asking one permit of a named limiter would wait, sampled every second (0: granted at once).", []string{"limiter"}, nil),
		dataLosses: prometheus.NewDesc("limitd_redis_data_lost_total",
			"Times this limitd found that Redis lost its data (limitd's marker gone: a restart without persistence, a FLUSHALL).", nil, nil),
	}
}

func (c *signalCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.use
	ch <- c.wait
	ch <- c.dataLosses
}

func (c *signalCollector) Collect(ch chan<- prometheus.Metric) {
	c.sig.lasts(func(name string, sm sample) {
		ch <- prometheus.MustNewConstMetric(c.use, prometheus.GaugeValue, float64(sm.use), name)
		ch <- prometheus.MustNewConstMetric(c.wait, prometheus.GaugeValue, time.Duration(sm.wait).Seconds(), name)
	})
	_, _, n := c.core.DataLoss()
	ch <- prometheus.MustNewConstMetric(c.dataLosses, prometheus.CounterValue, float64(n))
}
