package client_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/client"
	"github.com/limitd/limitd/client/redisclient"
	"github.com/limitd/limitd/limiter"
)

// ctRun calls Wait from n goroutines for about d and returns every permit.
func ctRun(t *testing.T, l *client.Limiter, n int, d time.Duration) []client.Permit {
	t.Helper()
	var (
		mu  sync.Mutex
		all []client.Permit
		wg  sync.WaitGroup
	)
	end := time.Now().Add(d)
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			var mine []client.Permit
			for time.Now().Before(end) {
				p, err := l.Wait(context.Background())
				if err != nil {
					errs <- err
					return
				}
				mine = append(mine, p)
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Wait: %v", err)
	}
	return all
}

// ctDrivenRun calls Wait from n goroutines while it drives clk, until the
// clock reaches end, and returns every permit (each goroutine's last one
// starts at end or later).
func ctDrivenRun(t *testing.T, clk *ctClock, l *client.Limiter, n int, end time.Time) []client.Permit {
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
				if now := clk.Now(); now.Before(p.Start) {
					t.Errorf("Wait returned at %v, %v before the permit's start", now, p.Start.Sub(now))
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
	clk.drive(t, func() int { return int(live.Load()) }, time.Time{}, done)
	<-done
	return all
}

// The pool's permits are the shared schedule's: with a strict limiter every
// permit is exactly one slice after the one before, whichever goroutine got
// it, starts exactly when it is due, and the store counts exactly the
// permits callers received. On a driven clock the callers keep up, so the
// pool delivers exactly the rate: one permit per slice.
func TestWaitDispensesOneSharedSchedule(t *testing.T) {
	clk, _, st := ctDriven(t)
	const rate, run = 20000.0, 250 * time.Millisecond
	slice := time.Duration(1e9 / rate)
	ctPut(t, st, "sched", strict(rate))
	tr := ctCounting(st)
	c := client.NewWithTransport(clk.transport(tr), client.WithClock(clk))
	l, err := c.Limiter("sched")
	if err != nil {
		t.Fatal(err)
	}
	t0 := clk.Now()
	end := t0.Add(run)
	all := ctDrivenRun(t, clk, l, 4, end)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	times := make([]int64, len(all))
	before := 0
	for i, p := range all {
		if !p.Shared {
			t.Fatalf("permit %d not Shared", i)
		}
		if p.Lateness != 0 || !p.Start.Equal(p.Scheduled) {
			t.Fatalf("permit %d: lateness %v, start−scheduled %v; want 0: every caller was asleep on time",
				i, p.Lateness, p.Start.Sub(p.Scheduled))
		}
		if p.Start.Before(end) {
			before++
		}
		times[i] = p.Scheduled.UnixNano()
	}
	slices.Sort(times)
	if first := time.Unix(0, times[0]); !first.Equal(t0) {
		t.Fatalf("the first permit is scheduled %v after the first Wait, want at once", first.Sub(t0))
	}
	for i := 1; i < len(times); i++ {
		if d := time.Duration(times[i] - times[i-1]); d != slice {
			t.Fatalf("sorted permits %d and %d are %v apart, want exactly %v (%d permits)", i-1, i, d, slice, len(times))
		}
	}
	if want := int(rate * run.Seconds()); before != want {
		t.Fatalf("%d permits started in the first %v, want exactly %d (the rate)", before, run, want)
	}
	w := ctWaitInfo(t, st, "sched")
	if w.Permits != int64(len(all)) {
		t.Fatalf("store permits after Close = %d, callers received %d", w.Permits, len(all))
	}
	grants := tr.grants.Load()
	if float64(grants) > 0.02*float64(len(all)) {
		t.Fatalf("%d grants for %d permits: more than 2%% of permits went to Redis", grants, len(all))
	}
	t.Logf("%d permits, %d grants, %d releases", len(all), grants, tr.releases.Load())
}

// Many goroutines on one handle: race-detector food, and the same accounting.
func TestWaitManyGoroutines(t *testing.T) {
	_, rdb, st := ctServer(t)
	ctPut(t, st, "many", strict(50000))
	c := redisclient.New(rdb, client.WithStaleAfter(time.Hour))
	l, _ := c.Limiter("many")
	var allowed sync.WaitGroup
	stop := make(chan struct{})
	var nAllowed int64
	var mu sync.Mutex
	allowed.Go(func() { // Allow and Reserve beside the waiters
		for {
			select {
			case <-stop:
				return
			default:
			}
			if l.Allow() {
				mu.Lock()
				nAllowed++
				mu.Unlock()
			}
			if r, err := l.Reserve(context.Background(), 2); err == nil {
				_ = r.Cancel()
			}
		}
	})
	all := ctRun(t, l, 64, 300*time.Millisecond)
	close(stop)
	allowed.Wait()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	seen := map[int64]bool{}
	for _, p := range all {
		k := p.Scheduled.UnixNano()
		if seen[k] {
			t.Fatalf("two permits scheduled at %v", p.Scheduled)
		}
		seen[k] = true
	}
	w := ctWaitInfo(t, st, "many")
	if w.Permits != int64(len(all))+nAllowed {
		t.Fatalf("store permits after Close = %d, callers received %d (+%d allowed)", w.Permits, len(all), nAllowed)
	}
	t.Logf("%d permits from 64 goroutines, %d Allow", len(all), nAllowed)
}

// A config change published by limitd reaches the pool at once: permits
// granted at the old rate are dropped, later ones are spaced at the new slice.
func TestReconfigurationReachesThePool(t *testing.T) {
	clk, _, st := ctDriven(t)
	const name = "live"
	ctPut(t, st, name, strict(1000))
	tr := ctCounting(st)
	// Grants of 50ms: without the event, permits at the old rate would go on
	// for up to 25ms after it (until the next grant tells the new version).
	c := client.NewWithTransport(clk.transport(tr), client.WithClock(clk), client.WithWindow(100*time.Millisecond))
	l, _ := c.Limiter(name)
	oldSlice, newSlice := time.Millisecond, 10*time.Millisecond

	var (
		mu   sync.Mutex
		all  []client.Permit
		wg   sync.WaitGroup
		live atomic.Int64
		stop atomic.Bool
	)
	live.Store(2)
	for range 2 {
		wg.Go(func() {
			defer live.Add(-1)
			for !stop.Load() {
				p, err := l.Wait(context.Background())
				if err != nil {
					t.Errorf("Wait: %v", err)
					return
				}
				mu.Lock()
				all = append(all, p)
				mu.Unlock()
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	sleepers := func() int { return int(live.Load()) }
	clk.drive(t, sleepers, clk.Now().Add(300*time.Millisecond), done)
	// Both callers are asleep on the permits they took; the change is
	// applied before the clock moves on.
	ctPut(t, st, name, strict(100))
	tr.flush(t)
	switchAt := clk.Now()
	clk.drive(t, sleepers, switchAt.Add(500*time.Millisecond), done)
	stop.Store(true)
	clk.drive(t, sleepers, time.Time{}, done)
	<-done
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	slices.SortFunc(all, func(a, b client.Permit) int { return a.Scheduled.Compare(b.Scheduled) })
	// Before the switch every gap is the old slice; after it the new one. The
	// switch may leave one gap of idle time (the dropped permits).
	sw := -1
	for i := 1; i < len(all); i++ {
		d := all[i].Scheduled.Sub(all[i-1].Scheduled)
		switch {
		case sw < 0 && d == oldSlice:
		case sw < 0:
			sw = i
		case d != newSlice:
			t.Fatalf("permit %d of %d, after the switch at %d, is %v after the one before, want %v",
				i, len(all), sw, d, newSlice)
		}
	}
	if sw < 0 {
		t.Fatal("no permit at the new rate")
	}
	// From the first permit at the new rate on, callers keep up with it.
	first := all[sw].Scheduled
	if n, want := len(all)-sw, int(switchAt.Add(500*time.Millisecond).Sub(first)/newSlice); n < want {
		t.Fatalf("only %d permits at the new rate in the %v from its first to the end, want %d",
			n, switchAt.Add(500*time.Millisecond).Sub(first), want)
	}
	// The two callers asleep at the change hold one old permit each; no
	// other permit at the old rate is dispensed after it.
	last := all[sw-1].Scheduled
	if bound := switchAt.Add(2 * oldSlice); last.After(bound) {
		t.Fatalf("a permit at the old rate is scheduled %v after the change was applied, want ≤ %v",
			last.Sub(switchAt), 2*oldSlice)
	}
	// The dropped permits' time may stay idle (a hand-back rewinds the
	// schedule only from the last grant): at most the two grants the pool
	// held, 50ms of schedule each.
	if first.Sub(switchAt) > 100*time.Millisecond {
		t.Fatalf("the first permit at the new rate is %v after the change, want ≤ 100ms", first.Sub(switchAt))
	}
	w := ctWaitInfo(t, st, name)
	if w.Permits != int64(len(all)) {
		t.Fatalf("store permits after Close = %d, callers received %d", w.Permits, len(all))
	}
	t.Logf("%d permits, switch after %d; last old permit %v after the change, first new %v after",
		len(all), sw, last.Sub(switchAt), all[sw].Scheduled.Sub(switchAt))
}

// A grant in flight while the change event arrives was taken at the old rate:
// its permits must not be dispensed either.
func TestReconfigurationDropsGrantInFlight(t *testing.T) {
	_, _, st := ctServer(t)
	const name = "inflight"
	ctPut(t, st, name, strict(1000))
	gate := &ctGate{ctTransport: ctCounting(st)}
	c := client.NewWithTransport(gate)
	l, _ := c.Limiter(name)
	ctx := context.Background()
	// Hold the second grant's reply (a prefetch at the old rate) until the
	// change event has been applied.
	gate.hold()
	if _, err := l.Wait(ctx); err != nil { // the first grant: 2 permits
		t.Fatal(err)
	}
	res := make(chan client.Permit, 8)
	go func() {
		for range 4 {
			p, err := l.Wait(ctx)
			if err != nil {
				t.Errorf("Wait: %v", err)
				close(res)
				return
			}
			res <- p
		}
		close(res)
	}()
	if !gate.waitHeld(time.Second) {
		t.Fatal("no grant was fetched")
	}
	info := ctPut(t, st, name, strict(100))
	event := name + " " + strconv.FormatInt(info.Version, 10)
	if !ctEventually(10*time.Second, func() bool { _, ok := gate.eventAt(event); return ok }) {
		t.Fatalf("change event %q did not arrive", event)
	}
	gate.flush(t) // the watcher has applied it
	gate.release()
	var got []client.Permit
	for p := range res {
		got = append(got, p)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 {
		t.Fatalf("got %d permits, want 4", len(got))
	}
	// At most one permit at the old rate (the first grant's second), then the
	// new slice only.
	for i := 2; i < len(got); i++ {
		if d := got[i].Scheduled.Sub(got[i-1].Scheduled); d != 10*time.Millisecond {
			t.Fatalf("permit %d is %v after the one before, want 10ms: a grant at the old rate was used", i, d)
		}
	}
}

// ctGate holds the replies of every Grant after the first while closed.
type ctGate struct {
	*ctTransport
	mu      sync.Mutex
	calls   int
	gate    chan struct{}
	waiting chan struct{}
}

func (g *ctGate) hold() {
	g.mu.Lock()
	g.gate, g.waiting = make(chan struct{}), make(chan struct{}, 1)
	g.mu.Unlock()
}

func (g *ctGate) release() {
	g.mu.Lock()
	close(g.gate)
	g.gate = nil
	g.mu.Unlock()
}

func (g *ctGate) waitHeld(d time.Duration) bool {
	g.mu.Lock()
	w := g.waiting
	g.mu.Unlock()
	select {
	case <-w:
		return true
	case <-time.After(d):
		return false
	}
}

func (g *ctGate) Grant(ctx context.Context, name string, k int64, maxWait time.Duration) (sg limitd.Grant, err error) {
	sg, err = g.ctTransport.Grant(ctx, name, k, maxWait)
	g.mu.Lock()
	g.calls++
	gate, waiting := g.gate, g.waiting
	first := g.calls == 1
	g.mu.Unlock()
	if gate != nil && !first {
		select {
		case waiting <- struct{}{}:
		default:
		}
		<-gate
	}
	return sg, err
}

// Handles and their goroutines end with Close.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	_, rdb, st := ctServer(t)
	ctPut(t, st, "leak", limiter.Config{Rate: 5000})
	c := redisclient.New(rdb)
	l, _ := c.Limiter("leak")
	ctRun(t, l, 4, 100*time.Millisecond)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	_ = rdb.Close()
	goleak.VerifyNone(t, ctLeaks...)
}

// TestPoolGrantsWithinMaxReserve: a limiter whose max_reserve allows fewer
// permits than the pool would take at once (here one) still feeds the pool:
// its grants are clamped, and none is refused past the first.
func TestPoolGrantsWithinMaxReserve(t *testing.T) {
	_, _, st := ctMini(t)
	c0 := strict(10000)
	c0.MaxReserve = limiter.D(100 * time.Microsecond) // one permit (100µs) per request
	ctPut(t, st, "tight", c0)
	tr := ctCounting(st)
	c := client.NewWithTransport(tr, client.WithStaleAfter(time.Hour))
	l, err := c.Limiter("tight")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i := range 20 {
		if _, err := l.Wait(ctx); err != nil {
			t.Fatalf("Wait %d: %v", i, err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	w := ctWaitInfo(t, st, "tight")
	if w.Permits < 20 {
		t.Errorf("store permits %d, want ≥ 20", w.Permits)
	}
	// One grant a permit, and one refused at the start (sized before the
	// pool knew the bound): not a refused grant before every one.
	if g := tr.grants.Load(); g > w.Permits+3 {
		t.Errorf("%d grant calls for %d permits: grants beyond max_reserve were asked for", g, w.Permits)
	}
}

// A refused Allow keeps when the pool's next permit starts, so that callers
// refused in a loop do not fight over the pool's lock; any change of the pool
// forgets it. Here the limiter is deleted and made again: its fresh schedule
// has a permit now, which Allow must see at once, not when the old pool's
// next permit was due.
func TestAllowRefusalForgottenOnChange(t *testing.T) {
	clk, _, st := ctDriven(t)
	ctPut(t, st, "again", strict(2)) // 500ms slices
	tr := ctCounting(st)
	c := client.NewWithTransport(clk.transport(tr), client.WithClock(clk))
	defer c.Close()
	l, err := c.Limiter("again")
	if err != nil {
		t.Fatal(err)
	}
	if !l.Allow() {
		t.Fatal("first Allow = false, want true")
	}
	for range 3 {
		if l.Allow() {
			t.Fatal("Allow before the next slice = true, want false")
		}
	}
	// The first grant's prefetch lands before the change: a grant of the
	// old limiter arriving after it would be taken for the new one's (the
	// same version, 1).
	if !ctEventually(5*time.Second, func() bool { return !client.Fetching(l) }) {
		t.Fatal("the pool's prefetch never arrived")
	}
	if err := st.Delete(context.Background(), "again"); err != nil {
		t.Fatal(err)
	}
	ctPut(t, st, "again", strict(2))
	// Both changes taken by the handle's watcher (they come through Redis),
	// then applied (flush).
	if !ctEventually(5*time.Second, func() bool {
		_, deleted := tr.eventAt("again 0")
		_, made := tr.eventAt("again 1")
		return deleted && made
	}) {
		t.Fatal("the handle never heard of the limiter's deletion and re-creation")
	}
	tr.flush(t)
	if !l.Allow() {
		t.Fatal("Allow on the limiter made again = false: the old pool's refusal held")
	}
}

// A handle on a limiter that does not exist says so (AllowNext, Wait:
// limiter.ErrNotFound; Allow: false) and asks Redis again only after a
// second, or at once when the limiter is created: a missing limiter costs no
// round trip per call.
func TestMissingLimiterIsRemembered(t *testing.T) {
	clk, _, st := ctDriven(t)
	tr := ctCounting(st)
	c := client.NewWithTransport(clk.transport(tr), client.WithClock(clk))
	defer c.Close()
	l, err := c.Limiter("ghost")
	if err != nil {
		t.Fatal(err)
	}
	// The client's subscription to change events is live once it has taken
	// one: change another limiter until it does (an event published before
	// the subscription is lost).
	rate := 1.0
	if !ctEventually(5*time.Second, func() bool {
		rate++
		ctPut(t, st, "other", strict(rate))
		return tr.eventCount() > 0
	}) {
		t.Fatal("the client never heard of a change")
	}
	if _, _, err := l.AllowNext(context.Background()); !errors.Is(err, limiter.ErrNotFound) {
		t.Fatalf("AllowNext on a missing limiter: %v, want limiter.ErrNotFound", err)
	}
	asked := tr.grants.Load()
	for range 100 {
		if l.Allow() {
			t.Fatal("Allow on a missing limiter = true")
		}
	}
	if _, err := l.Wait(context.Background()); !errors.Is(err, limiter.ErrNotFound) {
		t.Fatalf("Wait on a missing limiter: %v, want limiter.ErrNotFound", err)
	}
	if got := tr.grants.Load(); got != asked {
		t.Fatalf("101 calls on a known-missing limiter asked Redis %d more times, want none", got-asked)
	}
	clk.Step(t, 1100*time.Millisecond) // remembered for a second: then asked again
	if l.Allow() || tr.grants.Load() != asked+1 {
		t.Fatalf("after a second: %d grants asked, want %d", tr.grants.Load(), asked+1)
	}
	ctPut(t, st, "ghost", strict(2))
	if !ctEventually(5*time.Second, func() bool { _, ok := tr.eventAt("ghost 1"); return ok }) {
		t.Fatal("the handle never heard of the limiter's creation")
	}
	tr.flush(t)
	if !l.Allow() {
		t.Fatal("Allow right after the limiter was created = false: the missing limiter was remembered past its creation")
	}
}

// movingClock is a driven clock that moves on by one nanosecond after each
// reading while moving is set: the caller's reading before the pool's lock
// is then older than any reading taken under it.
type movingClock struct {
	*ctClock
	moving atomic.Bool
}

func (c *movingClock) Now() time.Time {
	t := c.ctClock.Now()
	if c.moving.Load() {
		c.Advance(time.Nanosecond)
	}
	return t
}

// A permit that becomes due between the caller's reading of the clock and
// its turn at the pool's lock is the caller's: Allow refuses only at a
// reading taken under the lock (a grant may arrive, and another caller may
// take a permit, between the two).
func TestAllowRefusesOnlyAtAReadingUnderTheLock(t *testing.T) {
	clk, _, st := ctDriven(t)
	mc := &movingClock{ctClock: clk}
	const rate = 1000.0 // a slice of 1ms
	ctPut(t, st, "moving", strict(rate))
	// Grants after the first fail: the permit Allow takes must come from
	// the grant the pool holds (not its fallback), whatever a background
	// fetch for the next grant does meanwhile.
	tr := &firstGrantOnly{Transport: clk.transport(redisclient.NewTransport(st))}
	c := client.NewWithTransport(tr, client.WithClock(mc))
	t.Cleanup(func() { _ = c.Close() })
	l, err := c.Limiter("moving")
	if err != nil {
		t.Fatal(err)
	}
	if !l.Allow() { // the first permit, due at once; the grant holds the next
		t.Fatal("the first Allow was refused")
	}
	// One nanosecond before the next permit is due, on a clock that moves on
	// by one after the caller's reading.
	clk.Advance(time.Millisecond - time.Nanosecond)
	mc.moving.Store(true)
	if !l.Allow() {
		t.Fatal("Allow refused a permit that was due when it held the lock")
	}
	mc.moving.Store(false)
	if st := l.Stats(); st.SharedPermits != 2 || st.FallbackPermits != 0 {
		t.Errorf("%+v: want both permits from the first grant", st)
	}
}

// firstGrantOnly answers its first Grant and fails every later one, as a
// Redis that went away would.
type firstGrantOnly struct {
	client.Transport
	grants atomic.Int32
}

func (f *firstGrantOnly) Grant(ctx context.Context, name string, k int64, maxWait time.Duration) (limitd.Grant, error) {
	if f.grants.Add(1) > 1 {
		return limitd.Grant{}, limiter.ErrUnavailable
	}
	return f.Transport.Grant(ctx, name, k, maxWait)
}

// slowRelease is a transport whose hand-backs wait (up to a bound) for a
// grant to be asked meanwhile, and which records whether one was.
type slowRelease struct {
	client.Transport
	grantAsked  chan struct{} // closed at the first grant after armed
	asked       atomic.Bool   // set with it
	armed       atomic.Bool
	overlapping atomic.Bool // a grant was asked before a hand-back was done
	releasing   atomic.Int32
}

func (t *slowRelease) Grant(ctx context.Context, name string, k int64, maxWait time.Duration) (limitd.Grant, error) {
	if t.armed.Load() && t.armed.CompareAndSwap(true, false) {
		if t.releasing.Load() > 0 {
			t.overlapping.Store(true)
		}
		t.asked.Store(true)
		close(t.grantAsked)
	}
	return t.Transport.Grant(ctx, name, k, maxWait)
}

func (t *slowRelease) Release(ctx context.Context, g limitd.Grant, m int64) error {
	t.releasing.Add(1)
	defer t.releasing.Add(-1)
	if t.asked.Load() { // the grant got to Redis first
		t.overlapping.Store(true)
	}
	select { // a pool that does not wait for its hand-back asks at once
	case <-t.grantAsked:
	case <-time.After(200 * time.Millisecond):
	}
	return t.Transport.Release(ctx, g, m)
}

// A pool that drops a stale grant asks for the next only once the stale one
// is handed back: the hand-back rewinds the schedule only while nothing was
// granted after it, and a grant placed after permits nobody will use may
// start in the future, refusing callers the schedule has room for.
func TestFetchWaitsForTheHandBack(t *testing.T) {
	clk, _, st := ctDriven(t)
	ctPut(t, st, "stale", strict(1000))
	tr := &slowRelease{Transport: redisclient.NewTransport(st), grantAsked: make(chan struct{})}
	c := client.NewWithTransport(clk.transport(tr), client.WithClock(clk), client.WithStaleAfter(10*time.Millisecond))
	t.Cleanup(func() { _ = c.Close() })
	l, err := c.Limiter("stale")
	if err != nil {
		t.Fatal(err)
	}
	if !l.Allow() { // the first grant: this permit and at least one more
		t.Fatal("the first Allow was refused")
	}
	if !ctEventually(10*time.Second, func() bool { return !client.Fetching(l) }) {
		t.Fatal("the prefetch did not land")
	}
	clk.Advance(time.Second) // what the pool holds is stale
	tr.armed.Store(true)
	if !l.Allow() {
		t.Fatal("Allow after the hand-back was refused")
	}
	if tr.overlapping.Load() {
		t.Error("the pool asked for a grant before its hand-back was done")
	}
	if got := l.Stats().RemoteCalls; got != 5 {
		t.Errorf("%d calls to Redis, want 5 (grant, prefetch, their hand-backs, grant)", got)
	}
}
