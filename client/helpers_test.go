package client_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/client"
	"github.com/limitd/limitd/client/redisclient"
	"github.com/limitd/limitd/internal/testkit/storetest"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

// Helpers of the client tests carry the prefix ct, so they cannot clash with
// other test files of the package.

// ctMini and ctServer open a store over a miniredis, or over a private
// redis-server with short timeouts (storetest).
var ctMini, ctServer = storetest.Mini, storetest.Server

func ctPut(t *testing.T, st *store.Store, name string, c limiter.Config) limitd.Info {
	t.Helper()
	info, _, err := st.Put(context.Background(), name, c)
	if err != nil {
		t.Fatalf("Put %s: %v", name, err)
	}
	return info
}

func ctWaitInfo(t *testing.T, st *store.Store, name string) limitd.WaitInfo {
	t.Helper()
	w, err := st.Wait(context.Background(), name)
	if err != nil {
		t.Fatalf("store Wait %s: %v", name, err)
	}
	return w
}

// ctTransport wraps a Transport, counting its remote calls and timing the
// change events it delivers.
type ctTransport struct {
	client.Transport
	grants, releases, flushes atomic.Int64
	inject                    chan string // events to deliver besides the inner ones (flush)

	mu     sync.Mutex
	events []ctEvent
}

type ctEvent struct {
	msg string
	at  time.Time // when the client's watcher received it
}

func ctCounting(st *store.Store) *ctTransport {
	return &ctTransport{Transport: redisclient.NewTransport(st), inject: make(chan string)}
}

func (t *ctTransport) Grant(ctx context.Context, name string, k int64, maxWait time.Duration) (limitd.Grant, error) {
	t.grants.Add(1)
	return t.Transport.Grant(ctx, name, k, maxWait)
}

func (t *ctTransport) Release(ctx context.Context, g limitd.Grant, m int64) error {
	t.releases.Add(1)
	return t.Transport.Release(ctx, g, m)
}

// Changes forwards the inner events on an unbuffered channel, so that the
// time recorded is when the client's watcher took the event.
func (t *ctTransport) Changes(ctx context.Context) <-chan string {
	in := t.Transport.Changes(ctx)
	if in == nil {
		return nil
	}
	out := make(chan string)
	go func() {
		defer close(out)
		for {
			var m string
			select {
			case x, ok := <-in:
				if !ok {
					return
				}
				m = x
			case m = <-t.inject:
			case <-ctx.Done():
				return
			}
			select {
			case out <- m:
				t.mu.Lock()
				t.events = append(t.events, ctEvent{msg: m, at: time.Now()})
				t.mu.Unlock()
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// flush returns once the client's watcher has applied every event it took
// before: it takes one event at a time, and takes the flush event only then.
func (t *ctTransport) flush(tb testing.TB) {
	tb.Helper()
	msg := fmt.Sprintf("ct-flush-%d 1", t.flushes.Add(1))
	select {
	case t.inject <- msg:
	case <-time.After(10 * time.Second):
		tb.Fatal("the change watcher does not take events")
	}
	if !ctEventually(10*time.Second, func() bool { _, ok := t.eventAt(msg); return ok }) {
		tb.Fatal("the change watcher did not take the flush event within 10s")
	}
}

// eventCount is how many events the watcher took.
func (t *ctTransport) eventCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.events)
}

// eventAt returns when the watcher took the event msg, or false.
func (t *ctTransport) eventAt(msg string) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range t.events {
		if e.msg == msg {
			return e.at, true
		}
	}
	return time.Time{}, false
}

// ctLeaks are the goroutines goleak may ignore: redistest reaps its
// redis-server processes (restarted ones too) in goroutines of its own.
var ctLeaks = []goleak.Option{
	goleak.IgnoreAnyFunction("github.com/limitd/limitd/internal/testkit/redistest.(*Instance).startLocked.func1"),
}

// ctEventually polls cond every few ms until it holds or d has passed.
func ctEventually(d time.Duration, cond func() bool) bool {
	end := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(end) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// ctClock is a client.Clock the test drives, and the clock of the miniredis
// it is tied to: Redis TIME reads the same instant, so that schedules, leases
// and local waits follow time as the test moves it and not as fast as the
// machine runs. Timers fire when the clock passes them, never by themselves.
type ctClock struct {
	m *miniredis.Miniredis

	mu       sync.Mutex
	now      time.Time
	timers   []*ctTimer    // pending, in no order
	inflight int           // transport calls under way (ctClock.transport)
	changed  chan struct{} // closed and replaced on any change of the above
	slotAt   time.Time     // the clock when an AcquireSlot last granted
}

// lastSlot is the clock's time when an AcquireSlot through its transport last
// granted: read at the call, which the clock waits for, not when the caller
// gets to read the clock (the clock may have moved on to another sleeper).
func (c *ctClock) lastSlot() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.slotAt
}

type ctTimer struct {
	clk *ctClock
	at  time.Time
	c   chan time.Time
}

// ctDriven starts a miniredis whose clock the returned ctClock drives, at a
// whole millisecond near the wall clock (context deadlines are wall-clock
// times), and a store over it.
func ctDriven(t *testing.T) (*ctClock, *redis.Client, *store.Store) {
	t.Helper()
	m, rdb, st := ctMini(t)
	clk := &ctClock{m: m, changed: make(chan struct{})}
	clk.set(time.Now().Truncate(time.Millisecond))
	return clk, rdb, st
}

// client returns a client on the clock, over st through clk.transport.
func (c *ctClock) client(st *store.Store, opts ...client.ClientOption) *client.Client {
	return client.NewWithTransport(c.transport(redisclient.NewTransport(st)), append(opts, client.WithClock(c))...)
}

func (c *ctClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *ctClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

func (c *ctClock) NewTimer(d time.Duration) client.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &ctTimer{clk: c, at: c.now.Add(d), c: make(chan time.Time, 1)}
	if d <= 0 {
		t.c <- c.now
		return t
	}
	c.timers = append(c.timers, t)
	c.notifyLocked()
	return t
}

func (t *ctTimer) C() <-chan time.Time { return t.c }

func (t *ctTimer) Stop() bool {
	c := t.clk
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, x := range c.timers {
		if x == t {
			c.timers = append(c.timers[:i], c.timers[i+1:]...)
			c.notifyLocked()
			return true
		}
	}
	return false
}

func (c *ctClock) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *ctClock) set(t time.Time) {
	c.now = t
	if c.m != nil {
		c.m.SetTime(t)
	}
}

// ctLocalClock is a driven clock for the client alone, over a Redis whose
// clock it cannot move (a redis-server): for what only the local clock
// decides (local rates, waits) while leases last far longer than the test.
func ctLocalClock() *ctClock {
	c := &ctClock{changed: make(chan struct{})}
	c.set(time.Now().Truncate(time.Millisecond))
	return c
}

// Pending is the number of timers not yet fired.
func (c *ctClock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// stepLocked moves the clock to the earliest pending timer if it is due by
// limit, firing every timer due then, and else to limit; it reports whether
// timers fired.
func (c *ctClock) stepLocked(limit time.Time) bool {
	var next time.Time
	for _, t := range c.timers {
		if next.IsZero() || t.at.Before(next) {
			next = t.at
		}
	}
	if next.IsZero() || next.After(limit) {
		if limit.After(c.now) {
			c.set(limit)
		}
		return false
	}
	if next.After(c.now) {
		c.set(next)
	}
	kept := c.timers[:0]
	for _, t := range c.timers {
		if t.at.After(c.now) {
			kept = append(kept, t)
		} else {
			t.c <- c.now
		}
	}
	clear(c.timers[len(kept):])
	c.timers = kept
	c.notifyLocked()
	return true
}

// Advance moves the clock by d, firing the timers on the way at their own
// times, earliest first, without waiting for anyone to react to them.
func (c *ctClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	end := c.now.Add(d)
	for c.stepLocked(end) {
	}
}

// settle waits until at least n timers are pending and no transport call is
// in flight (everyone the test counts on is asleep), or until done is
// closed; false for done. Ten seconds of real time without either fail the
// test: someone did not go to sleep as the test expected.
func (c *ctClock) settle(t *testing.T, n int, done <-chan struct{}) bool {
	t.Helper()
	return c.settleFunc(t, func() int { return n }, done)
}

// settleFunc is settle for a number of sleepers that may change meanwhile.
func (c *ctClock) settleFunc(t *testing.T, sleepers func() int, done <-chan struct{}) bool {
	t.Helper()
	limit := time.NewTimer(10 * time.Second)
	defer limit.Stop()
	poll := time.NewTicker(time.Millisecond) // sleepers() may change without a word
	defer poll.Stop()
	for {
		// sleepers() is read before the clock's lock, which it must not be
		// called under: it may take locks of the code under test, whose
		// goroutines take the clock's (a timer) while they hold them.
		n := sleepers()
		c.mu.Lock()
		quiet, ch := len(c.timers) >= n && c.inflight == 0, c.changed
		c.mu.Unlock()
		if quiet {
			return true
		}
		select {
		case <-done:
			return false
		case <-ch:
		case <-poll.C:
		case <-limit.C:
			t.Fatalf("clock at %v: %d timers pending, %d calls in flight; want %d asleep", c.Now().Format(time.StampMicro), c.Pending(), c.inflight, sleepers())
		}
	}
}

// drive runs time forward from timer to timer, each time once sleepers()
// goroutines sleep on the clock (see settle), until done is closed or the
// clock reaches until (zero: no limit). Run it on the test's goroutine
// while the code under test runs on others.
func (c *ctClock) drive(t *testing.T, sleepers func() int, until time.Time, done <-chan struct{}) {
	t.Helper()
	for {
		select {
		case <-done:
			return
		default:
		}
		if !c.settleFunc(t, sleepers, done) {
			return
		}
		c.mu.Lock()
		limit := until
		if limit.IsZero() {
			limit = c.now.Add(24 * time.Hour)
		}
		fired := c.stepLocked(limit)
		reached := !until.IsZero() && !c.now.Before(until)
		c.mu.Unlock()
		if reached && !fired {
			return
		}
	}
}

// run calls f on a goroutine of its own and drives the clock while it runs,
// with sleepers() goroutines asleep at each step (f's one included).
func (c *ctClock) run(t *testing.T, sleepers int, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	c.drive(t, func() int { return sleepers }, time.Time{}, done)
	<-done
}

// transport counts tr's calls in flight for settle.
func (c *ctClock) transport(tr client.Transport) client.Transport { return &ctTimed{tr, c} }

type ctTimed struct {
	client.Transport
	c *ctClock
}

func (t *ctTimed) begin() func() {
	t.c.mu.Lock()
	t.c.inflight++
	t.c.mu.Unlock()
	return func() {
		t.c.mu.Lock()
		t.c.inflight--
		t.c.notifyLocked()
		t.c.mu.Unlock()
	}
}

func (t *ctTimed) Grant(ctx context.Context, name string, k int64, maxWait time.Duration) (limitd.Grant, error) {
	defer t.begin()()
	return t.Transport.Grant(ctx, name, k, maxWait)
}

func (t *ctTimed) Release(ctx context.Context, g limitd.Grant, m int64) error {
	defer t.begin()()
	return t.Transport.Release(ctx, g, m)
}

func (t *ctTimed) Capacity(ctx context.Context, name string, r limitd.CapacityRequest) (limitd.CapacityLease, error) {
	defer t.begin()()
	return t.Transport.Capacity(ctx, name, r)
}

func (t *ctTimed) ReturnCapacity(ctx context.Context, name, clientID string) error {
	defer t.begin()()
	return t.Transport.ReturnCapacity(ctx, name, clientID)
}

func (t *ctTimed) AcquireSlot(ctx context.Context, name string) (limitd.SlotLease, error) {
	defer t.begin()()
	l, err := t.Transport.AcquireSlot(ctx, name)
	if err == nil && l.Granted {
		t.c.mu.Lock()
		t.c.slotAt = t.c.now
		t.c.mu.Unlock()
	}
	return l, err
}

func (t *ctTimed) RenewSlot(ctx context.Context, name, id string) (limitd.SlotLease, error) {
	defer t.begin()()
	return t.Transport.RenewSlot(ctx, name, id)
}

func (t *ctTimed) ReleaseSlot(ctx context.Context, name, id string) error {
	defer t.begin()()
	return t.Transport.ReleaseSlot(ctx, name, id)
}

func (t *ctTimed) Time(ctx context.Context) (int64, error) {
	defer t.begin()()
	return t.Transport.Time(ctx)
}

// Step waits until no transport call is in flight, then advances the clock
// by d (see Advance).
func (c *ctClock) Step(t *testing.T, d time.Duration) {
	t.Helper()
	c.settle(t, 0, nil)
	c.Advance(d)
}
