package client

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitd/limitd/limiter"
)

// Limiter is a handle on one shared limiter: a local pool of permits granted
// from its schedule. It is safe for concurrent use.
type Limiter struct {
	// The permit path touches the first fields, kept together: what every
	// caller reads before the lock, then the lock and what a permit changes.
	c *Client
	// refuseUntil is when, on the local clock, the pool's next permit may
	// start, as the last refusal found it: Allow refuses before then without
	// the lock. Every change that may bring a permit earlier or empty the
	// pool clears it (mayChange).
	refuseUntil atomic.Int64
	name        string
	o           options
	refused     *refusalCount // what callers were refused; nil: not counted

	mu            sync.Mutex
	lastTake      int64         // the local clock reading at which take last dispensed
	taken         int64         // permits dispensed since the last fetch (demand)
	sharedPermits int64         // for Stats: permits handed to callers from the shared schedule
	blocks        []*block      // granted permits not yet dispensed, in schedule order
	fetching      chan struct{} // non-nil while a grant is being fetched
	back          []slot        // permits put back by cancelled waits, earliest first, reused first
	closed        bool
	down          bool // in the fallback while Redis is unreachable

	// For Stats: permits from the fallback, and calls to Redis (or limitd).
	fallbackPermits, remoteCalls atomic.Int64

	err      error           // the last fetch's error, for callers waiting on it
	handing  []chan struct{} // hand-backs in flight (closed when done), which a fetch waits for
	version  int64           // the config version the pool dispenses
	fetchVer int64           // version when the fetch in flight started
	bg       sync.WaitGroup  // background work Close waits for: started with l.mu held, handle open

	// demand: since the last fetch (taken, above), and when that was
	since   int64
	demand  float64   // permits per second, smoothed
	rate    float64   // the shared rate, from the last grant
	part    schedPart // this process's part of the schedule, from its grants
	lastK   int64     // the last grant's size
	maxK    int64     // the most permits one grant may take (max_reserve), 0: unknown
	starved bool      // a caller found the pool empty since the last fetch
	// missingUntil: a fetch found no such limiter, or a window limiter
	// (l.err says so); until then callers are told so without asking Redis
	// again, unless a change event announces the limiter first.
	missingUntil int64

	// fallback while Redis is unreachable (down, above), see fallback.go
	retryAt   int64         // local ns of the next attempt to reach Redis
	retryStep int64         // ns from a failed attempt to the next (see firstRetry)
	retrying  bool          // retryLoop runs
	quit      chan struct{} // closed by Close (see quitting)
	horizon   int64         // local ns: the latest start of a permit taken from the pool
	schedEnd  int64         // local ns: the furthest end of the schedule a grant showed
	schedLead int64         // ns the schedule's end stood ahead of the clock at the last grant
	guard     *guard        // paces the handle while it falls back and cools down
	offset    int64         // Redis ns − local ns at the last grant; 0: none yet
}

// Permit is what a caller got from the shared schedule.
type Permit struct {
	Scheduled time.Time     // when it was due on the shared schedule (Redis clock)
	Start     time.Time     // when the caller got it (Redis clock)
	Lateness  time.Duration // Start − Scheduled
	// Shared is false for a permit issued by the fallback while Redis was
	// unreachable (its times are then local estimates).
	Shared bool
}

// Allow reports whether a permit may start now, taking it if so. It waits for
// Redis only when the pool is empty.
func (l *Limiter) Allow() bool {
	ok, _, err := l.allow(context.Background(), false)
	if !ok && err == nil {
		l.refused.one()
	}
	return ok
}

// LimiterStats is what a handle did since it was made (see Client.Stats).
type LimiterStats struct {
	Name string
	// SharedPermits were taken from the shared schedule; FallbackPermits
	// came from the local fallback while Redis was unreachable.
	SharedPermits, FallbackPermits int64
	// RemoteCalls are the grants, reservations and hand-backs the handle
	// sent to Redis (or the limitd server), failed ones included.
	RemoteCalls int64
	// Fallback is true while the handle is in its fallback mode.
	Fallback bool
}

// Stats reports what the handle did since it was made.
func (l *Limiter) Stats() LimiterStats {
	l.mu.Lock()
	down, shared := l.down, l.sharedPermits
	l.mu.Unlock()
	return LimiterStats{Name: l.name, SharedPermits: shared, FallbackPermits: l.fallbackPermits.Load(),
		RemoteCalls: l.remoteCalls.Load(), Fallback: down}
}

// mayChange clears refuseUntil: the pool is about to change (l.mu held).
func (l *Limiter) mayChange() { l.refuseUntil.Store(0) }

// AllowNext is Allow for callers that advertise the limit (httplimit): it
// tells besides how long until the next permit may start (0: now), and the
// errors Allow hides: ErrClosed, a limiter that does not exist, ctx's error
// while the pool waits for a grant.
func (l *Limiter) AllowNext(ctx context.Context) (ok bool, next time.Duration, err error) {
	ok, next, err = l.allow(ctx, true)
	if !ok && err == nil {
		l.refused.one()
	}
	return ok, next, err
}

// allow is Allow, and AllowNext if withNext (Allow does not look further
// into the pool than the permit it takes).
func (l *Limiter) allow(ctx context.Context, withNext bool) (ok bool, next time.Duration, err error) {
	for {
		now := l.c.mono() // outside the lock, which it then holds for less
		if !withNext && now < l.refuseUntil.Load() {
			return false, 0, nil
		}
		l.lock()
		if l.closed {
			l.mu.Unlock()
			return false, 0, ErrClosed
		}
		// Overtaken on the way to the lock, another caller may have taken a
		// permit at a later reading: decide at the later one, and refuse only
		// at a reading taken under the lock, which orders it after every
		// permit taken and grant arrived (only a refusal reads twice: a
		// reading costs as much as the rest of a permit).
		now = max(now, l.lastTake)
		if l.down {
			l.retryInBackground(now)
		}
		s, ok := l.next(now)
		if ok && max(s.start, l.gate(now)) > now {
			now = max(l.c.mono(), now)
			s, ok = l.next(now)
		}
		if ok {
			if start := max(s.start, l.gate(now)); start > now {
				l.refuseUntil.Store(start)
				l.mu.Unlock()
				return false, time.Duration(start - now), nil
			}
			l.take(s, now)
			if l.gate(now) > 0 {
				l.guard.take(now)
			}
			if withNext {
				next = l.peek(now)
			}
			l.mu.Unlock()
			return true, next, nil
		}
		if l.down { // the pool is empty: the fallback serves
			ok := l.fallbackAllow(now)
			next := l.fallbackNext(ok, now)
			l.mu.Unlock()
			return ok, next, nil
		}
		if err := l.awaitGrant(ctx, now); err != nil { // unlocks
			return false, 0, err
		}
	}
}

// lock takes l.mu for a permit, yielding to other goroutines a few times
// before it waits on the lock: with many callers a waiter parked on a mutex
// costs a wake-up far longer than the section it waits for
// (BenchmarkPermitVs/p8).
func (l *Limiter) lock() {
	for range 16 {
		if l.mu.TryLock() {
			return
		}
		runtime.Gosched()
	}
	l.mu.Lock()
}

// Rate is the shared rate in permits per second as of the last grant; 0 before.
func (l *Limiter) Rate() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rate
}

// Wait blocks until a permit may start, or ctx is done. If ctx's deadline is
// earlier than the next permit's start it returns limiter.ErrDeadline at once
// and takes nothing. A permit whose wait is cancelled goes back to the pool.
func (l *Limiter) Wait(ctx context.Context) (Permit, error) {
	if err := ctx.Err(); err != nil {
		return Permit{}, err
	}
	var passed pass // the guard's gate, passed (see gate)
	for {
		l.lock()
		if l.closed {
			l.mu.Unlock()
			return Permit{}, ErrClosed
		}
		now := l.c.mono()
		if l.down {
			l.retryInBackground(now)
		}
		gated := passed.valid(l.guard, now)
		s, ok := l.next(now)
		if !ok && l.down { // the pool is empty: the fallback serves
			p, again, err := l.fallbackWait(ctx, now, gated) // unlocks
			if again {
				continue
			}
			return p, err
		}
		if ok && !gated && l.gate(now) > 0 {
			var err error
			if passed, err = l.passGate(ctx, now); err != nil { // unlocks
				return Permit{}, err
			}
			continue
		}
		if !ok {
			if err := l.awaitGrant(ctx, now); err != nil { // unlocks
				return Permit{}, err
			}
			continue
		}
		if dl, has := ctx.Deadline(); has && l.c.o.clock.Now().Add(time.Duration(s.start-now)).After(dl) {
			l.mu.Unlock()
			l.refused.one()
			return Permit{}, limiter.ErrDeadline
		}
		l.take(s, now)
		l.mu.Unlock()
		got := now // a permit already due is the caller's at the decision
		if s.start > now {
			if err := l.c.sleep(ctx, time.Duration(s.start-now)); err != nil {
				l.putBack(s)
				return Permit{}, err
			}
			got = max(l.c.mono(), s.start)
		}
		return Permit{
			Scheduled: time.Unix(0, s.sched+s.offset),
			Start:     time.Unix(0, got+s.offset),
			Lateness:  time.Duration(got - s.sched),
			Shared:    true,
		}, nil
	}
}

// Close hands the handle's unused permits back (a grant in flight too, once it
// arrives) and makes further calls fail with ErrClosed.
func (l *Limiter) Close() error {
	// Forgotten before it is marked closed: a caller that saw ErrClosed and
	// asks Client.Limiter again gets a new handle, not this one.
	l.c.forget(l)
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.c.refusals.done(l.refused) // its counts go with the next flush
	l.closed = true
	l.mayChange()
	close(l.quitting())
	l.mu.Unlock()
	l.bg.Wait() // a grant in flight joins the pool, to be handed back below
	l.mu.Lock()
	blocks, back := l.blocks, l.back
	l.blocks, l.back = nil, nil
	for _, b := range blocks {
		b.dropped = true
	}
	l.mu.Unlock()

	// Newest grant first, so that each tail handed back rewinds the schedule
	// to the grant before. A permit put back by a cancelled wait joins its
	// grant's tail if it borders it, else its time becomes idle.
	var errs []error
	for i := len(blocks) - 1; i >= 0; i-- {
		b := blocks[i]
		m := b.left()
		for j := 0; j < len(back); j++ {
			if s := back[j]; s.b == b && s.idx == b.g.Permits-m-1 {
				m++
				back = slices.Delete(back, j, j+1)
				j = -1 // the slot before may border the tail now
			}
		}
		if m > 0 {
			errs = append(errs, l.release(b.g, m))
		}
	}
	for _, s := range back {
		errs = append(errs, l.releaseOne(s.b.g))
	}
	return errors.Join(errs...)
}
