package limiter_test

import (
	"context"
	"errors"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/limitd/limitd/limiter"
)

// manualClock is a limiter.Clock a test moves by hand. Now returns a settable
// instant; Sleep advances it by d at once unless ctx is done. Two hooks let a
// test reach into a wait: beforeSleep runs at the start of every Sleep (to
// cancel a context "while" the caller waits), and step moves the clock on after
// every Now (to model time passing between two reads). It is goroutine-safe.
type manualClock struct {
	mu          sync.Mutex
	now         time.Time
	step        time.Duration
	sleeps      int
	beforeSleep func(d time.Duration)
}

// clockEpoch is far in the future, so that a context deadline set on the manual
// clock never fires on the real one while a test runs.
var clockEpoch = time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)

func newManualClock() *manualClock { return &manualClock{now: clockEpoch} }

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.now
	c.now = c.now.Add(c.step)
	return t
}

func (c *manualClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	hook := c.beforeSleep
	c.sleeps++
	c.mu.Unlock()
	if hook != nil {
		hook(d) // without c.mu: the hook may call into the limiter and the clock
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	c.Advance(d)
	return nil
}

// Advance moves the clock d forward (a negative d is ignored).
func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d > 0 {
		c.now = c.now.Add(d)
	}
}

func (c *manualClock) Sleeps() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sleeps
}

func (c *manualClock) setBeforeSleep(f func(time.Duration)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.beforeSleep = f
}

func (c *manualClock) setStep(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.step = d
}

// newLimiter builds a limiter on a fresh manual clock; t0 is its creation time.
func newLimiter(t *testing.T, c limiter.Config) (*limiter.Limiter, *manualClock, time.Time) {
	t.Helper()
	clk := newManualClock()
	l, err := limiter.New(c, limiter.WithClock(clk))
	if err != nil {
		t.Fatalf("New(%+v): %v", c, err)
	}
	return l, clk, clk.Now()
}

// strict is a schedule limiter with burst 1: permits never closer than a slice.
func strict(rate float64) limiter.Config {
	return limiter.Config{Kind: limiter.KindSchedule, Rate: rate, Burst: limiter.B(1)}
}

func mustWait(t *testing.T, l *limiter.Limiter) limiter.Permit {
	t.Helper()
	p, err := l.Wait(context.Background())
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	return p
}

func mustReserve(t *testing.T, l *limiter.Limiter, n int) *limiter.Reservation {
	t.Helper()
	r, err := l.Reserve(n)
	if err != nil {
		t.Fatalf("Reserve(%d): %v", n, err)
	}
	return r
}

// withDeadline returns a context whose deadline is d after the manual clock's now.
func withDeadline(t *testing.T, clk *manualClock, d time.Duration) context.Context {
	ctx, cancel := context.WithDeadline(context.Background(), clk.Now().Add(d))
	t.Cleanup(cancel)
	return ctx
}

func TestWaitStartsOnSmoothSchedule(t *testing.T) {
	l, clk, t0 := newLimiter(t, limiter.Config{Kind: limiter.KindSmooth, Rate: 5})
	for i, want := range []time.Duration{0, 200 * time.Millisecond, 400 * time.Millisecond} {
		p := mustWait(t, l)
		if got := p.Start.Sub(t0); got != want {
			t.Errorf("Wait #%d: Start = t0+%v, want t0+%v", i+1, got, want)
		}
		if p.Permits != 1 || !p.Scheduled.Equal(p.Start) || p.Lateness != 0 {
			t.Errorf("Wait #%d: %+v, want 1 permit scheduled at its start", i+1, p)
		}
		if !clk.Now().Equal(p.Start) {
			t.Errorf("Wait #%d returned at t0+%v, before or after its start t0+%v",
				i+1, clk.Now().Sub(t0), p.Start.Sub(t0))
		}
	}
}

func TestWaitReportsLatenessAfterStall(t *testing.T) {
	// rate 10, burst 2: after a stall the callers catch up at 20/s.
	l, clk, t0 := newLimiter(t, limiter.Config{Rate: 10, Burst: limiter.B(2)})
	ms := time.Millisecond
	if p := mustWait(t, l); p.Lateness != 0 || !p.Scheduled.Equal(t0) || !p.Start.Equal(t0) {
		t.Fatalf("first Wait: %+v, want scheduled and started at t0", p)
	}
	clk.Advance(time.Second) // the caller stalls
	for i, want := range []struct{ sched, start, late, backlog time.Duration }{
		// Backlog is measured when the permit is asked for.
		{100 * ms, 1000 * ms, 900 * ms, 800 * ms},
		{200 * ms, 1050 * ms, 850 * ms, 700 * ms}, // pace: start + slice/burst
		{300 * ms, 1100 * ms, 800 * ms, 650 * ms}, // asked at t0+1.05s
	} {
		p := mustWait(t, l)
		got := struct{ sched, start, late, backlog time.Duration }{
			p.Scheduled.Sub(t0), p.Start.Sub(t0), p.Lateness, p.Backlog}
		if got != want {
			t.Errorf("Wait #%d after the stall: {sched start lateness backlog} = %v, want %v", i+1, got, want)
		}
		if p.Lateness <= 0 || p.Start.Before(p.Scheduled) || p.Lateness != p.Start.Sub(p.Scheduled) {
			t.Errorf("Wait #%d: lateness %v, start t0+%v, scheduled t0+%v: want start − scheduled > 0",
				i+1, p.Lateness, p.Start.Sub(t0), p.Scheduled.Sub(t0))
		}
	}
}

func TestWaitDeadline(t *testing.T) {
	ms := time.Millisecond
	t.Run("start beyond the deadline", func(t *testing.T) {
		l, clk, t0 := newLimiter(t, strict(10))
		mustWait(t, l) // takes t0; the next slot is t0+100ms
		before, sleeps := l.Stats(), clk.Sleeps()
		_, err := l.Wait(withDeadline(t, clk, 50*ms))
		if !errors.Is(err, limiter.ErrDeadline) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Wait with a deadline before the start: err = %v, want ErrDeadline matching context.DeadlineExceeded", err)
		}
		if clk.Sleeps() != sleeps || !clk.Now().Equal(t0) {
			t.Errorf("Wait slept before failing; want it to fail at once")
		}
		if after := l.Stats(); after != before {
			t.Errorf("Stats changed by a failed Wait:\n got %+v\nwant %+v", after, before)
		}
		if p := mustWait(t, l); p.Start.Sub(t0) != 100*ms || p.Lateness != 0 {
			t.Errorf("next caller: Start = t0+%v, lateness %v; want t0+100ms, not delayed", p.Start.Sub(t0), p.Lateness)
		}
	})
	t.Run("start exactly at the deadline", func(t *testing.T) {
		l, clk, t0 := newLimiter(t, strict(10))
		mustWait(t, l)
		p, err := l.Wait(withDeadline(t, clk, 100*ms))
		if err != nil || p.Start.Sub(t0) != 100*ms {
			t.Errorf("Wait with the deadline at the start: %+v, %v; want a permit at t0+100ms", p, err)
		}
	})
	t.Run("deadline already passed on the limiter's clock", func(t *testing.T) {
		l, clk, _ := newLimiter(t, strict(10))
		before := l.Stats()
		if _, err := l.Wait(withDeadline(t, clk, -ms)); !errors.Is(err, limiter.ErrDeadline) {
			t.Errorf("err = %v, want ErrDeadline", err)
		}
		if after := l.Stats(); after != before {
			t.Errorf("Stats changed: got %+v, want %+v", after, before)
		}
	})
	t.Run("context already done", func(t *testing.T) {
		l, _, _ := newLimiter(t, strict(10))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := l.Wait(ctx); err != ctx.Err() || !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled ctx: err = %v, want ctx.Err() = %v", err, ctx.Err())
		}
		expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Hour))
		defer cancel2()
		if _, err := l.Wait(expired); err != expired.Err() {
			t.Errorf("expired ctx: err = %v, want ctx.Err() = %v", err, expired.Err())
		}
		if s := l.Stats(); s.Permits != 0 {
			t.Errorf("Stats().Permits = %d after two failed Waits, want 0", s.Permits)
		}
	})
	t.Run("cancelled while waiting hands the slot back", func(t *testing.T) {
		l, clk, t0 := newLimiter(t, strict(10))
		mustWait(t, l)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		clk.setBeforeSleep(func(d time.Duration) {
			if d > 0 {
				cancel()
			}
		})
		if _, err := l.Wait(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		clk.setBeforeSleep(nil)
		if s := l.Stats(); s.Permits != 1 || s.Idle != 0 {
			t.Errorf("Stats after the cancelled Wait: %+v, want 1 permit and no idle time", s)
		}
		if p := mustWait(t, l); p.Start.Sub(t0) != 100*ms {
			t.Errorf("next caller: Start = t0+%v, want the handed-back slot t0+100ms", p.Start.Sub(t0))
		}
	})
	t.Run("cancelled while waiting after a later grant", func(t *testing.T) {
		l, clk, t0 := newLimiter(t, strict(10))
		mustWait(t, l)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var later *limiter.Reservation
		clk.setBeforeSleep(func(d time.Duration) {
			if d > 0 {
				later = mustReserve(t, l, 1) // another caller takes t0+200ms
				cancel()
			}
		})
		if _, err := l.Wait(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		clk.setBeforeSleep(nil)
		if p := later.Permit(); p.Start.Sub(t0) != 200*ms {
			t.Errorf("later grant starts at t0+%v, want t0+200ms", p.Start.Sub(t0))
		}
		// The cancelled slot cannot be rewound past the later grant: it is idle.
		if s := l.Stats(); s.Permits != 2 || s.Idle != 100*ms || s.Allocated != 200*ms {
			t.Errorf("Stats: %+v, want 2 permits, 200ms allocated, 100ms idle", s)
		}
	})
}

func TestAllow(t *testing.T) {
	ms := time.Millisecond
	l, clk, _ := newLimiter(t, strict(10))
	if !l.Allow() {
		t.Fatal("first Allow = false, want true")
	}
	for _, d := range []time.Duration{0, 50 * ms, 50*ms - 1} {
		clk.Advance(d)
		if l.Allow() {
			t.Fatalf("Allow at t0+%v = true, want false until t0+100ms", clk.Now().Sub(clockEpoch))
		}
	}
	clk.Advance(1) // t0+100ms
	if !l.Allow() {
		t.Fatal("Allow at t0+100ms = false, want true")
	}
	if l.Allow() {
		t.Fatal("second Allow at t0+100ms = true, want false")
	}

	before := l.Stats()
	maxPermits := int(limiter.SliceOf(10).MaxPermits())
	for _, n := range []int{0, -1, math.MinInt, maxPermits + 1, math.MaxInt} {
		if l.AllowN(n) {
			t.Errorf("AllowN(%d) = true, want false", n)
		}
	}
	if after := l.Stats(); after != before {
		t.Errorf("invalid AllowN changed the limiter:\n got %+v\nwant %+v", after, before)
	}

	// Burst 1 never catches up: after a stall one permit, then the slice again.
	clk.Advance(time.Second)
	if !l.Allow() || l.Allow() {
		t.Error("after a 1s stall: want exactly one Allow, strict schedule")
	}
	clk.Advance(100 * ms)
	if !l.AllowN(1) {
		t.Error("AllowN(1) a slice after the last grant = false, want true")
	}
}

func TestReserve(t *testing.T) {
	ms := time.Millisecond
	l, clk, t0 := newLimiter(t, strict(10))
	r1 := mustReserve(t, l, 1)
	if !r1.OK() || r1.Delay() != 0 || !r1.Permit().Start.Equal(t0) {
		t.Fatalf("first reservation: ok %v, delay %v, %+v; want a permit now", r1.OK(), r1.Delay(), r1.Permit())
	}

	r2 := mustReserve(t, l, 3)
	if d := r2.Delay(); d != 100*ms {
		t.Errorf("Reserve(3).Delay() = %v, want 100ms", d)
	}
	if p := r2.Permit(); p.Permits != 3 || p.Start.Sub(t0) != 100*ms || p.Scheduled.Sub(t0) != 100*ms {
		t.Errorf("Reserve(3).Permit() = %+v, want 3 permits at t0+100ms", p)
	}
	clk.Advance(30 * ms)
	if d := r2.Delay(); d != 70*ms {
		t.Errorf("Delay() 30ms later = %v, want 70ms", d)
	}

	// Nothing came after r2: Cancel rewinds the schedule as if it never was.
	r2.Cancel()
	r2.Cancel()
	if s := l.Stats(); s.Permits != 1 || s.Idle != 0 || s.Allocated != 100*ms {
		t.Errorf("after rewinding r2: %+v, want 1 permit, 100ms allocated, no idle", s)
	}
	r3 := mustReserve(t, l, 1)
	if p := r3.Permit(); p.Start.Sub(t0) != 100*ms {
		t.Errorf("after rewind: next Start = t0+%v, want r2's slot t0+100ms", p.Start.Sub(t0))
	}

	// Something came after r4: its time is lost to everyone (idle).
	r4 := mustReserve(t, l, 2) // t0+200ms..400ms
	r5 := mustReserve(t, l, 1) // t0+400ms
	r4.Cancel()
	want := limiter.Stats{Permits: 3, Allocated: 300 * ms, Idle: 200 * ms, Delay: 470 * ms}
	if s := l.Stats(); s != want {
		t.Errorf("after cancelling r4:\n got %+v\nwant %+v", s, want)
	}
	r4.Cancel() // twice is harmless
	r2.Cancel() // so is a late second cancel of a rewound reservation
	if s := l.Stats(); s != want {
		t.Errorf("after cancelling again:\n got %+v\nwant %+v", s, want)
	}
	if p := r5.Permit(); p.Start.Sub(t0) != 400*ms {
		t.Errorf("r5 moved to t0+%v, want it kept at t0+400ms", p.Start.Sub(t0))
	}
	if r6 := mustReserve(t, l, 1); r6.Permit().Start.Sub(t0) != 500*ms {
		p := r6.Permit()
		t.Errorf("next after r5: Start = t0+%v, want t0+500ms", p.Start.Sub(t0))
	}

	for _, n := range []int{0, -1, math.MaxInt} {
		before := l.Stats()
		r, err := l.Reserve(n)
		var fe *limiter.FieldError
		if !errors.Is(err, limiter.ErrInvalid) || !errors.As(err, &fe) || fe.Field != "permits" {
			t.Errorf("Reserve(%d): err = %v, want ErrInvalid naming permits", n, err)
		}
		if r != nil {
			t.Errorf("Reserve(%d) returned a reservation with its error", n)
		}
		if after := l.Stats(); after != before {
			t.Errorf("Reserve(%d) changed the limiter", n)
		}
	}
}

// maxOut fills the schedule to the horizon: two of the largest requests.
func maxOut(t *testing.T, l *limiter.Limiter, rate float64) {
	t.Helper()
	n := int(limiter.SliceOf(rate).MaxPermits())
	mustReserve(t, l, n)
	mustReserve(t, l, n)
}

// horizonReserve is strict(rate) whose requests may take the whole horizon.
func horizonReserve(rate float64) limiter.Config {
	c := strict(rate)
	c.MaxReserve = limiter.D(time.Duration(limiter.Horizon))
	return c
}

func TestReserveBeyondHorizon(t *testing.T) {
	l, _, _ := newLimiter(t, horizonReserve(10))
	maxOut(t, l, 10)
	before := l.Stats()
	r, err := l.Reserve(1)
	if !errors.Is(err, limiter.ErrTooLate) || r.OK() {
		t.Errorf("Reserve beyond the horizon: ok %v, err %v; want ErrTooLate", r.OK(), err)
	}
	if after := l.Stats(); after != before {
		t.Errorf("a refused Reserve changed the limiter")
	}
}

// BUG: Wait without a deadline returns ErrDeadline when the start lies beyond
// the horizon; ErrDeadline says the context's deadline would be exceeded, and
// it matches context.DeadlineExceeded, but there is no deadline.
func TestWaitBeyondHorizonWithoutDeadline(t *testing.T) {
	l, _, _ := newLimiter(t, horizonReserve(10))
	maxOut(t, l, 10)
	_, err := l.Wait(context.Background())
	if !errors.Is(err, limiter.ErrTooLate) || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait without a deadline beyond the horizon: err = %v, want ErrTooLate (and not a deadline error)", err)
	}
}

// BUG: WaitN turns the deadline into a max wait with one reading of the clock
// and the engine decides with another, later one; the time between the two
// (lock contention on a real clock) is added to the max wait, so a permit
// starting after the deadline is granted. The clock here moves 1ms per read.
func TestWaitDeadlineJudgedAtOneInstant(t *testing.T) {
	ms := time.Millisecond
	l, clk, t0 := newLimiter(t, strict(10))
	mustWait(t, l) // t0; next slot t0+100ms
	clk.setStep(ms)
	dl := t0.Add(100*ms - ms/2) // half a millisecond before the next slot
	ctx, cancel := context.WithDeadline(context.Background(), dl)
	defer cancel()
	p, err := l.Wait(ctx)
	if err == nil {
		t.Errorf("Wait granted a permit starting at t0+%v, after the deadline t0+%v", p.Start.Sub(t0), dl.Sub(t0))
	} else if !errors.Is(err, limiter.ErrDeadline) {
		t.Errorf("err = %v, want ErrDeadline", err)
	}
}

// A reservation cancelled through two references undoes the grant once.
func TestReservationCancelledTwiceUndoesOnce(t *testing.T) {
	l, _, _ := newLimiter(t, strict(10))
	r := mustReserve(t, l, 1)
	c := r
	r.Cancel()
	c.Cancel()
	if s := l.Stats(); s.Permits != 0 || s.Allocated != 0 || s.Idle != 0 {
		t.Errorf("after cancelling two copies of one reservation: %+v, want all totals 0", s)
	}
}

func TestSetConfig(t *testing.T) {
	ms := time.Millisecond
	t.Run("same kind keeps the schedule", func(t *testing.T) {
		l, clk, t0 := newLimiter(t, strict(10))
		mustWait(t, l)
		clk.Advance(time.Second) // backlog: 900ms
		if err := l.SetConfig(strict(20)); err != nil {
			t.Fatal(err)
		}
		if s := l.Stats(); s.Backlog != 900*ms || s.Permits != 1 {
			t.Errorf("after SetConfig: %+v, want the 900ms backlog kept", s)
		}
		// Later permits cost the new slice (50ms) from where the schedule stood.
		for i, want := range []time.Duration{100 * ms, 150 * ms, 200 * ms} {
			r := mustReserve(t, l, 1)
			if p := r.Permit(); p.Scheduled.Sub(t0) != want {
				t.Errorf("permit %d after SetConfig: Scheduled = t0+%v, want t0+%v", i+1, p.Scheduled.Sub(t0), want)
			}
		}
	})
	t.Run("same kind keeps the pace", func(t *testing.T) {
		l, clk, t0 := newLimiter(t, limiter.Config{Rate: 10, Burst: limiter.B(2)})
		mustWait(t, l)
		clk.Advance(time.Second)
		mustWait(t, l) // starts at t0+1s; pace t0+1.05s
		if err := l.SetConfig(limiter.Config{Spec: "10,4"}); err != nil {
			t.Fatal(err)
		}
		for i, want := range []time.Duration{1050 * ms, 1075 * ms} {
			if p := mustWait(t, l); p.Start.Sub(t0) != want {
				t.Errorf("Wait %d after SetConfig: Start = t0+%v, want t0+%v", i+1, p.Start.Sub(t0), want)
			}
		}
	})
	t.Run("verb restart resets the backlog", func(t *testing.T) {
		l, clk, t0 := newLimiter(t, strict(10))
		mustWait(t, l)
		clk.Advance(time.Second)
		if err := l.SetConfig(limiter.Config{Spec: "20,1,restart"}); err != nil {
			t.Fatal(err)
		}
		if s := l.Stats(); s.Backlog != 0 || s.Idle != 900*ms || s.Permits != 1 {
			t.Errorf("after restart: %+v, want no backlog, 900ms idle, totals kept", s)
		}
		if p := mustWait(t, l); p.Scheduled.Sub(t0) != time.Second || p.Lateness != 0 {
			t.Errorf("first Wait after restart: %+v, want scheduled now (t0+1s), not late", p)
		}
		if c := l.Config(); c.Rate != 20 || c.Burst == nil || *c.Burst != 1 || c.Spec != "" {
			t.Errorf("Config() = %+v, want rate 20, burst 1 in canonical form", c)
		}
	})
	t.Run("another kind starts afresh", func(t *testing.T) {
		l, clk, t0 := newLimiter(t, strict(10))
		mustWait(t, l)
		clk.Advance(time.Second)
		if err := l.SetConfig(limiter.Config{Kind: limiter.KindSmooth, Rate: 5}); err != nil {
			t.Fatal(err)
		}
		if s := l.Stats(); s.Backlog != 0 || s.Delay != 0 {
			t.Errorf("after switching to smooth: %+v, want no backlog and no delay", s)
		}
		for i, want := range []time.Duration{1000 * ms, 1200 * ms} {
			if p := mustWait(t, l); p.Start.Sub(t0) != want {
				t.Errorf("Wait %d after the switch: Start = t0+%v, want t0+%v", i+1, p.Start.Sub(t0), want)
			}
		}
	})
	t.Run("invalid config changes nothing", func(t *testing.T) {
		l, clk, t0 := newLimiter(t, strict(10))
		mustWait(t, l)
		clk.Advance(30 * ms)
		cfg, stats := l.Config(), l.Stats()
		for _, bad := range []limiter.Config{
			{Rate: 0},
			{Rate: 10, Burst: limiter.B(0.5)},
			{Spec: "10,1,rewind"},
			{Kind: limiter.KindSmooth, Rate: 5, Burst: limiter.B(2)},
			{Kind: "leaky", Rate: 5},
		} {
			if err := l.SetConfig(bad); !errors.Is(err, limiter.ErrInvalid) {
				t.Errorf("SetConfig(%+v): err = %v, want ErrInvalid", bad, err)
			}
		}
		if c := l.Config(); c.Kind != cfg.Kind || c.Rate != cfg.Rate || *c.Burst != *cfg.Burst {
			t.Errorf("Config() = %+v after invalid SetConfigs, want %+v", c, cfg)
		}
		if s := l.Stats(); s != stats {
			t.Errorf("Stats() = %+v after invalid SetConfigs, want %+v", s, stats)
		}
		if p := mustWait(t, l); p.Start.Sub(t0) != 100*ms {
			t.Errorf("next Wait: Start = t0+%v, want t0+100ms at the old rate", p.Start.Sub(t0))
		}
	})
}

// TestLimiterConcurrentRealClock runs 64 goroutines on one strict limiter with
// the real clock (run it with -race). It asserts only what holds however the
// goroutines are scheduled: with burst b no two starts are closer than
// slice/b, so at most rate·elapsed·b + 1 permits can start within the run.
func TestLimiterConcurrentRealClock(t *testing.T) {
	defer goleak.VerifyNone(t)
	const (
		rate    = 2000.0
		burst   = 1.0
		workers = 64
		run     = 200 * time.Millisecond
	)
	begin := time.Now()
	l, err := limiter.New(limiter.Config{Rate: rate, Burst: limiter.B(burst)})
	if err != nil {
		t.Fatal(err)
	}
	// Waits must not start after the run: the deadline refuses them (or cancels
	// them while they sleep, which hands the permits back).
	ctx, cancel := context.WithDeadline(context.Background(), begin.Add(run))
	defer cancel()

	var granted, refused, cancelled atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				switch (w + i) % 4 {
				case 0, 1:
					if l.Allow() {
						granted.Add(1)
					} else {
						refused.Add(1)
					}
				case 2:
					if _, err := l.Wait(ctx); err == nil {
						granted.Add(1)
					} else {
						refused.Add(1)
					}
				case 3:
					r, err := l.Reserve(1)
					if err != nil {
						t.Errorf("Reserve: %v", err)
						return
					}
					if i%2 == 0 || r.Delay() > time.Until(begin.Add(run)) {
						r.Cancel() // a no-op once the start has passed
						cancelled.Add(1)
						continue
					}
					time.Sleep(r.Delay())
					granted.Add(1)
				}
			}
		}()
	}
	wg.Add(1)
	go func() { // a reader and an administrator beside the callers
		defer wg.Done()
		for ctx.Err() == nil {
			_ = l.Stats()
			if err := l.SetConfig(limiter.Config{Rate: rate, Burst: limiter.B(burst)}); err != nil {
				t.Errorf("SetConfig: %v", err)
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	wg.Wait()
	elapsed := time.Since(begin)

	// A cancelled reservation is handed back unless its start had passed, so
	// the limiter counts between what callers kept and that plus the cancelled.
	s := l.Stats()
	if s.Permits < granted.Load() || s.Permits > granted.Load()+cancelled.Load() {
		t.Errorf("Stats().Permits = %d, callers kept %d and cancelled %d", s.Permits, granted.Load(), cancelled.Load())
	}
	bound := int64(math.Floor(rate*elapsed.Seconds()*burst)) + 1
	if s.Permits > bound {
		t.Errorf("%d permits granted in %v, more than rate·elapsed·burst + 1 = %d", s.Permits, elapsed, bound)
	}
	t.Logf("%d permits granted (bound %d), %d refused in %v", granted.Load(), bound, refused.Load(), elapsed)
}

// raceClock hands out strictly increasing instants, one nanosecond apart, one
// per read. A read can be held after it has taken its instant, as a goroutine
// is when it is preempted between reading the clock and taking the limiter's
// lock, so that later readers decide first; or every read can yield the
// processor after taking its instant, so that goroutines overtake each other
// at random.
type raceClock struct {
	n     atomic.Int64
	yield bool
	mu    sync.Mutex
	hold  chan struct{} // non-nil: the next read waits for it to be closed
	held  chan struct{} // closed once that read has taken its instant
}

func (c *raceClock) Now() time.Time {
	t := clockEpoch.Add(time.Duration(c.n.Add(1)))
	c.mu.Lock()
	hold, held := c.hold, c.held
	c.hold, c.held = nil, nil
	c.mu.Unlock()
	if hold != nil {
		close(held)
		<-hold
	}
	if c.yield {
		runtime.Gosched()
	}
	return t
}

func (c *raceClock) Sleep(ctx context.Context, d time.Duration) error { return ctx.Err() }

// holdNext holds the next read; wait for the returned channel to be closed
// (the read has its instant), then close release to let it go on.
func (c *raceClock) holdNext() (held <-chan struct{}, release func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	hold, h := make(chan struct{}), make(chan struct{})
	c.hold, c.held = hold, h
	return h, func() { close(hold) }
}

// neverDenying are limiters at one permit a nanosecond: on a clock that moves
// at least a nanosecond between two decisions, none refuses an Allow.
var neverDenying = []struct {
	name string
	cfg  limiter.Config
}{
	{"schedule", limiter.Config{Rate: limiter.MaxRate, Burst: limiter.B(limiter.MaxBurst)}},
	{"schedule strict", limiter.Config{Rate: limiter.MaxRate, Burst: limiter.B(1)}},
	{"smooth", limiter.Config{Kind: limiter.KindSmooth, Rate: limiter.MaxRate}},
}

// BUG: a caller that read the clock before another caller's decision but took
// the lock after it was decided at the other's instant, where the schedule's
// pace (a start at most every slice/burst) refused it: 6–8 % of parallel Allows
// on a limiter that should never refuse one.
func TestAllowOvertakenOnTheWayToTheLock(t *testing.T) {
	for _, c := range neverDenying {
		t.Run(c.name, func(t *testing.T) {
			clk := &raceClock{}
			l, err := limiter.New(c.cfg, limiter.WithClock(clk))
			if err != nil {
				t.Fatal(err)
			}
			if !l.Allow() {
				t.Fatal("the first Allow was refused")
			}
			held, release := clk.holdNext()
			late := make(chan bool)
			go func() { late <- l.Allow() }() // reads the clock first, takes the lock last
			<-held
			if !l.Allow() {
				t.Error("the overtaking Allow was refused")
			}
			release()
			if !<-late {
				t.Error("the Allow that read the clock before the other's decision was refused")
			}
		})
	}
}

// Parallel callers on a never-refusing limiter are never refused, however
// they overtake each other between the clock and the lock.
func TestAllowParallelNeverRefused(t *testing.T) {
	const goroutines, calls = 8, 2000
	for _, c := range neverDenying {
		t.Run(c.name, func(t *testing.T) {
			clk := &raceClock{yield: true}
			l, err := limiter.New(c.cfg, limiter.WithClock(clk))
			if err != nil {
				t.Fatal(err)
			}
			var refused atomic.Int64
			var wg sync.WaitGroup
			for range goroutines {
				wg.Go(func() {
					for range calls {
						if !l.Allow() {
							refused.Add(1)
						}
					}
				})
			}
			wg.Wait()
			if n := refused.Load(); n != 0 {
				t.Errorf("%d of %d parallel Allows refused", n, goroutines*calls)
			}
		})
	}
}
