package api

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/limitd/limitd/core"
)

// The series kept at hand are the registry's: a deleted limiter's backlog
// series goes, and comes back with its next backlog.
func TestMetricsKeptSeries(t *testing.T) {
	m := newMetrics(prometheus.NewRegistry(), "test")
	m.Backlog("a", time.Second)
	m.Decided(core.Event{Kind: core.EventRate, Limiter: "a", Outcome: "granted"})
	m.Decided(core.Event{Kind: core.EventRate, Limiter: "a", Outcome: "granted"})
	if got := value(t, m.backlog.WithLabelValues("a")); got != 1 {
		t.Errorf("backlog %v, want 1", got)
	}
	if got := value(t, m.decisions.WithLabelValues("a", "", "granted")); got != 2 {
		t.Errorf("granted %v, want 2", got)
	}
	if n := count(m.decisions); n != 1 {
		t.Errorf("%d decision series, want 1 (no denied series before a denial)", n)
	}
	m.Deleted("a")
	if n := count(m.backlog); n != 0 {
		t.Errorf("%d backlog series after Deleted, want 0", n)
	}
	m.Backlog("a", 2*time.Second)
	if got := value(t, m.backlog.WithLabelValues("a")); got != 2 {
		t.Errorf("backlog after Deleted and a new backlog %v, want 2", got)
	}

	rt := &route{label: "/x"}
	m.request(rt, "POST", 200, time.Millisecond)
	m.request(rt, "POST", 200, time.Millisecond)
	m.request(rt, "BREW", 418, time.Millisecond)
	if got := value(t, m.requests.WithLabelValues("POST", "/x", "200")); got != 2 {
		t.Errorf("requests %v, want 2", got)
	}
	if got := value(t, m.requests.WithLabelValues("other", "/x", "418")); got != 1 {
		t.Errorf("made-up method: %v, want 1 under other", got)
	}
}

// value reads a counter's or a gauge's value.
func value(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	if d.Counter != nil {
		return d.Counter.GetValue()
	}
	return d.Gauge.GetValue()
}

// count is the number of series c holds.
func count(c prometheus.Collector) int {
	ch := make(chan prometheus.Metric, 100)
	c.Collect(ch)
	close(ch)
	return len(ch)
}
