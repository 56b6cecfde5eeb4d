package store

import (
	"context"
	"testing"
	"time"

	"github.com/limitd/limitd"
)

// A flush Redis does not take keeps its counts for the next one, as far as
// MaxNames allows: a name past the cap still counts in its template, and
// Overflow counts its calls.
func TestTallyFailedFlushKeepsCounts(t *testing.T) {
	s, m := miniStore(t)
	ctx := context.Background()
	tl := s.NewTally(TallyOptions{MaxNames: 2, Clock: func() time.Time { return time.Unix(600, 0) }})
	refused := limitd.Counts{RefusedCalls: 1, RefusedPermits: 4}
	tl.Add(limitd.Subject{Limiter: "orders"}, refused)
	tl.Add(limitd.Subject{Template: "per-user", Instance: "user:1"}, refused)
	m.SetError("LOADING")
	if err := tl.Flush(ctx); err == nil {
		t.Fatal("a flush Redis refused answered no error")
	}
	m.SetError("")
	if tl.Failed() != 1 {
		t.Errorf("failed %d, want 1", tl.Failed())
	}
	// The put-back filled the interval: a third name counts in its
	// template only.
	tl.Add(limitd.Subject{Template: "per-user", Instance: "user:2"}, refused)
	tl.Add(limitd.Subject{Limiter: "orders"}, refused)
	if err := tl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := s.Totals(ctx, []string{"orders"})
	if err != nil || c[0] != (limitd.Counts{RefusedCalls: 2, RefusedPermits: 8}) {
		t.Errorf("orders %+v, %v: want both refusals", c, err)
	}
	tt, err := s.TemplateTotals(ctx, "per-user")
	if err != nil || tt != (limitd.Counts{RefusedCalls: 2, RefusedPermits: 8}) {
		t.Errorf("per-user %+v, %v: want both instances' refusals", tt, err)
	}
	top, err := m.SortedSet(s.topKey("per-user", true, 10))
	if err != nil || len(top) != 1 || top["user:1"] != 4 {
		t.Errorf("the top bucket %v, %v: want user:1 at 4 alone", top, err)
	}
	if tl.Overflow() != 1 {
		t.Errorf("overflow %d, want 1 (user:2's call, past the cap)", tl.Overflow())
	}
}
