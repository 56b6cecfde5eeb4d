package coremetrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/limitd/limitd/core"
)

// Decisions count in their series, kept at hand; a grant observes its delay
// and lateness, a denial adds no histogram series; a store call is timed by
// its operation.
func TestObserver(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg)
	m.Decided(core.Event{Kind: core.EventRate, Limiter: "a", Outcome: "granted", Permits: 3, Delay: time.Millisecond})
	m.Decided(core.Event{Kind: core.EventRate, Limiter: "a", Outcome: "granted", Permits: 2})
	m.Decided(core.Event{Kind: core.EventRate, Template: "user", Outcome: "denied", Permits: 1})
	m.Decided(core.Event{Kind: core.EventSlot, Limiter: "db", Outcome: "granted"})
	m.StoreCall(core.OpAcquire, 2*time.Millisecond)
	if got := value(t, m.decisions.WithLabelValues("a", "", "granted")); got != 2 {
		t.Errorf("granted %v, want 2", got)
	}
	if got := value(t, m.permits.WithLabelValues("a", "", "granted")); got != 5 {
		t.Errorf("permits %v, want 5", got)
	}
	if n := count(m.decisions); n != 2 {
		t.Errorf("%d decision series, want 2", n)
	}
	if n := count(m.delay); n != 1 {
		t.Errorf("%d delay series, want 1 (none for a denial)", n)
	}
	if got := value(t, m.slots.WithLabelValues("db", "", "granted")); got != 1 {
		t.Errorf("slots %v, want 1", got)
	}
	// A second observer of the registry counts in the same series.
	New(reg).Decided(core.Event{Kind: core.EventRate, Limiter: "a", Outcome: "granted"})
	if got := value(t, m.decisions.WithLabelValues("a", "", "granted")); got != 3 {
		t.Errorf("granted after a second observer: %v, want 3", got)
	}
}

// value reads a counter's value.
func value(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.Counter.GetValue()
}

// count is the number of series c holds.
func count(c prometheus.Collector) int {
	ch := make(chan prometheus.Metric, 100)
	c.Collect(ch)
	close(ch)
	return len(ch)
}
