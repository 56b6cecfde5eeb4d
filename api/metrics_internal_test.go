package api

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// A request counts under its method (made-up ones as other), route and
// status.
func TestMetricsKeptSeries(t *testing.T) {
	m := newMetrics(prometheus.NewRegistry(), "test")
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
