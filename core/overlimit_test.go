package core

import (
	"context"
	"testing"
	"time"

	"github.com/limitd/limitd/internal/testkit/redistest"
	"github.com/limitd/limitd/internal/testkit/storetest"
	"github.com/limitd/limitd/limiter"
)

// overRig is a service with the over-limit cache of size n over miniredis,
// whose time and the service's clock move together (t0 is 9 s into a
// minute), with window limiters w1, w2 and w3 (2 a minute; w2 in shadow
// mode) and a sliding s1 (2 a minute).
func overRig(t *testing.T, n int) (*Service, *redistest.MiniClock, *recorder) {
	t.Helper()
	m, _, st := storetest.Mini(t)
	clk := redistest.NewMiniClock(m, t0)
	rec := &recorder{}
	s := New(st, Options{Observer: rec, Clock: clk, OverLimitCache: n})
	two := int64(2)
	for name, c := range map[string]limiter.Config{
		"w1": {Kind: limiter.KindWindow, Limit: &two, Period: "1m"},
		"w2": {Kind: limiter.KindWindow, Limit: &two, Period: "1m", Shadow: true},
		"w3": {Kind: limiter.KindWindow, Limit: &two, Period: "1m"},
		"s1": {Kind: limiter.KindWindow, Limit: &two, Period: "1m", Sliding: true},
	} {
		if _, _, err := s.Put(context.Background(), name, c); err != nil {
			t.Fatal(err)
		}
	}
	return s, clk, rec
}

func count1(t *testing.T, s *Service, name string, hits int64) (CountResult, Count) {
	t.Helper()
	r, err := s.Count(context.Background(), CountRequest{Counters: []Counter{{Name: name, Hits: hits}}})
	if err != nil {
		t.Fatalf("count %s %d: %v", name, hits, err)
	}
	return r, r.Counts[0]
}

// A counter over its window's limit is answered from the cache, over and
// not counted, until its window ends on the clock that sent the call; a
// check still asks Redis, which has not counted the cached hits.
func TestOverLimitCache(t *testing.T) {
	s, clk, rec := overRig(t, 8)
	if _, c := count1(t, s, "w1", 3); !c.Over || !c.Counted || c.Used != 3 {
		t.Fatalf("3 hits of 2: %+v, want over, counted, 3", c)
	}
	end := t0.Add(51 * time.Second) // the minute's end
	r, c := count1(t, s, "w1", 1)
	if !r.Refused || !c.Over || c.Counted || !c.Window || c.Limit != 2 || c.Remaining != 0 || c.Used != 3 ||
		c.Reset != end.UnixNano() || c.Now != t0.UnixNano() {
		t.Fatalf("cached: %+v (refused %v), want over, not counted, 2, 0 left, 3 used, reset at the window's end now", c, r.Refused)
	}
	if e := rec.events[len(rec.events)-1]; e.Outcome != "denied" || e.Permits != 1 {
		t.Errorf("cached answer observed as %+v, want denied, 1", e)
	}
	if _, c := count1(t, s, "w1", 0); !c.Over || !c.Counted || c.Used != 3 {
		t.Fatalf("a check: %+v, want asked of Redis: over, still 3", c)
	}
	clk.Sleep(context.Background(), end.Sub(clk.Now())-time.Microsecond)
	if _, c := count1(t, s, "w1", 1); !c.Over || c.Counted || c.Now != end.UnixNano()-1000 {
		t.Fatalf("1 µs before the window's end: %+v, want cached", c)
	}
	clk.Sleep(context.Background(), time.Microsecond)
	if _, c := count1(t, s, "w1", 1); c.Over || !c.Counted || c.Used != 1 {
		t.Fatalf("at the window's end: %+v, want asked of Redis: a new window, 1 used", c)
	}
}

// The cache holds at most its size, the oldest entry dropped first; it is
// emptied by ClearOverLimit; off (0), every call asks Redis.
func TestOverLimitCacheBounds(t *testing.T) {
	s, _, _ := overRig(t, 2)
	for _, name := range []string{"w1", "w3", "s1"} {
		count1(t, s, name, 3)
	}
	if n := s.over.len(); n != 2 {
		t.Fatalf("%d entries, want 2", n)
	}
	if _, c := count1(t, s, "w1", 1); !c.Counted || c.Used != 4 {
		t.Errorf("the oldest, dropped: %+v, want asked of Redis, 4 used", c)
	}
	if _, c := count1(t, s, "s1", 1); c.Counted {
		t.Errorf("the newest: %+v, want cached", c)
	}
	s.ClearOverLimit()
	if _, c := count1(t, s, "s1", 1); !c.Counted || c.Used != 4 {
		t.Errorf("after ClearOverLimit: %+v, want asked of Redis, 4 used", c)
	}
	off, _, _ := overRig(t, 0)
	count1(t, off, "w1", 3)
	if _, c := count1(t, off, "w1", 1); !c.Counted || c.Used != 4 {
		t.Errorf("without the cache: %+v, want asked of Redis, 4 used", c)
	}
}

// A reset or delete through the service drops the counter's entry: the
// next call is asked of Redis, which counts it in a fresh window.
func TestOverLimitCacheForgetsReset(t *testing.T) {
	s, _, _ := overRig(t, 8)
	ctx := context.Background()
	count1(t, s, "w1", 3)
	count1(t, s, "w3", 3)
	if _, err := s.Reset(ctx, "w1"); err != nil {
		t.Fatal(err)
	}
	if r, c := count1(t, s, "w1", 1); r.Refused || !c.Counted || c.Used != 1 {
		t.Errorf("after the reset: %+v (refused %v), want asked of Redis: 1 used, granted", c, r.Refused)
	}
	if err := s.Delete(ctx, "w3"); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.over.get("w3", time.Now()); ok {
		t.Error("after the delete: w3 still cached")
	}
}

// A cached counter in shadow mode stays in shadow mode; the call's other
// counters are still asked and counted.
func TestOverLimitCacheShadowAndOthers(t *testing.T) {
	s, _, _ := overRig(t, 8)
	count1(t, s, "w2", 3)
	r, err := s.Count(context.Background(), CountRequest{Counters: []Counter{{Name: "w2", Hits: 1}, {Name: "w1", Hits: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	if c := r.Counts[0]; r.Refused || !c.Over || !c.Shadow || c.Counted {
		t.Errorf("cached shadow counter: %+v (refused %v), want over in shadow mode, not counted, call let through", c, r.Refused)
	}
	if c := r.Counts[1]; c.Over || !c.Counted || c.Used != 1 {
		t.Errorf("the other counter: %+v, want counted", c)
	}
}

// Under strict counting (the reference's
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT with its local cache) a window
// counter that a call of one hit finds full is held as over until one hit
// fits again: a call naming it is refused at once, nothing counted, the
// other counters only checked, and Redis not asked when it names only
// held counters. A shadow-mode counter is never held.
func TestOverLimitCacheStrict(t *testing.T) {
	s, clk, rec := overRig(t, 8)
	ctx := context.Background()
	strict := func(cs ...Counter) CountResult {
		t.Helper()
		r, err := s.Count(ctx, CountRequest{Counting: CountStrict, Counters: cs})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for range 2 {
		if r := strict(Counter{Name: "w1", Hits: 1}); r.Refused {
			t.Fatalf("within the limit: %+v", r)
		}
	}
	if r := strict(Counter{Name: "w1", Hits: 1}); !r.Refused || !r.Counts[0].Over || r.Counts[0].Counted {
		t.Fatalf("full: %+v, want refused, not counted", r)
	}
	// Held: a reset by another process is not seen, and Redis is not asked.
	if _, err := over(s.store.backend, Options{}).Reset(ctx, "w1"); err != nil {
		t.Fatal(err)
	}
	calls := len(rec.calls)
	if r := strict(Counter{Name: "w1", Hits: 1}); !r.Refused || !r.Counts[0].Over || r.Counts[0].Counted || r.Counts[0].Used != 2 {
		t.Fatalf("held: %+v, want refused from the cache (2 used when it was put)", r)
	}
	if len(rec.calls) != calls {
		t.Errorf("held: Redis asked (%v)", rec.calls[calls:])
	}
	// With another counter: refused, the other checked and not counted.
	r := strict(Counter{Name: "w3", Hits: 1}, Counter{Name: "w1", Hits: 1})
	if !r.Refused || r.Counts[0].Over || r.Counts[0].Counted || r.Counts[0].Remaining != 2 || !r.Counts[1].Over {
		t.Fatalf("w3 and a held w1: %+v, want refused, w3 checked (2 left), w1 over", r)
	}
	if r := strict(Counter{Name: "w3", Hits: 2}); r.Refused || r.Counts[0].Used != 2 {
		t.Fatalf("w3 after: %+v, want granted, 2 used (the refused call counted nothing)", r)
	}
	// A shadow-mode counter over its limit is not held.
	for range 3 {
		strict(Counter{Name: "w2", Hits: 1})
	}
	calls = len(rec.calls)
	if r := strict(Counter{Name: "w2", Hits: 1}); r.Refused || !r.Counts[0].Shadow || len(rec.calls) == calls {
		t.Fatalf("shadow w2: %+v (Redis asked: %v), want let through and asked of Redis", r, len(rec.calls) > calls)
	}
	// At the window's end the entry ends: asked again, and the reset seen.
	clk.Sleep(ctx, t0.Add(51*time.Second).Sub(clk.Now()))
	if r := strict(Counter{Name: "w1", Hits: 1}); r.Refused || !r.Counts[0].Counted || r.Counts[0].Used != 1 {
		t.Fatalf("the next window: %+v, want granted, 1 used", r)
	}
}

// len is how many entries the cache holds (some may have ended).
func (c *overLimit) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}
