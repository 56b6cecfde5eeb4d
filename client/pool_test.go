package client_test

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/limitd/limitd/client"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
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

// The pool's permits are the shared schedule's: with a strict limiter every
// permit is exactly one slice after the one before, whichever goroutine got it,
// and the store counts exactly the permits callers received.
func TestWaitDispensesOneSharedSchedule(t *testing.T) {
	_, _, st := ctServer(t)
	const rate = 20000.0
	slice := time.Duration(1e9 / rate)
	ctPut(t, st, "sched", strict(rate))
	tr := ctCounting(st)
	// Permits are never stale here: a goroutine descheduled for 100ms on a
	// busy machine must not turn into a gap the assertions would count.
	c := client.NewWithTransport(tr, client.WithStaleAfter(time.Hour))
	l, err := c.Limiter("sched")
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	all := ctRun(t, l, 4, time.Second)
	elapsed := time.Since(t0)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	times := make([]int64, len(all))
	for i, p := range all {
		if !p.Shared {
			t.Fatalf("permit %d not Shared", i)
		}
		if p.Lateness != p.Start.Sub(p.Scheduled) || p.Lateness < 0 {
			t.Fatalf("permit %d: lateness %v, start−scheduled %v", i, p.Lateness, p.Start.Sub(p.Scheduled))
		}
		times[i] = p.Scheduled.UnixNano()
	}
	slices.Sort(times)
	for i := 1; i < len(times); i++ {
		if d := time.Duration(times[i] - times[i-1]); d != slice {
			t.Fatalf("sorted permits %d and %d are %v apart, want exactly %v (%d permits)", i-1, i, d, slice, len(times))
		}
	}
	w := ctWaitInfo(t, st, "sched")
	if w.Permits != int64(len(all)) {
		t.Fatalf("store permits after Close = %d, callers received %d", w.Permits, len(all))
	}
	grants := tr.grants.Load()
	if float64(grants) > 0.02*float64(len(all)) {
		t.Fatalf("%d grants for %d permits: more than 2%% of permits went to Redis", grants, len(all))
	}
	if want := 0.5 * rate * elapsed.Seconds(); float64(len(all)) < want {
		t.Fatalf("%d permits in %v, want ≥ %.0f (half the rate)", len(all), elapsed, want)
	}
	if max := rate*elapsed.Seconds() + 1; float64(len(all)) > max {
		t.Fatalf("%d permits in %v, more than the rate allows (%.0f)", len(all), elapsed, max)
	}
	t.Logf("%d permits in %v (%.0f/s), %d grants, %d releases", len(all), elapsed,
		float64(len(all))/elapsed.Seconds(), grants, tr.releases.Load())
}

// Many goroutines on one handle: race-detector food, and the same accounting.
func TestWaitManyGoroutines(t *testing.T) {
	_, rdb, st := ctServer(t)
	ctPut(t, st, "many", strict(50000))
	c := client.New(rdb, client.WithStaleAfter(time.Hour))
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
	_, _, st := ctServer(t)
	const name = "live"
	ctPut(t, st, name, strict(1000))
	tr := ctCounting(st)
	// Grants of 50ms: without the event, permits at the old rate would go on
	// for up to 25ms after it (until the next grant tells the new version).
	c := client.NewWithTransport(tr, client.WithStaleAfter(time.Hour), client.WithWindow(100*time.Millisecond))
	l, _ := c.Limiter(name)
	oldSlice, newSlice := time.Millisecond, 10*time.Millisecond

	var (
		mu  sync.Mutex
		all []client.Permit
		wg  sync.WaitGroup
	)
	stop := make(chan struct{})
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
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
	time.Sleep(300 * time.Millisecond)
	info := ctPut(t, st, name, strict(100))
	event := name + " " + strconv.FormatInt(info.Version, 10)
	if !ctEventually(time.Second, func() bool { _, ok := tr.eventAt(event); return ok }) {
		t.Fatalf("change event %q did not arrive within 1s", event)
	}
	eventAt, _ := tr.eventAt(event)
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()
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
	if n := len(all) - sw; n < 20 {
		t.Fatalf("only %d permits at the new rate in 500ms, want ~50", n)
	}
	// Permits granted at the old rate may still be dispensed until the event
	// is applied, and those taken just before it by the two waiting
	// goroutines start a slice or two later; none much after (a loaded
	// machine may delay applying the event by a few ms).
	last := all[sw-1].Scheduled
	if bound := eventAt.Add(5*oldSlice + 5*time.Millisecond); last.After(bound) {
		t.Fatalf("a permit at the old rate is scheduled at %v, %v after the change event arrived",
			last.Format(time.StampMicro), last.Sub(eventAt))
	}
	if first := all[sw].Scheduled; first.Sub(eventAt) > time.Second {
		t.Fatalf("the first permit at the new rate is %v after the event", first.Sub(eventAt))
	}
	w := ctWaitInfo(t, st, name)
	if w.Permits != int64(len(all)) {
		t.Fatalf("store permits after Close = %d, callers received %d", w.Permits, len(all))
	}
	t.Logf("%d permits, switch after %d; last old permit %v after the event, first new %v after",
		len(all), sw, last.Sub(eventAt), all[sw].Scheduled.Sub(eventAt))
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
	if !ctEventually(time.Second, func() bool { _, ok := gate.eventAt(event); return ok }) {
		t.Fatalf("change event %q did not arrive", event)
	}
	time.Sleep(20 * time.Millisecond) // the watcher applies it
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

func (g *ctGate) Grant(ctx context.Context, name string, k int64, maxWait time.Duration) (sg store.Grant, err error) {
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
	c := client.New(rdb)
	l, _ := c.Limiter("leak")
	ctRun(t, l, 4, 100*time.Millisecond)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	_ = rdb.Close()
	goleak.VerifyNone(t, ctLeaks...)
}
