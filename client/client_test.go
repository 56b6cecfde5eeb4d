package client_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/limitd/limitd/client"
	"github.com/limitd/limitd/client/redisclient"
	"github.com/limitd/limitd/limiter"
)

// strict is a schedule limiter without catch-up: permits exactly one slice apart.
func strict(rate float64) limiter.Config {
	return limiter.Config{Rate: rate, Burst: limiter.B(1)}
}

func TestAllowTakesOnlyDuePermits(t *testing.T) {
	clk, _, st := ctDriven(t)
	ctPut(t, st, "api", strict(2)) // a permit every 500ms
	c := clk.client(st)
	defer c.Close()
	l, err := c.Limiter("api")
	if err != nil {
		t.Fatal(err)
	}
	if !l.Allow() {
		t.Fatal("first Allow = false, want true: a fresh schedule starts now")
	}
	if l.Allow() {
		t.Fatal("second Allow at once = true, want false: the next permit is 500ms away")
	}
	clk.Step(t, 499*time.Millisecond)
	if l.Allow() {
		t.Fatal("Allow 1ms before the next start = true, want false")
	}
	clk.Step(t, time.Millisecond)
	if !l.Allow() {
		t.Fatal("Allow after one slice = false, want true")
	}
	if l.Allow() {
		t.Fatal("Allow right after = true, want false")
	}
	// A refused Allow takes nothing: the schedule holds exactly the permits
	// allowed, once the pool has handed back what it holds.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if got := ctWaitInfo(t, st, "api").Permits; got != 2 {
		t.Fatalf("store permits after Close = %d, want 2 (the allowed ones)", got)
	}
}

// A caller slower than a low rate is never refused: the permit the pool
// holds for it is late, not stale, when it comes.
func TestAllowSlowerThanTheRate(t *testing.T) {
	clk, _, st := ctDriven(t)
	ctPut(t, st, "slow", strict(5)) // 200ms slices
	c := clk.client(st)
	defer c.Close()
	l, _ := c.Limiter("slow")
	for i := range 6 {
		if !l.Allow() {
			t.Fatalf("Allow %d, 330ms after the one before, refused", i)
		}
		clk.Step(t, 330*time.Millisecond)
	}
}

func TestReserveCancelRewindsTheSchedule(t *testing.T) {
	clk, _, st := ctDriven(t)
	ctPut(t, st, "r", strict(10))
	c := clk.client(st)
	defer c.Close()
	l, _ := c.Limiter("r")
	ctx := context.Background()

	r, err := l.Reserve(ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	if d := r.Delay(); d != 0 {
		t.Fatalf("first reservation's Delay = %v, want 0", d)
	}
	first := r.Permit()
	if w := ctWaitInfo(t, st, "r"); w.Allocated != int64(500*time.Millisecond) || w.Permits != 5 {
		t.Fatalf("after Reserve(5): allocated %v, permits %d; want 500ms, 5", time.Duration(w.Allocated), w.Permits)
	}
	if err := r.Cancel(); err != nil {
		t.Fatal(err)
	}
	if err := r.Cancel(); err != nil { // a second Cancel does nothing
		t.Fatal(err)
	}
	if w := ctWaitInfo(t, st, "r"); w.Allocated != 0 || w.Permits != 0 || w.Idle != 0 {
		t.Fatalf("after Cancel: allocated %v, idle %v, permits %d; want all 0 (rewound)", time.Duration(w.Allocated), time.Duration(w.Idle), w.Permits)
	}
	// The next reservation starts where the cancelled one did.
	r2, err := l.Reserve(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := r2.Permit().Scheduled; !got.Equal(first.Scheduled) {
		t.Fatalf("after Cancel the next grant is scheduled at %v, want %v (the cancelled one's)", got, first.Scheduled)
	}

	// A cancelled reservation with a later one behind it cannot rewind: its
	// time becomes idle, and its permits leave the count.
	r3, err := l.Reserve(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	r4, err := l.Reserve(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := r3.Cancel(); err != nil {
		t.Fatal(err)
	}
	w := ctWaitInfo(t, st, "r")
	if w.Permits != 2 || w.Idle != int64(300*time.Millisecond) || w.Allocated != int64(200*time.Millisecond) {
		t.Fatalf("after cancelling a middle reservation: permits %d idle %v allocated %v; want 2, 300ms, 200ms",
			w.Permits, time.Duration(w.Idle), time.Duration(w.Allocated))
	}
	if got, want := r4.Permit().Scheduled.Sub(first.Scheduled), 400*time.Millisecond; got != want {
		t.Fatalf("r4 scheduled %v after the first, want %v", got, want)
	}
}

func TestWaitNTakesManyPermitsAtOnce(t *testing.T) {
	clk, _, st := ctDriven(t)
	ctPut(t, st, "n", strict(100)) // 10ms slices
	c := clk.client(st)
	defer c.Close()
	l, _ := c.Limiter("n")
	ctx := context.Background()

	p1, err := l.WaitN(ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	t0 := clk.Now()
	var p2 client.Permit
	clk.run(t, 1, func() { p2, err = l.WaitN(ctx, 5) })
	if err != nil {
		t.Fatal(err)
	}
	if el := clk.Since(t0); el != 50*time.Millisecond {
		t.Fatalf("second WaitN(5) returned %v later, want 50ms (the first's 5 slices)", el)
	}
	if got := p2.Scheduled.Sub(p1.Scheduled); got != 50*time.Millisecond {
		t.Fatalf("WaitN(5) permits %v apart, want exactly 50ms", got)
	}
	if !p1.Shared || !p2.Shared {
		t.Fatal("WaitN permits should be Shared")
	}
	if got := ctWaitInfo(t, st, "n").Permits; got != 10 {
		t.Fatalf("store permits = %d, want 10", got)
	}
	// WaitN(1) is Wait.
	clk.run(t, 1, func() { _, err = l.WaitN(ctx, 1) })
	if err != nil {
		t.Fatal(err)
	}
}

func TestWaitNDeadlineTakesNothing(t *testing.T) {
	clk, _, st := ctDriven(t)
	ctPut(t, st, "nd", strict(1))
	c := clk.client(st)
	defer c.Close()
	l, _ := c.Limiter("nd")
	if _, err := l.WaitN(context.Background(), 3); err != nil { // the next start is 3s away
		t.Fatal(err)
	}
	before := ctWaitInfo(t, st, "nd")
	ctx, cancel := context.WithDeadline(context.Background(), clk.Now().Add(500*time.Millisecond))
	defer cancel()
	// Decided before any sleep: a WaitN that slept would end, when the
	// deadline passed in real time, with the context's own error instead.
	_, err := l.WaitN(ctx, 2)
	if !errors.Is(err, limiter.ErrDeadline) {
		t.Fatalf("WaitN past the deadline: err = %v, want limiter.ErrDeadline", err)
	}
	if after := ctWaitInfo(t, st, "nd"); after.Permits != before.Permits || after.Allocated != before.Allocated {
		t.Fatalf("a refused WaitN changed the schedule: permits %d→%d allocated %v→%v",
			before.Permits, after.Permits, time.Duration(before.Allocated), time.Duration(after.Allocated))
	}
}

func TestCloseHandsUnusedPermitsBack(t *testing.T) {
	_, rdb, st := ctMini(t)
	ctPut(t, st, "c", strict(1000))
	c := redisclient.New(rdb)
	l, _ := c.Limiter("c")
	ctx := context.Background()
	got := 0
	for range 40 {
		if _, err := l.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		got++
	}
	// A wait cancelled before its start puts its permit back in the pool;
	// Close must hand that one back too.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.Wait(cctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with a cancelled ctx: %v, want context.Canceled", err)
	}
	if w := ctWaitInfo(t, st, "c"); w.Permits < int64(got) {
		t.Fatalf("store permits %d < %d dispensed", w.Permits, got)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if w := ctWaitInfo(t, st, "c"); w.Permits != int64(got) {
		t.Fatalf("store permits after Close = %d, want %d (the dispensed ones)", w.Permits, got)
	}
}

func TestCloseHandsBackCancelledPermits(t *testing.T) {
	clk, _, st := ctDriven(t)
	ctPut(t, st, "cc", strict(2)) // 500ms slices
	c := clk.client(st)
	l, _ := c.Limiter("cc")
	first, err := l.Wait(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// Three waits cancelled while asleep before their start put three
	// permits back.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			if _, err := l.Wait(ctx); !errors.Is(err, context.Canceled) {
				t.Errorf("cancelled Wait: %v, want context.Canceled", err)
			}
		})
	}
	clk.settle(t, 3, nil)
	cancel()
	wg.Wait()
	// The next caller gets the earliest of them.
	var p client.Permit
	clk.run(t, 1, func() { p, err = l.Wait(context.Background()) })
	if err != nil {
		t.Fatal(err)
	}
	if d := p.Scheduled.Sub(first.Scheduled); d != 500*time.Millisecond {
		t.Fatalf("the Wait after three cancelled ones is %v after the first, want 500ms (the earliest put back)", d)
	}
	// Close hands back the two still in the pool.
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	w := ctWaitInfo(t, st, "cc")
	if w.Permits != 2 {
		t.Fatalf("store permits after Close = %d, want 2 (the dispensed ones)", w.Permits)
	}
	if w.Allocated != 2*int64(500*time.Millisecond) {
		t.Fatalf("store allocated after Close = %v, want 1s", time.Duration(w.Allocated))
	}
}

func TestCallsAfterCloseFail(t *testing.T) {
	_, rdb, st := ctMini(t)
	ctPut(t, st, "x", strict(100))
	c := redisclient.New(rdb)
	l, _ := c.Limiter("x")
	ctx := context.Background()
	if _, err := l.Wait(ctx); err != nil {
		t.Fatal(err)
	}

	// One handle closed: it fails, the client still works.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := l.Wait(ctx); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("Wait on a closed handle: %v, want ErrClosed", err)
	}
	l2, err := c.Limiter("x")
	if err != nil || l2 == l {
		t.Fatalf("Limiter after closing the handle: %p, %v; want a new handle", l2, err)
	}
	if _, err := l2.Wait(ctx); err != nil {
		t.Fatal(err)
	}

	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := l2.Wait(ctx); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("Wait after client Close: %v, want ErrClosed", err)
	}
	if l2.Allow() {
		t.Fatal("Allow after Close = true")
	}
	if _, err := l2.WaitN(ctx, 3); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("WaitN after Close: %v, want ErrClosed", err)
	}
	if _, err := l2.Reserve(ctx, 1); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("Reserve after Close: %v, want ErrClosed", err)
	}
	if _, err := c.Limiter("x"); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("Limiter after Close: %v, want ErrClosed", err)
	}
}

func TestBadInput(t *testing.T) {
	_, rdb, st := ctMini(t)
	ctPut(t, st, "ok", strict(20000))
	c := redisclient.New(rdb)
	defer c.Close()
	ctx := context.Background()

	for _, name := range []string{"", "has space", "-lead", "ü", string(make([]byte, 200))} {
		_, err := c.Limiter(name)
		var fe *limiter.FieldError
		if !errors.Is(err, limiter.ErrInvalid) || !errors.As(err, &fe) || fe.Field != "name" {
			t.Errorf("Limiter(%q): %v, want ErrInvalid naming field name", name, err)
		}
	}

	missing, err := c.Limiter("missing")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := missing.Wait(ctx); !errors.Is(err, limiter.ErrNotFound) {
		t.Fatalf("Wait on an unknown limiter: %v, want ErrNotFound", err)
	}
	if _, err := missing.WaitN(ctx, 2); !errors.Is(err, limiter.ErrNotFound) {
		t.Fatalf("WaitN on an unknown limiter: %v, want ErrNotFound", err)
	}
	if missing.Allow() {
		t.Fatal("Allow on an unknown limiter = true")
	}

	l, _ := c.Limiter("ok")
	for _, n := range []int64{0, -1, -1 << 40, 1 << 50} { // 2^50 permits: 1.8 years of schedule
		check := func(what string, err error) {
			t.Helper()
			var fe *limiter.FieldError
			if !errors.Is(err, limiter.ErrInvalid) || !errors.As(err, &fe) || fe.Field != "permits" {
				t.Errorf("%s(%d): %v, want ErrInvalid naming field permits", what, n, err)
			}
		}
		_, err := l.WaitN(ctx, n)
		check("WaitN", err)
		_, err = l.Reserve(ctx, n)
		check("Reserve", err)
	}
	if w := ctWaitInfo(t, st, "ok"); w.Permits != 0 {
		t.Fatalf("bad input took %d permits", w.Permits)
	}
}

func TestCancelledWaitKeepsItsPermit(t *testing.T) {
	clk, _, st := ctDriven(t)
	ctPut(t, st, "w", strict(2)) // 500ms slices
	c := clk.client(st)
	defer c.Close()
	l, _ := c.Limiter("w")
	first, err := l.Wait(context.Background())
	if err != nil {
		t.Fatal(err)
	}

	// Already cancelled: fails at once.
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.Wait(done); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with a done ctx: %v, want context.Canceled", err)
	}

	// Cancelled while waiting for the next permit (500ms away): it returns
	// though the clock never gets there.
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error, 1)
	go func() { _, err := l.Wait(ctx); res <- err }()
	clk.settle(t, 1, nil)
	clk.Advance(50 * time.Millisecond)
	cancel()
	if err := <-res; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Wait: %v, want context.Canceled", err)
	}
	var next client.Permit
	clk.run(t, 1, func() { next, err = l.Wait(context.Background()) })
	if err != nil {
		t.Fatal(err)
	}
	if got := next.Scheduled.Sub(first.Scheduled); got != 500*time.Millisecond {
		t.Fatalf("the Wait after a cancelled one is scheduled %v after the first, want exactly 500ms (the cancelled permit)", got)
	}
	if got := ctWaitInfo(t, st, "w").Permits; got < 2 {
		t.Fatalf("store permits %d", got)
	}
}

func TestWaitDeadlineBeforeStartTakesNothing(t *testing.T) {
	clk, _, st := ctDriven(t)
	ctPut(t, st, "d", strict(2))
	c := clk.client(st)
	defer c.Close()
	l, _ := c.Limiter("d")
	first, err := l.Wait(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithDeadline(context.Background(), clk.Now().Add(200*time.Millisecond))
	defer cancel()
	// At once, the clock standing still: a Wait that slept would end, when
	// the deadline passed in real time, with the context's own error.
	_, err = l.Wait(ctx)
	if !errors.Is(err, limiter.ErrDeadline) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait with a deadline before the next start: %v, want limiter.ErrDeadline", err)
	}
	var next client.Permit
	clk.run(t, 1, func() { next, err = l.Wait(context.Background()) })
	if err != nil {
		t.Fatal(err)
	}
	if got := next.Scheduled.Sub(first.Scheduled); got != 500*time.Millisecond {
		t.Fatalf("after ErrDeadline the next permit is %v after the first, want exactly 500ms", got)
	}
}

func TestHandlesAreSharedByName(t *testing.T) {
	_, rdb, st := ctMini(t)
	ctPut(t, st, "s", strict(100))
	c := redisclient.New(rdb)
	defer c.Close()
	a, _ := c.Limiter("s")
	b, _ := c.Limiter("s", client.WithWindow(time.Second))
	if a != b {
		t.Fatal("two Limiter calls for one name gave two handles")
	}
}
