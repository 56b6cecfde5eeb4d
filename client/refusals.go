package client

import (
	"context"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitd/limitd"
)

// Refusal counts. A client over Redis decides most calls itself, from the
// permits its pools hold, so a limitd server never sees them. So the client
// counts its refusals (on the hot path an atomic add, no lock, no
// allocation) and adds them once a second to the same Redis totals a limitd
// server's ledger writes, through the same tally (RefusalTally), under the
// same bounds. What counts as a refusal is listed in docs/go-client.md
// ("Refusals the client counts"); errors are not refusals, and granted
// permits Redis recorded as it granted them.

// refusalCount is what one limiter's handles and semaphores of this
// client refused since the last flush.
type refusalCount struct {
	name    string
	subject atomic.Int32 // what name is: subjectUnknown until a decision says
	// ones are refusals of one permit (Allow, Wait): one atomic add each.
	ones atomic.Int64
	// calls and permits are refusals of more (Reserve, WaitN, Acquire).
	calls, permits atomic.Int64
}

const (
	subjectUnknown  int32 = iota
	subjectLimiter        // a named limiter
	subjectInstance       // a template instance
)

// one counts a refusal of one permit, many one of n: a nil count (no
// counting) counts nothing.
func (r *refusalCount) one() {
	if r != nil {
		r.ones.Add(1)
	}
}

func (r *refusalCount) many(n int64) {
	if r != nil {
		r.calls.Add(1)
		r.permits.Add(n)
	}
}

// saw records what a decision from Redis said name is (whether a template
// instance decided, which the counts are flushed under).
func (r *refusalCount) saw(instance bool) {
	if r == nil {
		return
	}
	s := subjectLimiter
	if instance {
		s = subjectInstance
	}
	if r.subject.Load() != s {
		r.subject.Store(s)
	}
}

// take returns the counts and zeroes them.
func (r *refusalCount) take() limitd.Counts {
	ones, calls, permits := r.ones.Swap(0), r.calls.Swap(0), r.permits.Swap(0)
	return limitd.Counts{RefusedCalls: ones + calls, RefusedPermits: ones + permits}
}

func (r *refusalCount) empty() bool {
	return r.ones.Load() == 0 && r.calls.Load() == 0 && r.permits.Load() == 0
}

// giveBack adds c to the counts again (their subject was not known yet).
func (r *refusalCount) giveBack(c limitd.Counts) {
	r.calls.Add(c.RefusedCalls)
	r.permits.Add(c.RefusedPermits)
}

// refusals is a client's refusal counting: one count per limiter its
// handles and semaphores use, and the tally they are flushed through.
type refusals struct {
	tally RefusalTally

	mu     sync.Mutex
	counts map[string]*refusalCount
	users  map[*refusalCount]int // open handles and semaphores using each count
}

func newRefusals(tally RefusalTally) *refusals {
	return &refusals{tally: tally, counts: map[string]*refusalCount{}, users: map[*refusalCount]int{}}
}

// of returns the count of name for a new handle or semaphore, which calls
// done when it closes; nil when r is (no counting).
func (r *refusals) of(name string) *refusalCount {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.counts[name]
	if c == nil {
		c = &refusalCount{name: name}
		r.counts[name] = c
	}
	r.users[c]++
	return c
}

// done ends a closing handle's or semaphore's use of c. The count stays
// until a flush has taken what it holds.
func (r *refusals) done(c *refusalCount) {
	if r == nil || c == nil {
		return
	}
	r.mu.Lock()
	r.users[c]--
	r.mu.Unlock()
}

// gather moves c's counts into the tally.
func (r *refusals) gather(ctx context.Context, c *refusalCount) {
	n := c.take()
	if n.IsZero() {
		return
	}
	what := c.subject.Load()
	s, ok := r.subjectOf(ctx, c.name, what)
	if !ok {
		c.giveBack(n) // the next flush asks again
		return
	}
	if what == subjectUnknown && (s.Limiter != "" || s.Instance != "") {
		c.saw(s.Instance != "") // no lookup next time
	}
	r.tally.Add(s, n)
}

// subjectOf names what name's refusals count under (RefusalTally.Subject):
// a limiter a decision told of without asking the tally.
func (r *refusals) subjectOf(ctx context.Context, name string, what int32) (limitd.Subject, bool) {
	if what == subjectLimiter {
		return limitd.Subject{Limiter: name}, true
	}
	return r.tally.Subject(ctx, name, what == subjectInstance)
}

// direct counts the refusal of a direct acquire (Client.Acquire,
// AcquireAll) of permits on name, whose decision said whether an instance
// refused: straight into the tally, a round trip having been paid anyway.
func (r *refusals) direct(ctx context.Context, name string, permits int64, instance bool) {
	what := subjectLimiter
	if instance {
		what = subjectInstance
	}
	if s, ok := r.subjectOf(ctx, name, what); ok {
		r.tally.Add(s, limitd.Counts{RefusedCalls: 1, RefusedPermits: permits})
	}
}

// flush gathers every count in use and adds the tally to Redis.
func (r *refusals) flush(ctx context.Context) error {
	r.mu.Lock()
	cs := slices.Collect(maps.Values(r.counts))
	r.mu.Unlock()
	for _, c := range cs {
		r.gather(ctx, c)
	}
	r.mu.Lock()
	for _, c := range cs { // counts of closed handles, once empty
		if r.users[c] == 0 && c.empty() {
			delete(r.users, c)
			delete(r.counts, c.name)
		}
	}
	r.mu.Unlock()
	return r.tally.Flush(ctx)
}

// runRefusals flushes every second until the client closes (Close flushes the rest).
func (c *Client) runRefusals() {
	r := c.refusals
	for {
		t := c.o.clock.NewTimer(time.Second)
		select {
		case <-t.C():
			_ = r.flush(c.ctx)
		case <-c.ctx.Done():
			t.Stop()
			return
		}
	}
}

// flushLast flushes what the closed client's handles refused (for at most
// 2 s: Close must not hang on a Redis that does not answer).
func (c *Client) flushLast() error {
	if c.refusals == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return c.refusals.flush(ctx)
}
