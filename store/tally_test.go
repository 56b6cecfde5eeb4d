package store

import (
	"cmp"
	"context"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
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

// A flush's top instances per template are its topK largest by refused and
// by granted permits, ties to the name first in order, none of zero:
// the heap's choice against a sort of every instance.
func TestTallyTop(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 5, 99, 100, 101, 1000} {
		iv := newInterval()
		for i := range n {
			tpl := []string{"a", "b"}[i%2]
			c := limitd.Counts{GrantedCalls: 1, GrantedPermits: rng.Int64N(4), RefusedCalls: 1, RefusedPermits: rng.Int64N(3)}
			iv.add(limitd.Subject{Template: tpl, Instance: tpl + ":" + strconv.Itoa(rng.IntN(n*2))}, c, 10_000)
		}
		iv.add(limitd.Subject{Limiter: "orders"}, limitd.Counts{GrantedCalls: 1, GrantedPermits: 1}, 10_000)
		b := iv.batch(7, 100)
		if b.Limiters["orders"] != (limitd.Counts{GrantedCalls: 1, GrantedPermits: 1}) || len(b.Limiters) != 1 {
			t.Errorf("%d: limiters %v", n, b.Limiters)
		}
		for _, ta := range b.Top {
			for _, by := range []struct {
				got map[string]int64
				of  func(limitd.Counts) int64
			}{{ta.Refused, func(c limitd.Counts) int64 { return c.RefusedPermits }}, {ta.Granted, func(c limitd.Counts) int64 { return c.GrantedPermits }}} {
				type e struct {
					name string
					n    int64
				}
				var all []e
				for _, x := range iv.names {
					if x.template == ta.Template && by.of(x.Counts) > 0 {
						all = append(all, e{x.name, by.of(x.Counts)})
					}
				}
				slices.SortFunc(all, func(a, b e) int { return cmp.Or(cmp.Compare(b.n, a.n), cmp.Compare(a.name, b.name)) })
				want := map[string]int64{}
				for _, x := range all[:min(len(all), 100)] {
					want[x.name] = x.n
				}
				if !maps.Equal(by.got, want) {
					t.Errorf("%d, template %s: top %v, want %v", n, ta.Template, by.got, want)
				}
			}
			if ta.Minute != 7 {
				t.Errorf("minute %d, want 7", ta.Minute)
			}
		}
		iv.reset()
		if len(iv.names) != 0 || len(iv.instances) != 0 || len(iv.limiters) != 0 || len(iv.templates) != 0 {
			t.Errorf("%d: reset left %+v", n, iv)
		}
	}
}

// Intervals take turns: counts after a flush are the new interval's only.
func TestTallyIntervalsReused(t *testing.T) {
	s, _ := miniStore(t)
	ctx := context.Background()
	tl := s.NewTally(TallyOptions{Clock: func() time.Time { return time.Unix(600, 0) }})
	for round := 1; round <= 3; round++ {
		for i := range round {
			tl.Add(limitd.Subject{Template: "per-user", Instance: "user:" + strconv.Itoa(i)}, limitd.Counts{RefusedCalls: 1, RefusedPermits: 1})
			tl.Add(limitd.Subject{Limiter: "orders"}, limitd.Counts{GrantedCalls: 1, GrantedPermits: 2})
		}
		if err := tl.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	c, err := s.Totals(ctx, []string{"orders"})
	if err != nil || c[0] != (limitd.Counts{GrantedCalls: 6, GrantedPermits: 12}) {
		t.Errorf("orders %+v, %v: want 6 calls of 2", c, err)
	}
	tt, err := s.TemplateTotals(ctx, "per-user")
	if err != nil || tt != (limitd.Counts{RefusedCalls: 6, RefusedPermits: 6}) {
		t.Errorf("per-user %+v, %v: want 6 refusals", tt, err)
	}
}
