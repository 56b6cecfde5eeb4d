package client_test

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/limitd/limitd/client"
	"github.com/limitd/limitd/client/redisclient"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

// Share clients (Doorman) over miniredis and a real redis-server. Helpers of
// this file carry the prefix sh.

// shConfig is a share limiter of the given capacity (fair_share).
func shConfig(capacity float64, lease, refresh time.Duration) limiter.Config {
	return limiter.Config{Kind: limiter.KindShare, Capacity: &capacity,
		Lease: limiter.D(lease), RefreshInterval: limiter.D(refresh)}
}

// shBackends runs f over miniredis and over a real redis-server.
func shBackends(t *testing.T, f func(t *testing.T, rdb *redis.Client, st *store.Store)) {
	t.Run("miniredis", func(t *testing.T) {
		_, rdb, st := ctMini(t)
		f(t, rdb, st)
	})
	t.Run("redis", func(t *testing.T) {
		_, rdb, st := ctServer(t)
		f(t, rdb, st)
	})
}

// shClocked runs f with a driven clock over miniredis, whose clock follows
// it, and over a redis-server, whose clock does not.
func shClocked(t *testing.T, f func(t *testing.T, clk *ctClock, st *store.Store)) {
	t.Run("miniredis", func(t *testing.T) {
		clk, _, st := ctDriven(t)
		f(t, clk, st)
	})
	t.Run("redis", func(t *testing.T) {
		_, _, st := ctServer(t)
		f(t, ctLocalClock(), st)
	})
}

// shPut puts a limiter once Redis answers again: after failed dials the
// Redis client refuses at once for a while.
func shPut(t *testing.T, st *store.Store, name string, c limiter.Config) {
	t.Helper()
	var err error
	if !ctEventually(3*time.Second, func() bool {
		_, _, err = st.Put(context.Background(), name, c)
		return err == nil
	}) {
		t.Fatalf("Put %s: %v", name, err)
	}
}

func shShare(t *testing.T, c *client.Client, name string, opts ...client.ShareOption) *client.Share {
	t.Helper()
	s, err := c.Share(name, opts...)
	if err != nil {
		t.Fatalf("Share(%s): %v", name, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func shGets(ss ...*client.Share) []float64 {
	out := make([]float64, len(ss))
	for i, s := range ss {
		out[i] = s.Gets()
	}
	return out
}

func shNear(got, want, tol float64) bool { return math.Abs(got-want) <= tol }

// Doorman's worked example: capacity 120, fair share, three clients wanting
// 1000, 50 and 10. Asking in turn, the first takes all (nobody else holds
// any), the others get what is left; once each has asked again twice, the
// shares are 60/50/10, and at no step does the sum exceed the capacity.
// With two clients (1000 and 50): 70/50.
func TestShareDoormanWorkedExample(t *testing.T) {
	shBackends(t, func(t *testing.T, rdb *redis.Client, st *store.Store) {
		ctx := context.Background()
		for _, tc := range []struct {
			wants, want []float64
		}{
			{[]float64{1000, 50, 10}, []float64{60, 50, 10}},
			{[]float64{1000, 50}, []float64{70, 50}},
		} {
			name := "doorman" + string(rune('0'+len(tc.wants)))
			ctPut(t, st, name, shConfig(120, time.Minute, 5*time.Second)) // nobody refreshes by itself meanwhile
			c := redisclient.New(rdb)
			var ss []*client.Share
			for i, w := range tc.wants {
				ss = append(ss, shShare(t, c, name, client.WithClientID(string(rune('a'+i))), client.WithWants(w)))
			}
			check := func(when string) {
				t.Helper()
				var sum float64
				for _, g := range shGets(ss...) {
					sum += g
				}
				if sum > 120+1e-9 {
					t.Fatalf("%s: gets %v sum to %v > capacity 120", when, shGets(ss...), sum)
				}
			}
			check("first requests")
			if g := ss[0].Gets(); g != 120 {
				t.Fatalf("first client alone gets %v, want 120", g)
			}
			for round := range 2 {
				for _, s := range ss {
					if err := s.Refresh(ctx); err != nil {
						t.Fatal(err)
					}
					check("refresh")
				}
				t.Logf("%v after refresh round %d: %v", tc.wants, round+1, shGets(ss...))
			}
			for i, s := range ss {
				if g := s.Gets(); !shNear(g, tc.want[i], 1e-9) {
					t.Fatalf("wants %v: gets %v, want %v", tc.wants, shGets(ss...), tc.want)
				}
				if l := s.Lease(); !l.Valid || l.Fallback || l.Wants != tc.wants[i] || l.Gets != s.Gets() || l.Refresh != 5*time.Second {
					t.Fatalf("lease of client %d: %+v", i, l)
				}
			}
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// WithPriority weighs a share's claim: two clients wanting more than the
// capacity of 120 split it 2:1 when one asks with priority 2, and the
// limiter's holders show the priority each asked with.
func TestShareWithPriority(t *testing.T) {
	shBackends(t, func(t *testing.T, rdb *redis.Client, st *store.Store) {
		ctx := context.Background()
		ctPut(t, st, "weighted", shConfig(120, time.Minute, 5*time.Second))
		c := redisclient.New(rdb)
		defer c.Close()
		hi := shShare(t, c, "weighted", client.WithClientID("hi"), client.WithWants(1000), client.WithPriority(2))
		lo := shShare(t, c, "weighted", client.WithClientID("lo"), client.WithWants(1000))
		for range 2 {
			for _, s := range []*client.Share{hi, lo} {
				if err := s.Refresh(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
		if g := shGets(hi, lo); !shNear(g[0], 80, 1e-9) || !shNear(g[1], 40, 1e-9) {
			t.Fatalf("gets %v with priorities 2 and 1, want [80 40]", g)
		}
		hs, err := st.Holders(ctx, "weighted")
		if err != nil {
			t.Fatal(err)
		}
		prio := map[string]float64{}
		for _, h := range hs.Share {
			prio[h.ClientID] = h.Priority
		}
		if prio["hi"] != 2 || prio["lo"] > 1 {
			t.Fatalf("holders' priorities %v, want hi 2 and lo 1 (or 0, counted as 1)", prio)
		}
	})
}

// The same example with the refreshers doing the work: after two refresh
// intervals the shares have settled, whatever the order the clients asked in.
func TestShareRefreshesByItself(t *testing.T) {
	_, rdb, st := ctServer(t)
	ctPut(t, st, "auto", shConfig(120, time.Second, 100*time.Millisecond))
	c := redisclient.New(rdb)
	defer c.Close()
	var ss []*client.Share
	for _, w := range []float64{1000, 50, 10} {
		ss = append(ss, shShare(t, c, "auto", client.WithWants(w)))
	}
	want := []float64{60, 50, 10}
	// Two refresh intervals settle it; the bound is for a busy machine.
	if !ctEventually(10*time.Second, func() bool {
		g := shGets(ss...)
		return shNear(g[0], want[0], 1e-9) && shNear(g[1], want[1], 1e-9) && shNear(g[2], want[2], 1e-9)
	}) {
		t.Fatalf("gets %v 10s in (100 refresh intervals), want %v", shGets(ss...), want)
	}
	// SetWants asks at once: the third client wanting 30 gets its equal
	// share (40 each, of which it wants 30), the 10 it leaves split between
	// the others as they refresh.
	if err := ss[2].SetWants(30); err != nil {
		t.Fatal(err)
	}
	if !ctEventually(10*time.Second, func() bool {
		g := shGets(ss...)
		return shNear(g[0], 45, 1e-9) && shNear(g[1], 45, 1e-9) && shNear(g[2], 30, 1e-9)
	}) {
		t.Fatalf("after SetWants(30): gets %v, want [45 45 30]", shGets(ss...))
	}
}

// Used as a rate, a share lets through Gets operations a second; a share
// that gets nothing lets nothing through, and Close returns capacity for
// others to take. The client's clock is driven: over miniredis Redis follows
// it, over a redis-server only the local waits do (the leases last minutes).
func TestShareAsRate(t *testing.T) {
	shClocked(t, func(t *testing.T, clk *ctClock, st *store.Store) {
		ctPut(t, st, "rate", shConfig(50, time.Minute, 5*time.Second))
		c := clk.client(st)
		defer c.Close()
		a := shShare(t, c, "rate", client.WithWants(50))
		b := shShare(t, c, "rate", client.WithWants(10))
		if a.Gets() != 50 || b.Gets() != 0 {
			t.Fatalf("gets %v, want [50 0]", shGets(a, b))
		}
		n := 0
		for range 5000 { // one second, an Allow every 200µs
			if a.Allow() {
				n++
			}
			if b.Allow() {
				t.Fatal("a share that gets 0 allowed an operation")
			}
			clk.Step(t, 200*time.Microsecond)
		}
		if n != 50 { // one at once, then one every 20ms
			t.Fatalf("Allow at gets 50 let %d through in 1s, want 50", n)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if err := b.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Wait on a share that gets 0: %v, want a deadline", err)
		}

		// a leaves; b's next request takes what a had; a Wait blocked on
		// b's empty share goes through as soon as the lease arrives.
		waited := make(chan error, 1)
		go func() { waited <- b.Wait(context.Background()) }()
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		if err := a.Wait(context.Background()); !errors.Is(err, client.ErrClosed) {
			t.Fatalf("Wait after Close: %v, want ErrClosed", err)
		}
		if err := b.Refresh(context.Background()); err != nil {
			t.Fatal(err)
		}
		if g := b.Gets(); g != 10 {
			t.Fatalf("after a returned its capacity b gets %v, want 10", g)
		}
		select {
		case err := <-waited:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a Wait blocked on a share that got nothing did not end once it got 10")
		}
		// The blocked Wait took the first permit at 10/s: five more take
		// exactly 500ms (asleep: the caller and b's refresher).
		t0 := clk.Now()
		clk.run(t, 2, func() {
			for range 5 {
				if err := b.Wait(context.Background()); err != nil {
					t.Error(err)
					return
				}
			}
		})
		if el := clk.Since(t0); el != 500*time.Millisecond {
			t.Fatalf("5 Waits at 10/s took %v, want 500ms", el)
		}
	})
}

// Used as a gauge, a share never has more than floor(Gets) operations in
// flight, and has that many when callers ask for more.
func TestShareAsGauge(t *testing.T) {
	shBackends(t, func(t *testing.T, rdb *redis.Client, st *store.Store) {
		ctPut(t, st, "gauge", shConfig(4.5, time.Minute, 5*time.Second))
		c := redisclient.New(rdb)
		defer c.Close()
		s := shShare(t, c, "gauge", client.WithWants(4.5))
		if s.Gets() != 4.5 {
			t.Fatalf("gets %v, want 4.5", s.Gets())
		}
		var cur, most, ops atomic.Int64
		var wg sync.WaitGroup
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		for range 16 {
			wg.Go(func() {
				for {
					release, err := s.Acquire(ctx)
					if err != nil {
						if !errors.Is(err, context.DeadlineExceeded) {
							t.Errorf("Acquire: %v", err)
						}
						return
					}
					n := cur.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					if f := s.InFlight(); f > 4 {
						t.Errorf("%d in flight", f)
					}
					time.Sleep(time.Millisecond)
					cur.Add(-1)
					ops.Add(1)
					release()
					release() // idempotent
				}
			})
		}
		wg.Wait()
		if m := most.Load(); m != 4 {
			t.Fatalf("at most %d operations in flight at once, want exactly floor(4.5) = 4", m)
		}
		if f := s.InFlight(); f != 0 {
			t.Fatalf("%d in flight after every release", f)
		}
		t.Logf("%d operations, at most %d in flight", ops.Load(), most.Load())
	})
}

// Without WithWants a share asks for its own recent use with 10% headroom:
// a rate user calling Allow 50 times a second asks for 55, a gauge user with
// 6 workers for 6.6; callers that always wait for their turn make the share
// double what it asks for, up from the floor of 1. On a driven clock the
// windows of use are exact, and so are the estimates.
func TestShareEstimatesWants(t *testing.T) {
	clk, _, st := ctDriven(t)
	for _, name := range []string{"est", "estg", "estw"} {
		ctPut(t, st, name, shConfig(1000, time.Second, 100*time.Millisecond))
	}
	c := clk.client(st)
	defer c.Close()
	r := shShare(t, c, "est")
	g := shShare(t, c, "estg")
	w := shShare(t, c, "estw")
	if l := r.Lease(); l.Wants != 1 || l.Gets != 1 {
		t.Fatalf("first lease before any use: %+v, want wants = gets = 1 (the floor)", l)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for range 2 { // always waiting: the share doubles what it asks for
		wg.Go(func() {
			for w.Wait(ctx) == nil {
			}
		})
	}
	// A gauge worker is asleep on the clock holding a place, or in Acquire:
	// taking a place, or waiting for one, which only a release or a lease
	// refreshed on the clock ends. The driver waits for a worker between the
	// two (it gave its place back and is on its way to ask again): the clock
	// moving on meanwhile would hide its use from the share's estimate.
	for range 6 {
		wg.Go(func() {
			for {
				release, err := g.Acquire(ctx)
				if err != nil {
					return
				}
				err = shSleep(ctx, clk, 5*time.Millisecond)
				release()
				if err != nil {
					return
				}
			}
		})
	}
	// Asleep at each step: three refreshers, the two waiters, and the gauge
	// workers not in Acquire.
	sleepers := func() int { return 3 + 2 + 6 - int(client.ShareWaiting(g)) }
	t0 := clk.Now()
	var rw, gw, ww []float64
	for i := 1; i <= 100; i++ { // 2s: the rate user calls Allow every 20ms
		r.Allow()
		clk.drive(t, sleepers, t0.Add(time.Duration(i)*20*time.Millisecond), nil)
		if i%5 == 0 {
			rw, gw, ww = append(rw, r.Lease().Wants), append(gw, g.Lease().Wants), append(ww, w.Lease().Wants)
		}
	}
	cancel()
	wg.Wait()
	t.Logf("rate wants over time: %.1f", rw)
	t.Logf("gauge wants over time: %.1f", gw)
	t.Logf("waiting callers' wants over time: %.1f", ww)
	if g := w.Gets(); g < 500 {
		t.Fatalf("callers always waiting: gets %.1f after 2s (20 refreshes), want it to have grown to most of 1000", g)
	}
	last := func(ws []float64) []float64 { return ws[len(ws)-10:] }
	for _, w := range last(rw) {
		if !shNear(w, 55, 1e-6) {
			t.Fatalf("rate user at 50/s: wants %v late in the run, want 55", w)
		}
	}
	for _, w := range last(gw) {
		if !shNear(w, 6.6, 1e-6) {
			t.Fatalf("gauge user with 6 workers: wants %v late in the run, want 6.6: %.1f", w, last(gw))
		}
	}
}

// shSleep waits d on clk, or until ctx is done.
func shSleep(ctx context.Context, clk *ctClock, d time.Duration) error {
	tm := clk.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// When Redis is gone, a share keeps its lease until it expires, then follows
// its fallback mode; once Redis is back (empty) and the limiter exists again,
// it returns to leases by itself.
func TestShareFallback(t *testing.T) {
	for _, mode := range []client.Fallback{client.FallbackSafe, client.FallbackOptimistic, client.FallbackPessimistic} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel() // each its own Redis: the modes wait out their leases together
			srv, rdb, st := ctServer(t)
			const lease = 2 * time.Second
			cfg := shConfig(100, lease, 200*time.Millisecond)
			safe := 20.0
			cfg.SafeCapacity = &safe
			ctPut(t, st, "fb", cfg)
			c := redisclient.New(rdb, client.WithFallback(mode), client.WithRetryInterval(50*time.Millisecond))
			t.Cleanup(func() { _ = c.Close() })
			s := shShare(t, c, "fb", client.WithWants(100))
			if s.Gets() != 100 {
				t.Fatalf("gets %v, want 100", s.Gets())
			}
			srv.Stop()
			down := time.Now()
			time.Sleep(300 * time.Millisecond) // a refresh has failed by now
			if l := s.Lease(); !l.Valid || l.Fallback || l.Err == nil || s.Gets() != 100 {
				t.Fatalf("Redis down, lease still valid: %+v, gets %v; want the lease's 100 and the error", l, s.Gets())
			}
			if !ctEventually(lease+10*time.Second, func() bool { return s.Lease().Fallback }) {
				t.Fatalf("no fallback 10s after the lease (%v) expired: %+v", lease, s.Lease())
			}
			t.Logf("fallback %v after Redis stopped", time.Since(down))
			if el := time.Since(down); el < lease-500*time.Millisecond { // the lease is judged a round trip early
				t.Fatalf("fell back %v after Redis stopped, before the lease could have expired", el)
			}
			if l := s.Lease(); l.Valid || !errors.Is(l.Err, limiter.ErrUnavailable) {
				t.Fatalf("in fallback: %+v", l)
			}
			switch mode {
			case client.FallbackSafe:
				if g := s.Gets(); g != safe {
					t.Fatalf("safe fallback gets %v, want the safe capacity %v", g, safe)
				}
				// The rate itself is TestShareAsRate's (on a driven clock);
				// here: never above it, however the machine runs.
				n, t0 := 0, time.Now()
				for end := t0.Add(500 * time.Millisecond); time.Now().Before(end); time.Sleep(time.Millisecond) {
					if s.Allow() {
						n++
					}
				}
				if max := int(safe*time.Since(t0).Seconds()) + 1; n < 1 || n > max {
					t.Fatalf("safe fallback at 20/s allowed %d in %v, want 1 to %d", n, time.Since(t0), max)
				}
			case client.FallbackOptimistic:
				if g := s.Gets(); !math.IsInf(g, 1) {
					t.Fatalf("optimistic fallback gets %v, want +Inf", g)
				}
				for i := range 10000 {
					if !s.Allow() {
						t.Fatalf("optimistic fallback refused Allow %d", i)
					}
				}
				release, err := s.Acquire(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				release()
			case client.FallbackPessimistic:
				if g := s.Gets(); g != 0 {
					t.Fatalf("pessimistic fallback gets %v, want 0", g)
				}
				if s.Allow() {
					t.Fatal("pessimistic fallback allowed an operation")
				}
				if err := s.Wait(context.Background()); !errors.Is(err, limiter.ErrUnavailable) {
					t.Fatalf("pessimistic Wait: %v, want limiter.ErrUnavailable", err)
				}
				if _, err := s.Acquire(context.Background()); !errors.Is(err, limiter.ErrUnavailable) {
					t.Fatalf("pessimistic Acquire: %v, want limiter.ErrUnavailable", err)
				}
			}

			srv.Restart() // empty: the limiter is gone until it is re-created
			inEffect := s.Gets()
			for range 10 { // the share keeps falling back meanwhile
				time.Sleep(20 * time.Millisecond)
				if l := s.Lease(); !l.Fallback || l.InEffect != inEffect {
					t.Fatalf("Redis back without the limiter: %+v, want the fallback as before", l)
				}
			}
			shPut(t, st, "fb", cfg)
			if !ctEventually(10*time.Second, func() bool { l := s.Lease(); return l.Valid && !l.Fallback }) {
				t.Fatalf("not back to leases 10s after Redis came back: %+v", s.Lease())
			}
			if !ctEventually(10*time.Second, func() bool { return s.Gets() == 100 }) {
				t.Fatalf("back to leases, gets %v, want 100", s.Gets())
			}
		})
	}
}

// A share created while Redis is down starts in its fallback mode; without a
// lease, the safe fallback uses the client's safe rate, or refuses.
func TestShareStartsInFallback(t *testing.T) {
	srv, rdb, st := ctServer(t)
	ctPut(t, st, "early", shConfig(100, time.Second, 200*time.Millisecond))
	srv.Stop()
	c := redisclient.New(rdb, client.WithSafeRate(7), client.WithRetryInterval(50*time.Millisecond))
	defer c.Close()
	s := shShare(t, c, "early", client.WithWants(100))
	if l := s.Lease(); !l.Fallback || l.Valid || s.Gets() != 7 {
		t.Fatalf("created with Redis down: %+v, gets %v; want the safe rate 7", l, s.Gets())
	}
	p := shShare(t, c, "early", client.WithShareFallback(client.FallbackSafe))
	c2 := redisclient.New(rdb)
	defer c2.Close()
	q := shShare(t, c2, "early")
	if p.Gets() != 7 || q.Gets() != 0 {
		t.Fatalf("gets %v, %v; want 7 (client's safe rate) and 0 (no safe rate)", p.Gets(), q.Gets())
	}
	if err := q.Wait(context.Background()); !errors.Is(err, limiter.ErrUnavailable) {
		t.Fatalf("safe fallback without a safe capacity: Wait %v, want limiter.ErrUnavailable", err)
	}
	srv.Restart()
	shPut(t, st, "early", shConfig(100, time.Second, 200*time.Millisecond))
	if !ctEventually(10*time.Second, func() bool { return !s.Lease().Fallback && s.Gets() > 0 }) {
		t.Fatalf("no lease 10s after Redis came back: %+v", s.Lease())
	}
}

func TestShareErrors(t *testing.T) {
	_, rdb, st := ctMini(t)
	ctPut(t, st, "sched", strict(10))
	ctPut(t, st, "cap", shConfig(10, time.Minute, time.Second))
	c := redisclient.New(rdb)
	if _, err := c.Share("nope"); !errors.Is(err, limiter.ErrNotFound) {
		t.Fatalf("Share of an unknown limiter: %v, want ErrNotFound", err)
	}
	if _, err := c.Share("sched"); !errors.Is(err, limiter.ErrConflict) {
		t.Fatalf("Share of a schedule limiter: %v, want ErrConflict", err)
	}
	if _, err := c.Share("bad name"); !errors.Is(err, limiter.ErrInvalid) {
		t.Fatalf("Share of a bad name: %v, want ErrInvalid", err)
	}
	if _, err := c.Share("cap", client.WithClientID("no spaces")); !errors.Is(err, limiter.ErrInvalid) {
		t.Fatalf("Share with a bad client id: %v, want ErrInvalid", err)
	}
	if _, err := c.Share("cap", client.WithWants(math.NaN())); !errors.Is(err, limiter.ErrInvalid) {
		t.Fatalf("Share wanting NaN: %v, want ErrInvalid", err)
	}
	s := shShare(t, c, "cap")
	if err := s.SetWants(math.Inf(1)); !errors.Is(err, limiter.ErrInvalid) {
		t.Fatalf("SetWants(+Inf): %v, want ErrInvalid", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(context.Background()); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("Acquire on a share of a closed client: %v, want ErrClosed", err)
	}
	if s.Allow() {
		t.Fatal("Allow on a closed share")
	}
	if err := s.SetWants(1); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("SetWants after Close: %v", err)
	}
	if _, err := c.Share("cap"); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("Share on a closed client: %v, want ErrClosed", err)
	}
}

// A limiter deleted under a share: once the lease ends the share gets
// nothing and says why (never everything).
func TestShareLimiterDeleted(t *testing.T) {
	_, rdb, st := ctMini(t)
	ctPut(t, st, "gone", shConfig(10, 300*time.Millisecond, 100*time.Millisecond))
	c := redisclient.New(rdb, client.WithFallback(client.FallbackOptimistic))
	defer c.Close()
	s := shShare(t, c, "gone", client.WithWants(10))
	if err := st.Delete(context.Background(), "gone"); err != nil {
		t.Fatal(err)
	}
	if !ctEventually(10*time.Second, func() bool { return s.Gets() == 0 }) {
		t.Fatalf("gets %v after the limiter was deleted and the lease ended", s.Gets())
	}
	if err := s.Wait(context.Background()); !errors.Is(err, limiter.ErrNotFound) {
		t.Fatalf("Wait on a deleted limiter: %v, want ErrNotFound", err)
	}
}

// Close stops the refresher and wakes every waiter; nothing is left running,
// and the capacity is free for others at once.
func TestShareCloseLeavesNoGoroutines(t *testing.T) {
	_, rdb, st := ctServer(t)
	ctPut(t, st, "leak", shConfig(10, time.Second, 50*time.Millisecond))
	c := redisclient.New(rdb)
	s, err := c.Share("leak", client.WithWants(10))
	if err != nil {
		t.Fatal(err)
	}
	other, err := c.Share("leak", client.WithWants(10))
	if err != nil {
		t.Fatal(err)
	}
	if other.Gets() != 0 {
		t.Fatalf("second share gets %v, want 0 (all is held)", other.Gets())
	}
	errs := make(chan error, 8)
	for range 4 {
		go func() { errs <- other.Wait(context.Background()) }()
		go func() { _, err := other.Acquire(context.Background()); errs <- err }()
	}
	time.Sleep(120 * time.Millisecond) // refreshes go on meanwhile
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := other.Refresh(context.Background()); err != nil || other.Gets() != 10 {
		t.Fatalf("after Close the other share gets %v (%v), want all 10", other.Gets(), err)
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatalf("a waiter: %v", err) // it got capacity once the other share had it
		}
	}
	blocked := make(chan error, 1)
	go func() {
		_, _ = other.Acquire(context.Background()) // 4 held and never released, up to 10
		for {
			if _, err := other.Acquire(context.Background()); err != nil {
				blocked <- err
				return
			}
		}
	}()
	time.Sleep(50 * time.Millisecond)
	if err := c.Close(); err != nil { // closes other
		t.Fatal(err)
	}
	if err := <-blocked; !errors.Is(err, client.ErrClosed) {
		t.Fatalf("an Acquire blocked at Close: %v, want ErrClosed", err)
	}
	_ = rdb.Close()
	goleak.VerifyNone(t, ctLeaks...)
}
