package client

import (
	"context"
	"errors"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/limiter"
)

// Semaphore is a handle on a concurrency limiter: a distributed semaphore of
// leased slots, shared by every process using the limiter. It is safe for
// concurrent use.
//
// Acquire takes a slot, waiting for one to free up, and returns the function
// that releases it. While a slot is held, a goroutine renews its lease at
// about a third of the lease time, so that a crashed holder loses it when
// the lease ends. A slot whose lease was lost anyway (a stall past the lease,
// Redis unreachable until it ended) is reported to the WithOnLost callback;
// the holder should stop what the slot guards. When Redis loses the slots
// while they are held, each holder takes its slot again at its next renewal
// if the limit leaves room, else is told it is lost (see docs/reliability.md).
type Semaphore struct {
	c      *Client
	name   string
	o      semaphoreOptions
	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	// refused counts the polls that found every slot taken; nil: not counted
	refused *refusalCount

	mu     sync.Mutex
	held   map[*heldSlot]struct{}
	closed bool
}

// SemaphoreOption configures a Semaphore.
type SemaphoreOption func(*semaphoreOptions)

type semaphoreOptions struct {
	onLost     func(leaseID string)
	maxBackoff time.Duration
}

// WithOnLost sets what is called, from the renewing goroutine, when a held
// slot's lease is lost: a renewal found it gone (limiter.ErrNotFound), or
// Redis stayed unreachable until it expired. Its release function must still
// be called; it then does nothing remote.
func WithOnLost(f func(leaseID string)) SemaphoreOption {
	return func(o *semaphoreOptions) { o.onLost = f }
}

// WithMaxBackoff bounds the pause between two attempts of a waiting Acquire
// (default 100ms; a pause also never outlasts the earliest lease).
func WithMaxBackoff(d time.Duration) SemaphoreOption {
	return func(o *semaphoreOptions) { o.maxBackoff = max(d, time.Millisecond) }
}

const (
	semFirstBackoff = 2 * time.Millisecond
	semTimeout      = 5 * time.Second // bounds one acquire or release round trip
	semMinRenew     = 10 * time.Millisecond
)

// Semaphore returns a handle on the named concurrency limiter. A bad name is
// limiter.ErrInvalid; a limiter that does not exist shows at Acquire
// (limiter.ErrNotFound), as does one of another kind (limiter.ErrConflict).
func (c *Client) Semaphore(name string, opts ...SemaphoreOption) (*Semaphore, error) {
	if err := limitd.CheckName(name); err != nil {
		return nil, err
	}
	o := semaphoreOptions{maxBackoff: 100 * time.Millisecond}
	for _, f := range opts {
		f(&o)
	}
	s := &Semaphore{c: c, name: name, o: o, held: map[*heldSlot]struct{}{}}
	s.ctx, s.cancel = context.WithCancel(c.ctx)
	if err := c.track(s); err != nil {
		s.cancel()
		return nil, err
	}
	s.refused = c.refusals.of(name)
	return s, nil
}

// Acquire takes a slot, polling with a growing pause (bounded by when the
// earliest lease ends) while none is free, until ctx is done. release frees
// the slot; it is idempotent. Errors: ErrClosed, limiter.ErrNotFound (no such
// limiter), limiter.ErrConflict (not a concurrency limiter),
// limiter.ErrUnavailable, or ctx's.
func (s *Semaphore) Acquire(ctx context.Context) (release func(), err error) {
	backoff := semFirstBackoff
	pause, stop := mergeDone(ctx, s.ctx) // Close ends a pause too
	defer stop()
	for {
		if err := s.check(ctx); err != nil {
			return nil, err
		}
		// Not cancelled with ctx: a slot granted while ctx ended is released
		// below, rather than left held until its lease ends.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), semTimeout)
		l, err := s.c.t.AcquireSlot(cctx, s.name)
		if err == nil && l.Shadow { // let through in shadow mode: no lease to hold
			cancel()
			return func() {}, nil
		}
		if err == nil && l.Granted {
			h := s.hold(cctx, l)
			cancel()
			if err := s.check(ctx); err != nil {
				h.release()
				return nil, err
			}
			return h.release, nil
		}
		cancel()
		if err != nil {
			return nil, err
		}
		s.refused.one()
		d := backoff/2 + rand.N(backoff/2+1) // jittered: pollers do not march in step
		if l.RetryAfter > 0 {
			d = min(d, time.Duration(l.RetryAfter))
		}
		backoff = min(backoff*2, s.o.maxBackoff)
		_ = s.c.sleep(pause, d) // ended early: check says why
	}
}

// check is ErrClosed after Close, else ctx's error.
func (s *Semaphore) check(ctx context.Context) error {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return ErrClosed
	}
	return ctx.Err()
}

// hold starts renewing a granted lease. If the semaphore was closed
// meanwhile, the slot is released at once (the caller sees ErrClosed).
func (s *Semaphore) hold(ctx context.Context, l limitd.SlotLease) *heldSlot {
	off := s.c.redisOffset(ctx)
	h := &heldSlot{s: s, id: l.ID, expires: l.Expires - off, stop: make(chan struct{}), done: make(chan struct{})}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		close(h.done)
		h.release()
		return h
	}
	s.held[h] = struct{}{}
	s.mu.Unlock()
	go h.renew()
	return h
}

// InUse is the number of slots this handle holds.
func (s *Semaphore) InUse() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.held)
}

// Close releases every slot still held and ends waiting Acquires with ErrClosed.
func (s *Semaphore) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	hs := slices.Collect(maps.Keys(s.held))
	s.mu.Unlock()
	s.cancel()
	for _, h := range hs {
		h.release()
	}
	s.c.refusals.done(s.refused)
	s.c.untrack(s)
	return nil
}

// heldSlot is one granted lease being renewed.
type heldSlot struct {
	s       *Semaphore
	id      string
	expires int64         // local ns at which the lease ends; the renewer's alone once it runs
	stop    chan struct{} // closed by release
	done    chan struct{} // closed when the renewer has ended
	once    sync.Once
}

// renew extends the lease when two thirds of what is left of it have passed:
// every third of the lease time while renewals succeed, and more and more
// often while they fail, so that a failed renewal is retried several times
// before the lease ends.
func (h *heldSlot) renew() {
	defer close(h.done)
	c := h.s.c
	for {
		left := time.Duration(h.expires - c.mono())
		t := c.o.clock.NewTimer(max(left/3, semMinRenew))
		select {
		case <-h.stop:
			t.Stop()
			return
		case <-t.C():
		}
		ctx, cancel := context.WithTimeout(h.s.ctx, max(time.Duration(h.expires-c.mono()), semMinRenew))
		l, err := c.t.RenewSlot(ctx, h.s.name, h.id)
		if err == nil {
			h.expires = l.Expires - c.redisOffset(ctx)
		}
		cancel()
		switch {
		case err == nil:
		case errors.Is(err, limiter.ErrNotFound):
			h.lost()
			return
		case c.mono() >= h.expires:
			select {
			case <-h.stop: // released meanwhile: the renewal was cancelled, not lost
				return
			default:
			}
			h.lost() // unreachable until the lease ended: Redis has reclaimed it
			return
		}
	}
}

func (h *heldSlot) lost() {
	if f := h.s.o.onLost; f != nil {
		f(h.id)
	}
}

// release stops the renewal and frees the slot.
func (h *heldSlot) release() {
	h.once.Do(func() {
		close(h.stop)
		<-h.done
		s := h.s
		s.mu.Lock()
		delete(s.held, h)
		s.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), semTimeout)
		defer cancel()
		_ = s.c.t.ReleaseSlot(ctx, s.name, h.id) // not held (lost): nothing to free
	})
}
