package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/internal/clockoffset"
)

// ErrClosed is returned by a handle or client after Close.
var ErrClosed = errors.New("client: closed")

// Fallback is what a handle does while the shared schedule is unreachable.
// In every mode the permits its pool already holds were granted and are
// still dispensed, at their scheduled times, and the handle tries the
// schedule again 50 ms after the fault, then at twice the delay each time up
// to the retry interval (WithRetryInterval), callers or none.
type Fallback int

const (
	// FallbackSafe limits locally to the safe rate (WithSafeRate), or to 95 %
	// of this process's measured part of the shared rate, and counts what it
	// lets through against the schedule: it starts after what the schedule
	// had handed out, withdraws what it placed ahead of the clock when the
	// schedule answers again, and paces the handle for a cool-down after (two
	// retry intervals, at least 1 s). So processes whose parts add up to the
	// rate keep to it together; a process that still reaches the schedule
	// while this one does not may take the whole rate meanwhile (see
	// docs/reliability.md). A handle that never learned a rate and has no
	// safe rate refuses, as FallbackPessimistic does.
	FallbackSafe Fallback = iota
	// FallbackOptimistic lets every caller through at once while the shared
	// schedule is unreachable, counted nowhere (charging an outage's worth of
	// unlimited permits would stop every caller for as long): it only
	// promises that no caller waits for, or is refused because of, an outage.
	FallbackOptimistic
	// FallbackPessimistic lets nothing through beyond the pool's permits:
	// Allow refuses, Wait returns limiter.ErrUnavailable.
	FallbackPessimistic
)

func (f Fallback) String() string {
	return [...]string{"safe", "optimistic", "pessimistic"}[f]
}

// Client shares limitd schedules among processes. It is safe for concurrent
// use; create one per process and a handle per limiter with Limiter.
type Client struct {
	t      Transport
	o      options
	base   time.Time             // local monotonic origin
	sys    bool                  // the clock is the system's (see mono)
	clk    clockoffset.Estimator // Redis ns − local ns, from every round trip
	ctx    context.Context       // cancelled by Close: ends fetches and the watcher
	cancel context.CancelFunc
	wg     sync.WaitGroup

	rc redisClock // the Redis clock's offset, for leases (Share, Semaphore)

	refusals *refusals // nil: not counted (over HTTP, WithoutRefusalCounts, no tally)

	mu      sync.Mutex
	handles map[string]*Limiter
	leases  map[io.Closer]struct{} // open Shares and Semaphores, closed with the client
	closed  bool
}

// NewWithTransport returns a client over any Transport. It counts no
// refusals unless given a tally (WithRefusalCounts: redisclient.New does).
func NewWithTransport(t Transport, opts ...ClientOption) *Client {
	o := defaults()
	for _, f := range opts {
		f.applyClient(&o)
	}
	return newClient(t, o)
}

func newClient(t Transport, o options) *Client {
	c := &Client{t: t, o: o, handles: map[string]*Limiter{}, leases: map[io.Closer]struct{}{}}
	if o.refusals != nil {
		c.refusals = newRefusals(o.refusals(o.clock.Now))
	}
	_, c.sys = o.clock.(systemClock)
	c.base = o.clock.Now()
	c.ctx, c.cancel = context.WithCancel(context.Background())
	if ch := t.Changes(c.ctx); ch != nil {
		c.wg.Go(func() { c.watch(ch) })
	}
	if c.refusals != nil {
		c.wg.Go(c.runRefusals)
	}
	return c
}

// mono is the local monotonic clock in ns (time.Since reads only the
// monotonic clock; Now reads the wall clock too).
func (c *Client) mono() int64 {
	if c.sys {
		return int64(time.Since(c.base))
	}
	return int64(c.o.clock.Now().Sub(c.base))
}

// Limiter returns the handle of a limiter (or template name). Handles are
// cheap and shared: the same name gives the same handle until it is closed.
// The options override the client's for this handle on its creation.
func (c *Client) Limiter(name string, opts ...Option) (*Limiter, error) {
	if err := limitd.CheckName(name); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	if l, ok := c.handles[name]; ok {
		return l, nil
	}
	o := c.o
	for _, f := range opts {
		f.applyHandle(&o)
	}
	l := &Limiter{c: c, name: name, o: o, refused: c.refusals.of(name)}
	c.handles[name] = l
	return l, nil
}

// Stats reports what each of the client's handles did, in name order.
func (c *Client) Stats() []LimiterStats {
	c.mu.Lock()
	hs := slices.Collect(maps.Values(c.handles))
	c.mu.Unlock()
	out := make([]LimiterStats, len(hs))
	for i, l := range hs {
		out[i] = l.Stats()
	}
	slices.SortFunc(out, func(a, b LimiterStats) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Close hands every handle's unused permits back, adds the refusals
// counted since the last flush to Redis (for at most 2 s), and stops the
// client's goroutines. It does not close the Redis client.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	hs := slices.Collect(maps.Values(c.handles))
	ls := slices.Collect(maps.Keys(c.leases))
	c.mu.Unlock()
	var errs []error
	for _, l := range hs {
		errs = append(errs, l.Close())
	}
	for _, x := range ls {
		errs = append(errs, x.Close())
	}
	c.cancel()
	c.wg.Wait()
	if err := c.flushLast(); err != nil {
		errs = append(errs, fmt.Errorf("client: adding the refusals counted to Redis: %w", err))
	}
	return errors.Join(errs...)
}

// track registers a Share or Semaphore to be closed with the client.
func (c *Client) track(x io.Closer) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	c.leases[x] = struct{}{}
	return nil
}

func (c *Client) untrack(x io.Closer) {
	c.mu.Lock()
	delete(c.leases, x)
	c.mu.Unlock()
}

func (c *Client) forget(l *Limiter) {
	c.mu.Lock()
	if c.handles[l.name] == l {
		delete(c.handles, l.name)
	}
	c.mu.Unlock()
}

// watch applies published config changes to the handles at once.
func (c *Client) watch(ch <-chan string) {
	for msg := range ch {
		name, ver, ok := strings.Cut(msg, " ")
		if !ok {
			continue
		}
		c.mu.Lock()
		l := c.handles[name]
		c.mu.Unlock()
		if l != nil {
			v, _ := strconv.ParseInt(ver, 10, 64) // unreadable: 0, as a deletion
			l.changed(v)
		}
	}
}

// Transport is how a Client reaches the shared schedule: a limitd server
// over HTTP (NewHTTP) or Redis directly (package redisclient, apart so that
// a client over HTTP compiles no Redis). A Transport may also take direct
// acquires (Client.Acquire), several limiters at once (Client.AcquireAll)
// and charges (Limiter.Charge): both of limitd's do.
type Transport interface {
	// Grant takes k permits from the named limiter's schedule, waiting at most
	// maxWait for the first one.
	Grant(ctx context.Context, name string, k int64, maxWait time.Duration) (limitd.Grant, error)
	// Release hands back the last m permits of g.
	Release(ctx context.Context, g limitd.Grant, m int64) error
	// Changes delivers "<name> <version>" config changes until ctx is done.
	// A transport without change events returns a nil channel.
	Changes(ctx context.Context) <-chan string

	// Capacity asks a share limiter for a lease of its capacity (Share).
	Capacity(ctx context.Context, name string, r limitd.CapacityRequest) (limitd.CapacityLease, error)
	// ReturnCapacity ends a client's lease on a share limiter at once.
	ReturnCapacity(ctx context.Context, name, clientID string) error
	// AcquireSlot takes a slot of a concurrency limiter if one is free
	// (Semaphore); a full limiter is not an error but a lease not Granted.
	AcquireSlot(ctx context.Context, name string) (limitd.SlotLease, error)
	// RenewSlot extends a held slot's lease; limiter.ErrNotFound once it is lost.
	RenewSlot(ctx context.Context, name, id string) (limitd.SlotLease, error)
	// ReleaseSlot frees a held slot; limiter.ErrNotFound when it is not held.
	ReleaseSlot(ctx context.Context, name, id string) error
	// Time is the Redis clock now, Unix ns: leases expire on that clock, and
	// a round trip to it estimates its offset from the local clock.
	Time(ctx context.Context) (int64, error)
}

// RefusalTally is where a client adds what it refused: the Redis totals a
// limitd server's ledger writes (package redisclient's).
type RefusalTally interface {
	// Subject names what name's refusals count under: the limiter, or the
	// template whose instance it is (instance: a decision said name is
	// one; false: no decision said what name is). ok is false when it
	// could not be learned now: the next flush asks again.
	Subject(ctx context.Context, name string, instance bool) (s limitd.Subject, ok bool)
	// Add adds c to what s counts.
	Add(s limitd.Subject, c limitd.Counts)
	// Flush writes what was added since the last flush.
	Flush(ctx context.Context) error
}
