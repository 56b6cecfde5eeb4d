package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/internal/testkit/redistest"
	"github.com/limitd/limitd/lua"
)

// The batcher's tests count and hold round trips instead of timing them: a
// hook on the client holds every acquire round trip (a script or function
// call, alone or in a pipeline) until the test lets it go, whatever its
// context says, as a Redis that hangs would, and reports each as it
// arrives. What is checked is the order of events: a round trip sent while
// another is held, a caller answered while its batch is held.

// heldTrip is one acquire round trip the gate saw: when it arrived, its
// context's deadline (zero: none) and its acquire calls.
type heldTrip struct {
	at, deadline time.Time
	calls        int
}

// gate reports every acquire round trip and holds it while closed.
type gate struct {
	acquire map[string]bool // the acquire script's hash and function's name
	closed  atomic.Bool
	arrived chan heldTrip
	open    chan struct{} // closed: every held round trip goes on
	once    sync.Once
}

func newGate(t *testing.T) *gate {
	g := &gate{arrived: make(chan heldTrip, 256), open: make(chan struct{})}
	t.Cleanup(g.release)
	return g
}

// release lets every round trip through, held or to come.
func (g *gate) release() { g.once.Do(func() { close(g.open) }) }

// acquireCalls counts the calls of the acquire script or function in cmds.
func (g *gate) acquireCalls(cmds ...redis.Cmder) int {
	n := 0
	for _, c := range cmds {
		if args := c.Args(); len(args) > 1 && (c.Name() == "fcall" || c.Name() == "evalsha") {
			if name, _ := args[1].(string); g.acquire[name] {
				n++
			}
		}
	}
	return n
}

func (g *gate) pass(ctx context.Context, calls int) {
	if calls == 0 || g.acquire == nil {
		return
	}
	dl, _ := ctx.Deadline()
	g.arrived <- heldTrip{at: time.Now(), deadline: dl, calls: calls}
	if g.closed.Load() {
		<-g.open
	}
}

// hook is the client hook that passes every round trip through g.
func (g *gate) hook() redistest.TripHook {
	return redistest.TripHook{Before: func(ctx context.Context, cmds []redis.Cmder) { g.pass(ctx, g.acquireCalls(cmds...)) }}
}

// next is the next held round trip; it fails t if none comes within a
// liveness bound.
func (g *gate) next(t *testing.T, what string) heldTrip {
	t.Helper()
	select {
	case h := <-g.arrived:
		return h
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no round trip sent", what)
		return heldTrip{}
	}
}

// none fails t if a round trip arrived.
func (g *gate) none(t *testing.T, what string) {
	t.Helper()
	select {
	case h := <-g.arrived:
		t.Fatalf("%s: a round trip was sent (%+v)", what, h)
	default:
	}
}

// gatedStore is a batching store over miniredis whose client (pool of
// poolSize connections) has a gate, with a limiter "a" that grants every
// acquire at once. The gate starts open; the script is loaded.
func gatedStore(t *testing.T, poolSize int) (*Store, *gate) {
	t.Helper()
	_, rdb := redistest.Mini(t, func(o *redis.Options) { o.PoolSize = poolSize })
	g := newGate(t)
	rdb.AddHook(g.hook())
	s := stStore(t, rdb, WithBatching(64))
	// Released before the store's Close, which waits for round trips.
	t.Cleanup(g.release)
	// No pace: a batch decides all its requests at one instant.
	stPut(t, s, "a", stSched(1e6, math.Inf(1)))
	stAcquire(t, s, "a", 1, 0) // the script loaded
	g.acquire = map[string]bool{s.scripts[lua.Acquire].Hash(): true, s.fn.lib.Functions[lua.Acquire]: true}
	g.closed.Store(true)
	return s, g
}

// openCalls is how many calls the open batch holds.
func openCalls(b *batcher) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.open == nil {
		return 0
	}
	return len(b.open.calls)
}

// answer is what a caller got, or nothing yet.
type answer struct {
	d   limitd.Decision
	err error
}

// acquireAsync starts AcquireWithin (within 0: Acquire) and returns where its
// answer will come.
func acquireAsync(s *Store, name string, within time.Duration) <-chan answer {
	ch := make(chan answer, 1)
	go func() {
		d, err := s.AcquireWithin(context.Background(), name, 1, 0, within)
		ch <- answer{d, err}
	}()
	return ch
}

func waitAnswer(t *testing.T, ch <-chan answer, what string) answer {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no answer", what)
		return answer{}
	}
}

// TestBatcherSendsAtOnce: a call that arrives while round trips are under
// way goes out on a round trip of its own without waiting for one of them
// to come back, however many there are (below the pool's size): each costs
// one round trip.
func TestBatcherSendsAtOnce(t *testing.T) {
	s, g := gatedStore(t, 10)
	var callers []<-chan answer
	for i := range 6 {
		callers = append(callers, acquireAsync(s, "a", 0))
		if h := g.next(t, fmt.Sprintf("a caller while %d round trips are held", i)); h.calls != 1 {
			t.Fatalf("caller %d's round trip has %d calls", i, h.calls)
		}
	}
	g.release()
	for i, ch := range callers {
		if a := waitAnswer(t, ch, "a caller"); a.err != nil || !a.d.Granted {
			t.Errorf("caller %d: %+v", i, a)
		}
	}
}

// TestBatcherBoundWhileQueued: with as many round trips held as the client
// has connections, further callers gather in a batch that cannot leave;
// each is answered at its bound while the round trips are still held, and
// none of them is sent once they end, so they take no permits.
func TestBatcherBoundWhileQueued(t *testing.T) {
	s, g := gatedStore(t, 2)
	held := []<-chan answer{acquireAsync(s, "a", 0)}
	g.next(t, "the first caller")
	held = append(held, acquireAsync(s, "a", 0))
	g.next(t, "the second caller")

	var queued []<-chan answer
	for range 4 {
		queued = append(queued, acquireAsync(s, "a", 20*time.Millisecond))
	}
	for i, ch := range queued {
		a := waitAnswer(t, ch, "a queued caller with a bound") // while both round trips are held
		if !errors.Is(a.err, ErrUnavailable) || !errors.Is(a.err, context.DeadlineExceeded) {
			t.Errorf("queued caller %d: %+v, want ErrUnavailable for its deadline", i, a)
		}
	}
	g.none(t, "callers past their bound")
	before := stWait(t, s, "a").Permits

	g.release()
	for i, ch := range held {
		if a := waitAnswer(t, ch, "a held caller"); a.err != nil || !a.d.Granted {
			t.Errorf("held caller %d: %+v", i, a)
		}
	}
	// The batch that ends takes the open batch if any: there is none left.
	stAcquire(t, s, "a", 1, 0)
	if got := stWait(t, s, "a").Permits; got != before+3 {
		t.Errorf("permits taken: %d after the held callers and one more, want %d (the queued callers took some)", got, before+3)
	}
}

// TestBatcherBoundWhileSent: a caller whose batch is in flight is answered
// at its bound even when the round trip outlives it (a client that does
// not honour context deadlines), and the round trip carries the bound as
// its deadline.
func TestBatcherBoundWhileSent(t *testing.T) {
	s, g := gatedStore(t, 10)
	direct := acquireAsync(s, "a", 0)
	g.next(t, "a lone caller")
	// Long enough that a busy machine sends the call before its bound.
	const within = 500 * time.Millisecond
	start := time.Now()
	bounded := acquireAsync(s, "a", within)
	h := g.next(t, "a bounded caller")
	if h.deadline.Before(start.Add(within)) || h.deadline.After(h.at.Add(within)) {
		t.Errorf("the batch's deadline is %v after the call, want its bound, %v", h.deadline.Sub(start), within)
	}
	if a := waitAnswer(t, bounded, "a bounded caller in flight"); !errors.Is(a.err, ErrUnavailable) {
		t.Errorf("a bounded caller in flight: %+v, want ErrUnavailable", a)
	}
	g.release()
	if a := waitAnswer(t, direct, "the lone caller"); a.err != nil || !a.d.Granted {
		t.Errorf("the lone caller: %+v", a)
	}
}

// TestBatcherEarliestBound: a batch's round trip ends by the earliest bound
// of its calls, not the latest.
func TestBatcherEarliestBound(t *testing.T) {
	s, g := gatedStore(t, 2)
	held := []<-chan answer{acquireAsync(s, "a", 0)}
	g.next(t, "the first caller")
	held = append(held, acquireAsync(s, "a", 0))
	g.next(t, "the second caller")
	// Two callers, bound 1 s and 1.5 s (below batchTimeout), gather in one
	// batch, which leaves when a round trip ends.
	const earlier, later = time.Second, 1500 * time.Millisecond
	before := time.Now()
	short := acquireAsync(s, "a", earlier)
	long := acquireAsync(s, "a", later)
	for openCalls(s.batcher) < 2 {
		time.Sleep(time.Millisecond) // a liveness wait: both callers join
	}
	joined := time.Now()
	g.release()
	h := g.next(t, "the batch of two")
	if h.calls != 1 || h.deadline.Before(before.Add(earlier)) || h.deadline.After(joined.Add(earlier)) {
		t.Errorf("the batch of two: %d calls, deadline %v after the first joined, want 1 call and the earlier bound, %v",
			h.calls, h.deadline.Sub(before), earlier)
	}
	for i, ch := range append(held, short, long) {
		if a := waitAnswer(t, ch, "a caller"); a.err != nil || !a.d.Granted {
			t.Errorf("caller %d: %+v", i, a)
		}
	}
}

// TestBatcherCloseAnswersWaiting: Close answers at once the callers whose
// batch has not left, while round trips are still under way.
func TestBatcherCloseAnswersWaiting(t *testing.T) {
	s, g := gatedStore(t, 2)
	held := []<-chan answer{acquireAsync(s, "a", 0)}
	g.next(t, "the first caller")
	held = append(held, acquireAsync(s, "a", 0))
	g.next(t, "the second caller")
	waiting := []<-chan answer{acquireAsync(s, "a", 0), acquireAsync(s, "a", 0)}
	for openCalls(s.batcher) < 2 {
		time.Sleep(time.Millisecond) // a liveness wait: both callers join
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	for i, ch := range waiting {
		if a := waitAnswer(t, ch, "a waiting caller at Close"); !errors.Is(a.err, ErrClosed) {
			t.Errorf("waiting caller %d: %+v, want ErrClosed", i, a)
		}
	}
	g.release()
	for i, ch := range held {
		if a := waitAnswer(t, ch, "a held caller"); a.err != nil || !a.d.Granted {
			t.Errorf("held caller %d: %+v", i, a)
		}
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(t.Context(), "a", 1, 0); !errors.Is(err, ErrClosed) {
		t.Errorf("Acquire after Close: %v", err)
	}
}

// TestBatcherWaitsForAnsweredCallers: once a batch's round trip comes
// back, the open batch waits for the callers it answered, and they go out
// together, not the first of them alone straight to Redis (nothing being
// under way) and the rest after it; a lone caller still goes straight to
// Redis every time. A batch's round trip is told from a caller's own: it
// runs on a deadline (batchTimeout) where a caller without a bound has
// none.
func TestBatcherWaitsForAnsweredCallers(t *testing.T) {
	s, g := gatedStore(t, 10)
	b := s.batcher
	b.mu.Lock()
	b.maxLinger = time.Minute // a batch leaves for its callers only
	b.expect(3)               // as if three callers had just been answered
	b.mu.Unlock()
	var callers []<-chan answer
	for range 3 {
		callers = append(callers, acquireAsync(s, "a", 0))
	}
	if h := g.next(t, "three callers"); h.deadline.IsZero() {
		t.Fatal("a caller went straight to Redis while a batch waited for it")
	}
	g.none(t, "three callers in one batch")
	g.release()
	for i, ch := range callers {
		if a := waitAnswer(t, ch, "a caller"); a.err != nil || !a.d.Granted {
			t.Fatalf("caller %d: %+v", i, a)
		}
	}
	callers = callers[:0]
	for range 3 { // the same callers come back
		callers = append(callers, acquireAsync(s, "a", 0))
	}
	if h := g.next(t, "the callers back"); h.deadline.IsZero() {
		t.Error("the first caller back went straight to Redis, alone")
	}
	for i, ch := range callers {
		if a := waitAnswer(t, ch, "a caller back"); a.err != nil || !a.d.Granted {
			t.Errorf("caller %d back: %+v", i, a)
		}
	}
	g.none(t, "the callers back, in one batch")

	// A lone caller: its round trip leaves no batch open.
	s, g = gatedStore(t, 10)
	g.release()
	for i := range 2 {
		stAcquire(t, s, "a", 1, 0)
		if h := g.next(t, "a lone caller"); !h.deadline.IsZero() {
			t.Errorf("a lone caller's call %d went in a batch", i)
		}
	}
}
