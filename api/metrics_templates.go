package api

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitd/limitd/core"
)

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
