package api

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A request counts under its method (made-up ones as other), route and
// status.
func TestMetricsKeptSeries(t *testing.T) {
	m := newMetrics(prometheus.NewRegistry(), "test")
	rt := &route{label: "/x"}
	m.request(rt, "POST", 200, time.Millisecond)
	m.request(rt, "POST", 200, time.Millisecond)
	m.request(rt, "BREW", 418, time.Millisecond)
	if got := testutil.ToFloat64(m.requests.WithLabelValues("POST", "/x", "200")); got != 2 {
		t.Errorf("requests %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues("other", "/x", "418")); got != 1 {
		t.Errorf("made-up method: %v, want 1 under other", got)
	}
}
