// Package clientmetrics exports a client's handles as Prometheus metrics:
// an opt-in collector, so that package client itself imports no Prometheus.
//
//	reg.MustRegister(clientmetrics.New(c))
//
// Every series is labelled by the handle's limiter: limitd_client_permits_total
// (by source, shared or fallback), limitd_client_remote_calls_total and
// limitd_client_fallback, as their help (New) says.
//
// Layer: it imports client only.
package clientmetrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitd/limitd/client"
)

// Collector reads a client's Stats at each scrape.
type Collector struct {
	c                        *client.Client
	permits, calls, fallback *prometheus.Desc
}

// New returns a collector of c's handles; register it with a registry.
func New(c *client.Client) *Collector {
	return &Collector{
		c: c,
		permits: prometheus.NewDesc("limitd_client_permits_total",
			"Permits callers took through this client, by limiter and source (shared: the shared schedule; fallback: the local fallback while Redis was unreachable).",
			[]string{"limiter", "source"}, nil),
		calls: prometheus.NewDesc("limitd_client_remote_calls_total",
			"Grants, reservations and hand-backs this client sent to Redis (or the limitd server), by limiter, failed ones included.",
			[]string{"limiter"}, nil),
		fallback: prometheus.NewDesc("limitd_client_fallback",
			"1 while the handle of the limiter is in its fallback mode (Redis unreachable), else 0.",
			[]string{"limiter"}, nil),
	}
}

// Describe is prometheus.Collector's.
func (m *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.permits
	ch <- m.calls
	ch <- m.fallback
}

// Collect is prometheus.Collector's.
func (m *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range m.c.Stats() {
		ch <- prometheus.MustNewConstMetric(m.permits, prometheus.CounterValue, float64(s.SharedPermits), s.Name, "shared")
		ch <- prometheus.MustNewConstMetric(m.permits, prometheus.CounterValue, float64(s.FallbackPermits), s.Name, "fallback")
		ch <- prometheus.MustNewConstMetric(m.calls, prometheus.CounterValue, float64(s.RemoteCalls), s.Name)
		down := 0.0
		if s.Fallback {
			down = 1
		}
		ch <- prometheus.MustNewConstMetric(m.fallback, prometheus.GaugeValue, down, s.Name)
	}
}
