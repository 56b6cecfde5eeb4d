package client

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

// Limiter is a handle on one shared limiter: a local pool of permits granted
// from its schedule. It is safe for concurrent use.
type Limiter struct {
	c    *Client
	name string
	o    options

	mu       sync.Mutex
	blocks   []*block      // granted permits not yet dispensed, in schedule order
	back     []slot        // permits handed back by cancelled waits, reused first
	fetching chan struct{} // non-nil while a grant is being fetched
	err      error         // the last fetch's error, for callers waiting on it
	closed   bool
	version  int64

	// demand: permits dispensed since the last fetch, and when that was
	taken   int64
	since   int64
	demand  float64 // permits per second, smoothed
	rate    float64 // the shared rate, from the last grant
	share   float64 // this process's recent share of the schedule (0: unknown)
	lastEnd int64   // Redis time of the last grant's end of schedule
	lastK   int64   // the last grant's size
	starved bool    // a caller found the pool empty since the last fetch

	// fallback while Redis is unreachable
	down     bool
	retryAt  int64 // local ns of the next attempt to reach Redis
	fallback *limiter.Limiter
}

// block is one grant being dispensed: permit i is due at sched + cost(i) on
// the local clock and may start at max(that, start + pace(cost(i))).
type block struct {
	g      store.Grant
	p      limiter.Params
	i      int64 // next permit
	cost   int64 // ns from the grant's first scheduled time to permit i
	rem    int64 // the carry after i permits
	sched  int64 // local ns of the first permit's scheduled time
	start  int64 // local ns of the grant's start
	offset int64 // Redis ns − local ns, at the grant
	pace   int64 // local pacing of late permits
}

func (b *block) left() int64 { return b.g.Permits - b.i }

type slot struct{ sched, start, offset int64 }

// Permit is what a caller got from the shared schedule.
type Permit struct {
	Scheduled time.Time     // when it was due on the shared schedule (Redis clock)
	Start     time.Time     // when the caller got it (Redis clock)
	Lateness  time.Duration // Start − Scheduled
	// Shared is false for a permit issued by the fallback while Redis was
	// unreachable (its times are then local estimates).
	Shared bool
}

// next returns the next permit's times without taking it; ok is false when
// the pool is empty. Stale permits are dropped for hand-back on the way.
func (l *Limiter) next(now int64) (s slot, ok bool) {
	if n := len(l.back); n > 0 {
		return l.back[n-1], true
	}
	for len(l.blocks) > 0 {
		b := l.blocks[0]
		if b.left() <= 0 {
			l.blocks = l.blocks[1:]
			continue
		}
		sched := b.sched + b.cost
		if now-sched > int64(l.o.stale) {
			// Held too long (a stall): using these now would burst.
			l.blocks = l.blocks[1:]
			l.handBack(b)
			continue
		}
		start := max(sched, b.start+b.p.PaceOf(b.cost))
		if now-sched > l.bulkBound(b) {
			start = max(start, b.pace) // behind by more than op bulking allows: pace
		}
		return slot{sched: sched, start: start, offset: b.offset}, true
	}
	return slot{}, false
}

// bulkBound is how late a permit may start without slowing the next ones:
// one active pool, which here is one grant window (at least 1ms and 2
// slices), so that a goroutine waking a millisecond late on a busy machine
// does not lose its slot.
func (l *Limiter) bulkBound(b *block) int64 {
	return max(int64(l.o.window), int64(time.Millisecond), 2*b.p.Slice.Whole)
}

// take removes the permit next returned.
func (l *Limiter) take(s slot, now int64) {
	l.taken++
	if n := len(l.back); n > 0 {
		l.back = l.back[:n-1]
		return
	}
	b := l.blocks[0]
	c, r := b.p.Slice.Cost(1, b.rem)
	b.cost, b.rem, b.i = b.cost+c, r, b.i+1
	b.pace = max(s.start, now) + b.p.PaceOf(c)
	l.maybePrefetch(now)
}

// maybePrefetch starts fetching the next grant once less than half of the
// current one is left, so a steady caller never waits on Redis.
func (l *Limiter) maybePrefetch(now int64) {
	if l.fetching != nil || l.closed || l.down {
		return
	}
	var left, k int64
	for _, b := range l.blocks {
		left += b.left()
		k = b.g.Permits
	}
	if left*2 <= k {
		l.startFetch(now)
	}
}

// grantSize is the next grant's size: about one window of this handle's own
// demand, at least 2 permits and 1ms of schedule, at most 50ms of schedule.
func (l *Limiter) grantSize(now int64) int64 {
	if l.since > 0 && now > l.since {
		obs := float64(l.taken) / (float64(now-l.since) / 1e9)
		if l.demand == 0 {
			l.demand = obs
		} else {
			l.demand = 0.5*l.demand + 0.5*obs
		}
	}
	l.taken, l.since = 0, now
	if l.rate == 0 {
		return 2
	}
	k := l.demand * l.o.window.Seconds()
	if l.starved {
		// Callers waited on an empty pool: demand is more than we measured.
		k, l.starved = max(k, 2*float64(l.lastK)), false
	}
	lo := max(2, l.rate*1e-3)
	hi := max(1, l.rate*0.05)
	l.lastK = int64(math.Ceil(min(max(k, lo), hi)))
	return l.lastK
}

func (l *Limiter) startFetch(now int64) {
	done := make(chan struct{})
	l.fetching = done
	k := l.grantSize(now)
	l.c.wg.Add(1)
	go func() {
		defer l.c.wg.Done()
		defer close(done)
		l.fetch(k)
	}()
}

// fetch takes one grant from the shared schedule.
func (l *Limiter) fetch(k int64) {
	ctx, cancel := context.WithTimeout(l.c.ctx, 2*time.Second)
	defer cancel()
	t0 := l.c.mono()
	g, err := l.c.t.Grant(ctx, l.name, k, store.Forever)
	t1 := l.c.mono()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fetching = nil
	l.err = err
	if err != nil {
		if errors.Is(err, store.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
			l.goDown(t1)
		}
		return
	}
	if l.closed {
		l.c.wg.Add(1)
		go func() { defer l.c.wg.Done(); l.release(g, g.Permits) }()
		return
	}
	l.down = false
	off := l.c.clk.sample(g.Now, t0, t1)
	if g.Version > l.version {
		l.dropOlder(g.Version)
	}
	p := g.Params()
	l.rate = 1e9 / p.Slice.Float()
	if l.lastEnd != 0 && g.End > l.lastEnd {
		// Between the ends of two of our grants the schedule moved by
		// everyone's permits; ours were g.Permits of them.
		s := float64(g.Permits) * p.Slice.Float() / float64(g.End-l.lastEnd)
		l.share = min(1, s)
	}
	l.lastEnd = g.End
	l.blocks = append(l.blocks, &block{g: g, p: p, sched: g.Scheduled - off, start: g.Start - off, offset: off})
}

// changed reacts to a published config change: permits granted under older
// versions are handed back at once, so no permit at the old rate is used.
func (l *Limiter) changed(version int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if version > l.version {
		l.dropOlder(version)
	}
}

func (l *Limiter) dropOlder(version int64) {
	l.version = version
	kept := l.blocks[:0]
	for _, b := range l.blocks {
		if b.g.Version < version {
			l.handBack(b)
		} else {
			kept = append(kept, b)
		}
	}
	l.blocks = kept
	l.back = l.back[:0]
}

// handBack releases a block's undispensed permits in the background.
func (l *Limiter) handBack(b *block) {
	if m := b.left(); m > 0 {
		b.i = b.g.Permits
		l.c.wg.Add(1)
		go func() { defer l.c.wg.Done(); l.release(b.g, m) }()
	}
}

func (l *Limiter) release(g store.Grant, m int64) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return l.c.t.Release(ctx, g, m)
}

// goDown switches to the fallback until the next retry.
func (l *Limiter) goDown(now int64) {
	if !l.down {
		l.down = true
		rate := l.o.safeRate
		if rate <= 0 && l.rate > 0 {
			rate = l.rate
			if l.share > 0 {
				rate = l.rate * l.share
			}
		}
		l.fallback = nil
		if rate > 0 {
			l.fallback, _ = limiter.New(limiter.Config{Rate: max(rate, limiter.MinRate), Burst: limiter.B(1)},
				limiter.WithClock(clockFunc(l.c.o.clock)))
		}
	}
	l.retryAt = now + int64(l.o.retry)
}

type clockFunc func() time.Time

func (f clockFunc) Now() time.Time { return f() }
func (f clockFunc) Sleep(ctx context.Context, d time.Duration) error {
	return sleepCtx(ctx, d)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Allow reports whether a permit may start now, taking it if so. It waits for
// Redis only when the pool is empty.
func (l *Limiter) Allow() bool {
	ok, _ := l.allow(context.Background())
	return ok
}

func (l *Limiter) allow(ctx context.Context) (bool, error) {
	for {
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return false, ErrClosed
		}
		now := l.c.mono()
		if l.down {
			l.retryInBackground(now)
			ok := l.fallbackAllow()
			l.mu.Unlock()
			return ok, nil
		}
		if s, ok := l.next(now); ok {
			if s.start > now {
				l.mu.Unlock()
				return false, nil
			}
			l.take(s, now)
			l.mu.Unlock()
			return true, nil
		}
		wait := l.await(now)
		l.mu.Unlock()
		if err := l.waitFetch(ctx, wait); err != nil {
			return false, err
		}
	}
}

// retryInBackground tries Redis again once per retry interval while the
// fallback serves callers; a successful grant ends the fallback.
func (l *Limiter) retryInBackground(now int64) {
	if now >= l.retryAt && l.fetching == nil {
		l.retryAt = now + int64(l.o.retry)
		l.startFetch(now)
	}
}

func (l *Limiter) fallbackAllow() bool {
	switch l.o.fallback {
	case FallbackOptimistic:
		return true
	case FallbackPessimistic:
		return false
	}
	return l.fallback == nil || l.fallback.Allow()
}

// await returns the channel of the fetch in flight, starting one if needed.
func (l *Limiter) await(now int64) chan struct{} {
	l.starved = true
	if l.fetching == nil {
		l.startFetch(now)
	}
	return l.fetching
}

func (l *Limiter) waitFetch(ctx context.Context, done chan struct{}) error {
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	l.mu.Lock()
	err := l.err
	l.mu.Unlock()
	if err != nil && !errors.Is(err, store.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
		return err // not found, invalid: the caller must know
	}
	return nil
}

// Wait blocks until a permit may start, or ctx is done. If ctx's deadline is
// earlier than the next permit's start it returns limiter.ErrDeadline at once
// and takes nothing. A permit whose wait is cancelled goes back to the pool.
func (l *Limiter) Wait(ctx context.Context) (Permit, error) {
	if err := ctx.Err(); err != nil {
		return Permit{}, err
	}
	for {
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return Permit{}, ErrClosed
		}
		now := l.c.mono()
		if l.down {
			l.retryInBackground(now)
			l.mu.Unlock()
			return l.fallbackWait(ctx)
		}
		s, ok := l.next(now)
		if !ok {
			wait := l.await(now)
			l.mu.Unlock()
			if err := l.waitFetch(ctx, wait); err != nil {
				return Permit{}, err
			}
			continue
		}
		if dl, has := ctx.Deadline(); has && l.c.o.clock().Add(time.Duration(s.start-now)).After(dl) {
			l.mu.Unlock()
			return Permit{}, limiter.ErrDeadline
		}
		l.take(s, now)
		l.mu.Unlock()
		if err := sleepCtx(ctx, time.Duration(s.start-now)); err != nil {
			l.mu.Lock()
			if !l.closed {
				l.back = append(l.back, s)
				l.taken--
			}
			l.mu.Unlock()
			return Permit{}, err
		}
		got := max(l.c.mono(), s.start)
		return Permit{
			Scheduled: time.Unix(0, s.sched+s.offset),
			Start:     time.Unix(0, got+s.offset),
			Lateness:  time.Duration(got - s.sched),
			Shared:    true,
		}, nil
	}
}

func (l *Limiter) fallbackWait(ctx context.Context) (Permit, error) {
	switch l.o.fallback {
	case FallbackOptimistic:
		now := l.c.o.clock()
		return Permit{Scheduled: now, Start: now}, nil
	case FallbackPessimistic:
		return Permit{}, store.ErrUnavailable
	}
	l.mu.Lock()
	fb := l.fallback
	l.mu.Unlock()
	if fb == nil {
		now := l.c.o.clock()
		return Permit{Scheduled: now, Start: now}, nil
	}
	p, err := fb.Wait(ctx)
	if err != nil {
		return Permit{}, err
	}
	return Permit{Scheduled: p.Scheduled, Start: p.Start, Lateness: p.Lateness}, nil
}

// WaitN blocks until n permits may start. One permit comes from the local
// pool; more are reserved from the shared schedule in one round trip.
func (l *Limiter) WaitN(ctx context.Context, n int64) (Permit, error) {
	if n == 1 {
		return l.Wait(ctx)
	}
	r, err := l.Reserve(ctx, n)
	if err != nil {
		return Permit{}, err
	}
	d := r.Delay()
	if dl, has := ctx.Deadline(); has && l.c.o.clock().Add(d).After(dl) {
		_ = r.Cancel()
		return Permit{}, limiter.ErrDeadline
	}
	if err := sleepCtx(ctx, d); err != nil {
		_ = r.Cancel()
		return Permit{}, err
	}
	return r.Permit(), nil
}

// Reservation is n permits taken from the shared schedule in one call.
type Reservation struct {
	l      *Limiter
	g      store.Grant
	offset int64
	done   bool
}

// Reserve takes n permits from the shared schedule in one round trip, however
// far ahead they start. Wait out Delay before using them, or Cancel to hand
// them back.
func (l *Limiter) Reserve(ctx context.Context, n int64) (*Reservation, error) {
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	if n < 1 {
		return nil, &limiter.FieldError{Field: "permits", Rule: "must be ≥ 1", Value: n}
	}
	t0 := l.c.mono()
	g, err := l.c.t.Grant(ctx, l.name, n, store.Forever)
	if err != nil {
		return nil, err
	}
	t1 := l.c.mono()
	return &Reservation{l: l, g: g, offset: l.c.clk.sample(g.Now, t0, t1)}, nil
}

// Delay is how long to wait from now before the reserved permits may start.
func (r *Reservation) Delay() time.Duration {
	return max(0, time.Duration(r.g.Start-r.offset-r.l.c.mono()))
}

// Permit describes the reserved permits (Start is when they may start).
func (r *Reservation) Permit() Permit {
	return Permit{Scheduled: time.Unix(0, r.g.Scheduled), Start: time.Unix(0, r.g.Start),
		Lateness: time.Duration(r.g.Lateness), Shared: true}
}

// Cancel hands the reserved permits back to the shared schedule.
func (r *Reservation) Cancel() error {
	if r.done {
		return nil
	}
	r.done = true
	return r.l.release(r.g, r.g.Permits)
}

// Close hands the handle's unused permits back and makes further calls fail
// with ErrClosed.
func (l *Limiter) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	blocks := l.blocks
	l.blocks, l.back = nil, nil
	l.mu.Unlock()
	l.c.forget(l)
	var errs []error
	for _, b := range blocks {
		if m := b.left(); m > 0 {
			errs = append(errs, l.release(b.g, m))
		}
	}
	return errors.Join(errs...)
}
