package store_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd/internal/testkit/redistest"
	"github.com/limitd/limitd/store"
)

// trueClock is the time that passes for a test: Redis' clock (miniredis'
// TIME) is it, and the local clock the store estimates Redis' from is it
// plus a skew the test changes (a step, a suspend). Every read of the local
// clock lets tick pass, so that a round trip takes one tick.
type trueClock struct {
	mini       *miniredis.Miniredis
	now        time.Time
	skew, tick time.Duration
}

func (c *trueClock) advance(d time.Duration) {
	c.now = c.now.Add(d)
	c.mini.SetTime(c.now)
}

func (c *trueClock) local() int64 {
	c.advance(c.tick)
	return c.now.Add(c.skew).UnixNano()
}

func newFixedStore(t *testing.T, tick time.Duration) (*store.Store, *trueClock, *redis.Client) {
	t.Helper()
	mini, rdb := redistest.Mini(t)
	c := &trueClock{mini: mini, now: time.Unix(1_700_000_000, 400e6), skew: -3 * time.Hour, tick: tick}
	c.advance(0)
	s := store.New(rdb, store.WithLocalClock(c.local))
	t.Cleanup(func() { _ = s.Close() })
	return s, c, rdb
}

// A fixed window's hits are counted in the window holding Redis' time,
// within the bound (a hit sent within one round trip of a window's end may
// land in either), whatever the local clock does: skewed by hours, then
// jumping 5 s ahead, then 7 s back. The estimate takes one call to learn
// the clock (the script counts it), and one call after each jump finds its
// window wrong by TIME in its own pipeline, takes its hit back and counts it
// by the script; every other call goes without a script.
func TestFixedWindowFollowsRedisClock(t *testing.T) {
	const tick = 50 * time.Microsecond
	s, c, rdb := newFixedStore(t, tick)
	ctx := context.Background()
	period := time.Second
	f := &store.Fixed{Limit: 1 << 40, Period: period}
	perWindow := map[int64]int64{} // window start → hits the decisions put there
	const calls = 300
	for i := range calls {
		switch i {
		case calls / 3:
			c.skew += 5 * time.Second
		case 2 * calls / 3:
			c.skew -= 7 * time.Second
		}
		c.advance(37 * time.Millisecond)
		before := c.now.UnixNano()
		out := s.AcquireMany(ctx, []store.Request{{Name: "c", Permits: 1, Charge: true, Fixed: f}})
		after := c.now.UnixNano()
		if out[0].Err != nil || !out[0].Charged || !out[0].Window {
			t.Fatalf("call %d: %+v", i, out[0])
		}
		start := out[0].Position - int64(period)
		// Redis counted the hit between before and after: its window holds
		// a time within one round trip of that.
		rtt := after - before
		if start > after+rtt || out[0].Position <= before-rtt {
			t.Fatalf("call %d sent at Redis time %d..%d counted in the window %d..%d", i, before, after, start, out[0].Position)
		}
		if d := out[0].Position - out[0].Now; d <= 0 || d > int64(period) {
			t.Fatalf("call %d: reset in %v, want within the period", i, time.Duration(d))
		}
		perWindow[start]++
	}
	var total int64
	for start, n := range perWindow {
		got, err := rdb.Get(ctx, store.FixedKey(s, "c", start)).Int64()
		if err != nil || got != n {
			t.Errorf("window %d: counted %d (%v), the decisions put %d there", start, got, err, n)
		}
		total += got
	}
	if total != calls {
		t.Errorf("%d hits counted, want %d", total, calls)
	}
	// The jumps' wrong windows hold nothing left: every key is a window
	// the decisions name.
	keys, _ := rdb.Keys(ctx, "limitd:{c}:n:*").Result()
	for _, k := range keys {
		ms, _ := strconv.ParseInt(k[len("limitd:{c}:n:"):], 10, 64)
		if n := rdb.Get(ctx, k).Val(); perWindow[ms*1e6] == 0 && n != "0" {
			t.Errorf("%s holds %s hits, no decision counted there", k, n)
		}
	}
	if n := store.FixedScripted(s); n != 3 {
		t.Errorf("the script counted %d calls, want 3: the first, and one after each jump", n)
	}
}

// An estimate from a round trip over the limit (50 ms) is not trusted: the
// next call goes by the script (which samples again), and once round trips
// are short the estimate serves again.
func TestFixedWindowSlowRoundTrip(t *testing.T) {
	s, c, rdb := newFixedStore(t, 60*time.Millisecond)
	ctx := context.Background()
	f := &store.Fixed{Limit: 10, Period: time.Hour}
	hit := func() store.Outcome {
		t.Helper()
		o := s.AcquireMany(ctx, []store.Request{{Name: "c", Permits: 1, Charge: true, Fixed: f}})[0]
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		return o
	}
	hit()
	hit()
	if n := store.FixedScripted(s); n != 2 {
		t.Fatalf("%d calls by the script with 60 ms round trips, want 2", n)
	}
	c.tick = 100 * time.Microsecond
	hit() // by the script: the last sample's round trip was long
	o := hit()
	if n := store.FixedScripted(s); n != 3 {
		t.Errorf("%d calls by the script once round trips are short, want 3", n)
	}
	if o.Count != 4 || !o.Granted || o.Wait != 6 || o.Position != c.now.Truncate(time.Hour).Add(time.Hour).UnixNano() {
		t.Errorf("4th hit: %+v; want count 4, 6 left, reset at the hour", o.Decision)
	}
	// A new count's PEXPIRE goes once: the key has its TTL after Close.
	_ = s.Close()
	keys, _ := rdb.Keys(ctx, "limitd:{c}:n:*").Result()
	if len(keys) != 1 || rdb.PTTL(ctx, keys[0]).Val() <= time.Hour {
		t.Errorf("keys %v, TTL %v; want one count living past its hour", keys, rdb.PTTL(ctx, keys[0]).Val())
	}
}

// Hits of one counter in a batch go in one INCRBY, each decision seeing the
// count as it stood after its own hits; a check (0 hits) counts nothing
// and creates no key.
func TestFixedWindowBatch(t *testing.T) {
	s, _, rdb := newFixedStore(t, 100*time.Microsecond)
	ctx := context.Background()
	f := &store.Fixed{Limit: 5, Period: time.Minute}
	if o := s.AcquireMany(ctx, []store.Request{{Name: "b", Charge: true, Fixed: f}})[0]; o.Err != nil || !o.Granted || o.Count != 0 || o.Wait != 5 {
		t.Fatalf("check: %+v", o)
	}
	if keys := rdb.Keys(ctx, "limitd:{b}:n:*").Val(); len(keys) != 0 {
		t.Fatalf("a check created %v", keys)
	}
	reqs := []store.Request{
		{Name: "b", Permits: 2, Charge: true, Fixed: f},
		{Name: "b", Permits: 3, Charge: true, Fixed: f},
		{Name: "b", Permits: 1, Charge: true, Fixed: f},
		{Name: "b", Permits: 0, Charge: true, Fixed: f},
	}
	out := s.AcquireMany(ctx, reqs)
	want := []struct {
		count, left int64
		granted     bool
	}{{2, 3, true}, {5, 0, true}, {6, 0, false}, {6, 0, false}}
	for i, w := range want {
		o := out[i]
		if o.Err != nil || o.Count != w.count || o.Wait != w.left || o.Granted != w.granted || w.left == 0 && o.Delay != o.Position-o.Now {
			t.Errorf("request %d: %+v; want count %d, %d left, granted %t", i, o, w.count, w.left, w.granted)
		}
	}
	if keys := rdb.Keys(ctx, "limitd:{b}:n:*").Val(); len(keys) != 1 || rdb.Get(ctx, keys[0]).Val() != "6" {
		t.Errorf("keys %v: want one count of 6", keys)
	}
}

// Concurrent callers of one counter through the batcher: every hit counted
// once, and each decision saw the count after its own hit, so that the
// counts the callers were told are 1 to n, each once.
func TestFixedWindowBatched(t *testing.T) {
	mini, rdb := redistest.Mini(t)
	mini.SetTime(time.Unix(1_700_000_000, 0))
	s := store.New(rdb, store.WithBatching(64))
	t.Cleanup(func() { _ = s.Close() })
	const callers, each = 32, 40
	f := &store.Fixed{Limit: 1000, Period: time.Hour}
	seen := make(chan int64, callers*each)
	errs := make(chan error, callers)
	for range callers {
		go func() {
			for range each {
				o := s.AcquireManyWithin(context.Background(), []store.Request{{Name: "h", Permits: 1, Charge: true, Fixed: f}}, 5*time.Second)[0]
				if o.Err != nil {
					errs <- o.Err
					return
				}
				seen <- o.Count
			}
			errs <- nil
		}()
	}
	for range callers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	close(seen)
	got := make([]bool, callers*each+1)
	for c := range seen {
		if c < 1 || c > callers*each || got[c] {
			t.Fatalf("a decision told count %d (twice, or out of 1..%d)", c, callers*each)
		}
		got[c] = true
	}
	keys := rdb.Keys(context.Background(), "limitd:{h}:n:*").Val()
	if len(keys) != 1 || rdb.Get(context.Background(), keys[0]).Val() != strconv.Itoa(callers*each) {
		t.Errorf("keys %v: want one count of %d", keys, callers*each)
	}
}

// FixedReset deletes the counts of the window holding Redis' time and of
// the windows either side (those a skewed estimate may count in), and no
// other counter's or older window's; the next charge counts from nothing.
func TestFixedReset(t *testing.T) {
	s, c, rdb := newFixedStore(t, time.Millisecond)
	ctx := context.Background()
	f := store.Fixed{Limit: 5, Period: time.Minute}
	start := c.now.Truncate(time.Minute).UnixMilli() // Redis' window now
	key := func(name string, w int64) string {
		return "limitd:{" + name + "}:n:" + strconv.FormatInt(start+w*time.Minute.Milliseconds(), 10)
	}
	for w := int64(-2); w <= 1; w++ {
		rdb.Set(ctx, key("a", w), 9, 0)
	}
	rdb.Set(ctx, key("b", 0), 9, 0)
	if err := s.FixedReset(ctx, "a", f); err != nil {
		t.Fatal(err)
	}
	for w := int64(-2); w <= 1; w++ {
		want := int64(0)
		if w == -2 { // older: never counted again, it expires
			want = 1
		}
		if n, _ := rdb.Exists(ctx, key("a", w)).Result(); n != want {
			t.Errorf("window %+d: %d keys, want %d", w, n, want)
		}
	}
	if n, _ := rdb.Get(ctx, key("b", 0)).Int64(); n != 9 {
		t.Errorf("another counter: %d, want 9", n)
	}
	w, err := s.FixedWait(ctx, "a", f)
	if err != nil || w.Wait != 5 || w.Started {
		t.Errorf("after the reset: %+v, %v; want 5 left, not started", w, err)
	}
	if err := s.FixedReset(ctx, "a", store.Fixed{Limit: 5, Period: time.Minute + time.Microsecond}); err == nil {
		t.Error("a period of no whole ms: no error")
	}
}

// On a Redis server and on a cluster, FixedReset deletes one counter's
// window count (Redis' clock, its own slot) and no other's: the next charge
// of it counts 1.
func TestFixedResetRedis(t *testing.T) {
	for _, tc := range []struct {
		name string
		rdb  func(t *testing.T) redis.UniversalClient
	}{
		{"server", func(t *testing.T) redis.UniversalClient { return redistest.Server(t).Client() }},
		{"cluster", func(t *testing.T) redis.UniversalClient {
			c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: redistest.Cluster(t).Addrs()})
			t.Cleanup(func() { _ = c.Close() })
			return c
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := store.New(tc.rdb(t))
			t.Cleanup(func() { _ = s.Close() })
			ctx := context.Background()
			f := &store.Fixed{Limit: 100, Period: time.Hour}
			var end int64 // the window's end (Redis' real clock)
			charge := func(name string) int64 {
				t.Helper()
				o := s.AcquireManyWithin(ctx, []store.Request{{Name: name, Permits: 1, Charge: true, Fixed: f}}, 5*time.Second)[0]
				if o.Err != nil {
					t.Fatal(o.Err)
				}
				if end == 0 {
					end = o.Position
				} else if o.Position != end {
					t.Skip("the hour turned during the test: the counts are of two windows")
				}
				return o.Count
			}
			names := []string{"ann", "bob", "cy", "dee", "eve", "flo"} // several slots
			for range 3 {
				for _, n := range names {
					charge(n)
				}
			}
			if err := s.FixedReset(ctx, "ann", *f); err != nil {
				t.Fatal(err)
			}
			if n := charge("ann"); n != 1 {
				t.Errorf("ann after the reset: count %d, want 1", n)
			}
			for _, n := range names[1:] {
				if c := charge(n); c != 4 {
					t.Errorf("%s: count %d, want 4 (not reset)", n, c)
				}
			}
		})
	}
}
