package coremetrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

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
	if got := testutil.ToFloat64(m.decisions.WithLabelValues("a", "", "granted")); got != 2 {
		t.Errorf("granted %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.permits.WithLabelValues("a", "", "granted")); got != 5 {
		t.Errorf("permits %v, want 5", got)
	}
	if n := testutil.CollectAndCount(m.decisions); n != 2 {
		t.Errorf("%d decision series, want 2", n)
	}
	if n := testutil.CollectAndCount(m.delay); n != 1 {
		t.Errorf("%d delay series, want 1 (none for a denial)", n)
	}
	if got := testutil.ToFloat64(m.slots.WithLabelValues("db", "", "granted")); got != 1 {
		t.Errorf("slots %v, want 1", got)
	}
	// A second observer of the registry counts in the same series.
	New(reg).Decided(core.Event{Kind: core.EventRate, Limiter: "a", Outcome: "granted"})
	if got := testutil.ToFloat64(m.decisions.WithLabelValues("a", "", "granted")); got != 3 {
		t.Errorf("granted after a second observer: %v, want 3", got)
	}
}
