package client_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/client"
	"github.com/limitd/limitd/client/redisclient"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

// The fallback never stacks on the shared schedule: on a driven clock, what
// a handle hands out from the schedule and from its fallback together, in
// the order a fault makes them, against the rate.

// ctFaulty fails every grant and hand-back while the driven clock is in
// [downAt, upAt): the shared schedule unreachable. It also charges (the
// transport a charge reaches), recording each charge.
type ctFaulty struct {
	client.Transport
	clk          *ctClock
	downAt, upAt time.Time

	mu      sync.Mutex
	charged []int64
}

func (f *ctFaulty) down() bool {
	now := f.clk.Now()
	return !now.Before(f.downAt) && now.Before(f.upAt)
}

func (f *ctFaulty) Grant(ctx context.Context, name string, k int64, maxWait time.Duration) (limitd.Grant, error) {
	if f.down() {
		return limitd.Grant{}, fmt.Errorf("%w: the test's fault", limiter.ErrUnavailable)
	}
	return f.Transport.Grant(ctx, name, k, maxWait)
}

func (f *ctFaulty) Release(ctx context.Context, g limitd.Grant, m int64) error {
	if f.down() {
		return fmt.Errorf("%w: the test's fault", limiter.ErrUnavailable)
	}
	return f.Transport.Release(ctx, g, m)
}

// ctCharging is ctFaulty with the store's charge, recorded.
type ctCharging struct {
	*ctFaulty
	st *store.Store
}

func (f ctCharging) Charge(ctx context.Context, name string, n int64) (limitd.Decision, error) {
	f.mu.Lock()
	f.charged = append(f.charged, n)
	f.mu.Unlock()
	return f.st.Charge(ctx, name, n)
}

// ctDrivenRunFetching is ctDrivenRun whose clock also waits for every grant
// the handle fetches (while it falls back, no caller waits for the
// retries, and the clock would run on past a retry not yet sent), and
// counts the retry loop among the sleepers.
func ctDrivenRunFetching(t *testing.T, clk *ctClock, l *client.Limiter, n int, end time.Time) []client.Permit {
	t.Helper()
	var (
		mu   sync.Mutex
		all  []client.Permit
		wg   sync.WaitGroup
		live atomic.Int64
	)
	live.Store(int64(n))
	for range n {
		wg.Go(func() {
			defer live.Add(-1)
			for {
				p, err := l.Wait(context.Background())
				if err != nil {
					t.Errorf("Wait: %v", err)
					return
				}
				mu.Lock()
				all = append(all, p)
				mu.Unlock()
				if !p.Start.Before(end) {
					return
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	clk.drive(t, func() int {
		if client.Fetching(l) {
			return 1 << 30 // not settled until the grant is in
		}
		if client.Retrying(l) {
			return int(live.Load()) + 1
		}
		return int(live.Load())
	}, time.Time{}, done)
	<-done
	return all
}

// ctWorstSecond is the most permits starting in any [x, x+1s).
func ctWorstSecond(all []client.Permit) (worst int, at time.Time) {
	starts := make([]time.Time, len(all))
	for i, p := range all {
		starts[i] = p.Start
	}
	slices.SortFunc(starts, time.Time.Compare)
	j := 0
	for i, s := range starts {
		for j < len(starts) && starts[j].Before(s.Add(time.Second)) {
			j++
		}
		if j-i > worst {
			worst, at = j-i, s
		}
	}
	return worst, at
}

// ctStarts are the starts of the permits that match keep, in order.
func ctStarts(all []client.Permit, keep func(client.Permit) bool) []time.Time {
	var out []time.Time
	for _, p := range all {
		if keep(p) {
			out = append(out, p.Start)
		}
	}
	slices.SortFunc(out, time.Time.Compare)
	return out
}

// 40 callers keep a strict 100/s schedule queued 0.4 s ahead of the clock
// when it becomes unreachable for 2 s. The callers already asleep on their
// permits start on time; the fallback (50/s) starts only after the last of
// them, so that no second holds more than the rate. When the schedule
// answers again, the callers waiting for fallback permits queue on it
// instead, the handle keeps to 50/s for the cool-down (1 s), then takes the
// whole rate again. Every permit is counted once: as shared or as the
// fallback's.
func TestFallbackAfterQueuedPermits(t *testing.T) {
	clk, _, st := ctDriven(t)
	ctPut(t, st, "q", strict(100))
	t0 := clk.Now()
	f := &ctFaulty{Transport: clk.transport(redisclient.NewTransport(st)), clk: clk,
		downAt: t0.Add(time.Second), upAt: t0.Add(3 * time.Second)}
	const retry = 100 * time.Millisecond
	c := client.NewWithTransport(f, client.WithClock(clk), client.WithSafeRate(50), client.WithRetryInterval(retry))
	l, err := c.Limiter("q")
	if err != nil {
		t.Fatal(err)
	}
	all := ctDrivenRunFetching(t, clk, l, 40, t0.Add(6*time.Second))
	stats := l.Stats()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	// The rate, and the two permits that op bulking lets a pool start at
	// once when they are late by up to its bound (two slices; DESIGN §6):
	// its pace lags when the guard held callers back, and catches up by
	// that much when the guard goes.
	worst, at := ctWorstSecond(all)
	t.Logf("%d permits; the worst second holds %d, from %v", len(all), worst, at.Sub(t0))
	if worst > 102 {
		t.Errorf("%d permits start in the second from %v, more than the rate (100/s) and op bulking (2)", worst, at.Sub(t0))
	}

	shared := ctStarts(all, func(p client.Permit) bool { return p.Shared })
	fell := ctStarts(all, func(p client.Permit) bool { return !p.Shared })
	if len(fell) == 0 {
		t.Fatal("no permit came from the fallback: the fault did not take")
	}
	var queued time.Time // the last shared permit before the schedule came back
	for _, s := range shared {
		if s.Before(f.upAt) {
			queued = s
		}
	}
	if d := queued.Sub(f.downAt); d < 300*time.Millisecond {
		t.Fatalf("the shared permits end %v after the fault, want the queue's ~0.4 s: no queue to honour", d)
	}
	if fell[0].Before(queued) {
		t.Errorf("the fallback's first permit starts %v before the last permit the schedule had granted", queued.Sub(fell[0]))
	}
	for i := 1; i < len(fell); i++ {
		if d := fell[i].Sub(fell[i-1]); d < 20*time.Millisecond {
			t.Fatalf("fallback permits %d and %d start %v apart, want ≥ 20ms (50/s)", i-1, i, d)
		}
	}
	// Back within a retry interval of the schedule's return; no fallback
	// permit after that (those waiting were withdrawn).
	back := fell[len(fell)-1]
	if back.After(f.upAt.Add(retry)) {
		t.Errorf("a fallback permit starts %v after the schedule answered again, want none after one retry interval (%v)", back.Sub(f.upAt), retry)
	}
	// The cool-down: one second at the safe rate, then the whole rate.
	cool := ctStarts(all, func(p client.Permit) bool {
		return p.Shared && p.Start.After(f.upAt) && p.Start.Before(f.upAt.Add(time.Second))
	})
	for i := 1; i < len(cool); i++ {
		if d := cool[i].Sub(cool[i-1]); d < 20*time.Millisecond {
			t.Fatalf("in the cool-down, shared permits %d and %d start %v apart, want ≥ 20ms (50/s)", i-1, i, d)
		}
	}
	full := ctStarts(all, func(p client.Permit) bool {
		return p.Start.After(f.upAt.Add(1500*time.Millisecond)) && p.Start.Before(f.upAt.Add(2500*time.Millisecond))
	})
	if len(full) < 95 {
		t.Errorf("%d permits in the second after the cool-down, want the rate (100) again", len(full))
	}

	if n := int64(len(shared) + len(fell)); stats.SharedPermits+stats.FallbackPermits != n {
		t.Errorf("Stats: %d shared + %d fallback permits, callers got %d", stats.SharedPermits, stats.FallbackPermits, n)
	}
	if stats.SharedPermits != int64(len(shared)) || stats.FallbackPermits != int64(len(fell)) {
		t.Errorf("Stats: %d shared, %d fallback; callers got %d shared, %d from the fallback",
			stats.SharedPermits, stats.FallbackPermits, len(shared), len(fell))
	}
}

// A schedule that catches up without pace (burst inf) would hand out the
// time the fallback used, as backlog, at once when it returns: the
// fallback's permits are charged to it, exactly those that started, so that
// over the run the handle's shared and fallback permits together are the
// rate's (without the charge, the rate's and the fallback's again). A
// strict schedule (burst 1) never gives past time out again, and one paced
// at a finite ratio (2) catches it up at that ratio: nothing is charged,
// which would hold its callers, and no second after the return holds more
// than the rate, or the ratio's catch-up.
func TestFallbackChargedToTheBacklog(t *testing.T) {
	for _, burst := range []float64{limiter.Inf, 1, 2} {
		t.Run(fmt.Sprint("burst ", burst), func(t *testing.T) {
			clk, _, st := ctDriven(t)
			ctPut(t, st, "b", limiter.Config{Rate: 100, Burst: limiter.B(burst)})
			t0 := clk.Now()
			f := &ctFaulty{Transport: clk.transport(redisclient.NewTransport(st)), clk: clk,
				downAt: t0.Add(500 * time.Millisecond), upAt: t0.Add(1500 * time.Millisecond)}
			c := client.NewWithTransport(ctCharging{f, st}, client.WithClock(clk), client.WithSafeRate(50),
				client.WithRetryInterval(100*time.Millisecond))
			l, err := c.Limiter("b")
			if err != nil {
				t.Fatal(err)
			}
			all := ctDrivenRunFetching(t, clk, l, 10, t0.Add(3*time.Second))
			stats := l.Stats()
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			fell := ctStarts(all, func(p client.Permit) bool { return !p.Shared })
			f.mu.Lock()
			charged := slices.Clone(f.charged)
			f.mu.Unlock()
			t.Logf("%d permits, %d from the fallback; charged %v", len(all), len(fell), charged)
			if len(fell) < 40 || stats.FallbackPermits != int64(len(fell)) {
				t.Fatalf("%d fallback permits (Stats: %d), want about 50 in the fault's second", len(fell), stats.FallbackPermits)
			}
			switch {
			case !math.IsInf(burst, 1) && len(charged) != 0:
				t.Errorf("charged %v on a paced schedule", charged)
			case math.IsInf(burst, 1) && (len(charged) != 1 || charged[0] != int64(len(fell))):
				t.Errorf("charged %v, want once the %d fallback permits", charged, len(fell))
			}
			if math.IsInf(burst, 1) {
				// Every permit started in the run's 3 s, at 100/s: the rate's
				// 300, and op bulking's 2 (see TestFallbackAfterQueuedPermits).
				n := len(ctStarts(all, func(p client.Permit) bool { return p.Start.Before(t0.Add(3 * time.Second)) }))
				t.Logf("%d permits started in the run's 3 s", n)
				if n > 302 {
					t.Errorf("%d permits started in 3 s at 100/s: the fallback's were handed out again", n)
				}
				return
			}
			var after []client.Permit
			for _, p := range all {
				if p.Start.After(f.upAt) {
					after = append(after, p)
				}
			}
			worst, at := ctWorstSecond(after)
			limit := int(burst*100) + 2
			t.Logf("after the return, the worst second holds %d permits, from %v", worst, at.Sub(t0))
			if worst > limit {
				t.Errorf("after the return, %d permits start in the second from %v, want at most %d", worst, at.Sub(t0), limit)
			}
		})
	}
}

// ctStall's first grant returns only once its call's time is up, as a
// process frozen across the call (SIGSTOP, a VM paused, a long GC) sees
// it: Redis answered, but the caller ran again after the deadline. Redis
// itself is fine: a call with time left is answered.
type ctStall struct {
	client.Transport
	calls atomic.Int64
}

func (s *ctStall) Grant(ctx context.Context, name string, k int64, maxWait time.Duration) (limitd.Grant, error) {
	if s.calls.Add(1) == 1 {
		<-ctx.Done()
		return limitd.Grant{}, ctx.Err()
	}
	if err := ctx.Err(); err != nil {
		return limitd.Grant{}, err
	}
	return s.Transport.Grant(ctx, name, k, maxWait)
}

// A fetch stalled for its whole timeout is tried once more, with time of
// its own, before the handle falls back: the permit comes from the shared
// schedule. (Its retry used the first call's spent context and fell back at
// once, handing out local permits beside the other processes' shared ones.)
// The stall takes the fetch's timeout, 2 s.
func TestStalledFetchRetriedBeforeFallback(t *testing.T) {
	_, _, st := ctMini(t)
	ctPut(t, st, "stall", strict(100))
	tr := &ctStall{Transport: redisclient.NewTransport(st)}
	c := client.NewWithTransport(tr)
	defer c.Close()
	l, err := c.Limiter("stall")
	if err != nil {
		t.Fatal(err)
	}
	p, err := l.Wait(context.Background())
	if err != nil || !p.Shared {
		t.Fatalf("after a stall: %+v, %v; want a permit of the shared schedule", p, err)
	}
	if n := tr.calls.Load(); n != 2 {
		t.Errorf("%d grants asked, want 2 (the stalled one and its retry)", n)
	}
}
