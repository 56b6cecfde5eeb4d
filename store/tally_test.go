package store

import (
	"cmp"
	"context"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

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
		iv, r := newInterval(), &room{max: 10_000}
		for i := range n {
			tpl := []string{"a", "b"}[i%2]
			c := limitd.Counts{GrantedCalls: 1, GrantedPermits: rng.Int64N(4), RefusedCalls: 1, RefusedPermits: rng.Int64N(3)}
			iv.add(limitd.Subject{Template: tpl, Instance: tpl + ":" + strconv.Itoa(rng.IntN(n*2))}, c, r)
		}
		iv.add(limitd.Subject{Limiter: "orders"}, limitd.Counts{GrantedCalls: 1, GrantedPermits: 1}, r)
		b := batchOf([]interval{iv}, 7, 100)
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

// Counting in shards changes nothing a flush writes: the same decisions,
// flushes and failed flushes through a tally of 16 shards and one of a
// single shard (one mutex over one interval, as before shards) leave the
// same totals and tops in Redis and the same Overflow, MaxNames bounding
// the names of all shards together and the first names taking the places.
func TestTallyShardsCountAsOne(t *testing.T) {
	ctx := context.Background()
	clock := func() time.Time { return time.Unix(600, 0) }
	type side struct {
		s  *Store
		m  *miniredis.Miniredis
		tl *Tally
	}
	var sides [2]side
	for i, n := range []int{1, 16} {
		s, m := miniStore(t)
		sides[i] = side{s, m, s.newTally(TallyOptions{MaxNames: 300, TopK: 20, Clock: clock}, n)}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for round := range 8 {
		for range 2_000 {
			var subj limitd.Subject
			switch k := rng.IntN(10); {
			case k == 0:
				subj = limitd.Subject{Limiter: "lim:" + strconv.Itoa(rng.IntN(200))}
			case k == 1:
				subj = limitd.Subject{Template: "t" + strconv.Itoa(rng.IntN(3))}
			default:
				tpl := "t" + strconv.Itoa(rng.IntN(3))
				subj = limitd.Subject{Template: tpl, Instance: tpl + ":" + strconv.Itoa(rng.IntN(400))}
			}
			c := limitd.Counts{GrantedCalls: 1, GrantedPermits: rng.Int64N(5)}
			if rng.IntN(3) == 0 {
				c = limitd.Counts{RefusedCalls: 1, RefusedPermits: rng.Int64N(5)}
			}
			for _, sd := range sides {
				sd.tl.Add(subj, c)
			}
		}
		fail := round%3 == 1 // a flush Redis refuses: its counts go back
		for _, sd := range sides {
			if fail {
				sd.m.SetError("LOADING")
			}
			if err := sd.tl.Flush(ctx); (err != nil) != fail {
				t.Fatalf("round %d: flush answered %v", round, err)
			}
			sd.m.SetError("")
		}
	}
	one, sharded := sides[0], sides[1]
	if one.tl.Overflow() == 0 || one.tl.Failed() == 0 {
		t.Fatalf("overflow %d, failed %d: the test should pass the cap and fail flushes", one.tl.Overflow(), one.tl.Failed())
	}
	if sharded.tl.Overflow() != one.tl.Overflow() || sharded.tl.Failed() != one.tl.Failed() {
		t.Errorf("16 shards: overflow %d, failed %d; one: %d, %d", sharded.tl.Overflow(), sharded.tl.Failed(), one.tl.Overflow(), one.tl.Failed())
	}
	if a, b := one.m.Dump(), sharded.m.Dump(); a != b {
		t.Errorf("Redis after 16 shards:\n%s\nafter one:\n%s", b, a)
	}
}

// MaxNames bounds the names of every shard together when many goroutines
// count at once: exactly MaxNames names are kept, and every decision counts
// either under its name or in Overflow, and always in its template.
func TestTallyShardsMaxNames(t *testing.T) {
	s, _ := miniStore(t)
	const maxNames, workers, each = 1_000, 16, 2_000
	tl := s.NewTally(TallyOptions{MaxNames: maxNames, Clock: func() time.Time { return time.Unix(600, 0) }})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				tl.Add(limitd.Subject{Template: "per-user", Instance: "user:" + strconv.Itoa((w*7919+i*31)%5_000)}, limitd.Counts{GrantedCalls: 1, GrantedPermits: 1})
			}
		})
	}
	wg.Wait()
	var names, calls int64
	seqs := map[int64]bool{}
	for i := range tl.shards {
		for _, x := range tl.shards[i].cur.names {
			names++
			calls += x.GrantedCalls
			seqs[x.seq] = true
		}
	}
	if names != maxNames || len(seqs) != maxNames {
		t.Errorf("%d names kept (%d places), want %d", names, len(seqs), maxNames)
	}
	if calls+tl.Overflow() != workers*each {
		t.Errorf("%d calls by name and %d in overflow, want %d together", calls, tl.Overflow(), workers*each)
	}
	if err := tl.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if tt, err := s.TemplateTotals(context.Background(), "per-user"); err != nil || tt != (limitd.Counts{GrantedCalls: workers * each, GrantedPermits: workers * each}) {
		t.Errorf("per-user %+v, %v: want every call", tt, err)
	}
}

// A failed flush's names go back in the order they came in its interval,
// whatever their shards: when decisions on new names came in meanwhile and
// took places, the last of them are those left out, as with one shard.
func TestTallyPutBackInOrder(t *testing.T) {
	s, _ := miniStore(t)
	for _, n := range []int{1, 16} {
		tl := s.newTally(TallyOptions{MaxNames: 40}, n)
		for i := range 40 {
			tl.Add(limitd.Subject{Template: "per-user", Instance: "user:" + strconv.Itoa(i)}, limitd.Counts{GrantedCalls: int64(i + 1)})
		}
		ivs, _ := tl.swap() // a flush Redis then refuses…
		for i := range 3 {  // …while three new names take places
			tl.Add(limitd.Subject{Limiter: "new:" + strconv.Itoa(i)}, limitd.Counts{RefusedCalls: 1})
		}
		tl.putBack(ivs)
		if want := int64(38 + 39 + 40); tl.Overflow() != want {
			t.Errorf("%d shards: overflow %d, want %d (user:37..39's calls)", n, tl.Overflow(), want)
		}
	}
}
