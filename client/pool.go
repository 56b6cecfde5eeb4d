package client

import (
	"cmp"
	"context"
	"errors"
	"math"
	"net"
	"slices"
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
	back     []slot        // permits put back by cancelled waits, earliest first, reused first
	fetching chan struct{} // non-nil while a grant is being fetched
	err      error         // the last fetch's error, for callers waiting on it
	closed   bool
	version  int64 // the config version the pool dispenses
	fetchVer int64 // version when the fetch in flight started
	bg       sync.WaitGroup

	// demand: permits dispensed since the last fetch, and when that was
	taken     int64
	since     int64
	demand    float64 // permits per second, smoothed
	rate      float64 // the shared rate, from the last grant
	share     float64 // this process's recent share of the schedule (0: unknown)
	shareFrom int64   // where on the schedule the current share measurement began
	shareMine int64   // schedule ns our grants took since shareFrom
	lastK     int64   // the last grant's size
	starved   bool    // a caller found the pool empty since the last fetch

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
	got    int64 // local ns when the grant arrived
	// dropped: no longer in the pool (handed back, or lost with Redis). A
	// permit of it that a cancelled wait puts back cannot rejoin the pool.
	dropped bool
	lost    bool // dropped without a hand-back: the limiter it came from is gone
}

func (b *block) left() int64 { return b.g.Permits - b.i }

// slot is one permit out of a block: its times, and where it came from, so
// that a permit put back by a cancelled wait can still be handed back.
type slot struct {
	sched, start, offset int64
	b                    *block
	idx                  int64 // the permit's index in its grant
	back                 bool  // it is l.back[0], which next returned
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

// next returns the next permit's times without taking it; ok is false when
// the pool is empty. Stale permits are dropped for hand-back on the way.
func (l *Limiter) next(now int64) (s slot, ok bool) {
	for len(l.back) > 0 {
		s := l.back[0]
		if now-max(s.start, s.b.got) <= l.staleAfter(s.b) {
			break
		}
		l.back = l.back[1:]
		l.goBg(func() { _ = l.releaseOne(s.b.g) })
	}
	for len(l.blocks) > 0 {
		b := l.blocks[0]
		if b.left() <= 0 {
			l.blocks = l.blocks[1:]
			continue
		}
		sched := b.sched + b.cost
		start := max(sched, b.start+b.p.PaceOf(b.cost))
		// Held too long (a stall): using these now would burst. Measured from
		// when the grant let the permit start, not from when it was due: on a
		// schedule with a backlog (an idle spell, or burst 1 after any delay)
		// every permit is due in the past, and measuring from that handed
		// every fresh grant back, rewinding the schedule, forever. Nor from
		// before the grant arrived: placed at the round trip's midpoint, a
		// grant that took longer than twice the bound to arrive (a loaded
		// machine, a far Redis) was stale on arrival, handed back, fetched
		// again, and so on.
		if now-max(start, b.got) > l.staleAfter(b) {
			l.blocks = l.blocks[1:]
			l.handBack(b)
			continue
		}
		if now-sched > l.bulkBound(b) {
			start = max(start, b.pace) // behind by more than op bulking allows: pace
		}
		return l.orBack(slot{sched: sched, start: start, offset: b.offset, b: b, idx: b.i}, true)
	}
	return l.orBack(slot{}, false)
}

// orBack returns the earlier of s and the first permit put back.
func (l *Limiter) orBack(s slot, ok bool) (slot, bool) {
	if len(l.back) > 0 && (!ok || l.back[0].sched < s.sched) {
		s = l.back[0]
		s.back = true
		return s, true
	}
	return s, ok
}

// staleAfter is how late a held permit may start before it is handed back
// instead: the stale option, but never less than the bulking bound, the
// lateness the design lets a permit have. With less, a caller slower than a
// low rate (2/s, every 700ms) found each prefetched permit stale, and was
// refused although it kept below the rate.
func (l *Limiter) staleAfter(b *block) int64 {
	return max(int64(l.o.stale), l.bulkBound(b))
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
	if s.back {
		l.back = l.back[1:]
		return
	}
	b := l.blocks[0]
	c, r := b.p.Slice.Cost(1, b.rem)
	b.cost, b.rem, b.i = b.cost+c, r, b.i+1
	// Late permits are paced at the burst ratio from the permit's start, but
	// from no earlier than one bulking bound before now: a worker that comes
	// late takes up to that much at once. Pacing from now instead made every
	// late permit wait a fraction of a slice, a sleep that at high rates
	// costs far more than the slice, so a pool that once fell behind (a
	// busy machine) stayed behind for good at a few permits per wake-up.
	b.pace = max(s.start, now-l.bulkBound(b)) + b.p.PaceOf(c)
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
	l.fetching, l.fetchVer = done, l.version
	k := l.grantSize(now)
	l.goBg(func() {
		defer close(done)
		l.fetch(k)
	})
}

// goBg runs f as the handle's background work, which Close waits for. Call
// it with l.mu held on an open handle.
func (l *Limiter) goBg(f func()) {
	l.bg.Add(1)
	go func() {
		defer l.bg.Done()
		f()
	}()
}

// fetch takes one grant from the shared schedule.
func (l *Limiter) fetch(k int64) {
	ctx, cancel := context.WithTimeout(l.c.ctx, 2*time.Second)
	defer cancel()
	t0 := l.c.mono()
	g, err := l.c.t.Grant(ctx, l.name, k, store.Forever)
	if timedOut(err) && l.c.ctx.Err() == nil {
		// One more try before falling back: a process that was stalled (GC,
		// SIGSTOP) across the read timeout sees a timeout though Redis is
		// fine. A refused connection is not retried: go-redis stops dialing
		// for a while after repeated dial errors.
		t0 = l.c.mono()
		g, err = l.c.t.Grant(ctx, l.name, k, store.Forever)
	}
	t1 := l.c.mono()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fetching = nil
	l.err = err
	if err != nil {
		if !l.closed && unreachable(err) {
			l.goDown(t1)
		}
		return
	}
	off := l.c.clk.sample(g.Now, t0, t1)
	p := g.Params()
	b := &block{g: g, p: p, sched: g.Scheduled - off, start: g.Start - off, offset: off, got: t1}
	if l.closed {
		l.blocks = append(l.blocks, b) // Close, waiting for this fetch, hands it back
		return
	}
	l.down = false
	switch {
	case g.Version > l.version:
		l.dropOlder(g.Version)
	case g.Version < l.version && l.version != l.fetchVer:
		// The change event arrived while this grant was in flight: it was
		// taken under the old config, and must not be dispensed.
		l.handBack(b)
		return
	case g.Version < l.version:
		// The version went down with no event in between: the limiter was
		// re-created (Redis lost it). What the pool holds is the lost one's.
		l.dropLost()
		l.version = g.Version
	}
	l.rate = 1e9 / p.Slice.Float()
	l.estimateShare(g, p)
	l.blocks = append(l.blocks, b)
}

// estimateShare measures this process's share of the shared schedule, the
// fallback's safe rate: over about a second of schedule, the time our grants
// took out of it against how far it moved.
func (l *Limiter) estimateShare(g store.Grant, p limiter.Params) {
	if l.shareFrom == 0 || g.End < l.shareFrom {
		l.shareFrom, l.shareMine = g.End, 0
		return
	}
	cost, _ := p.Slice.Cost(g.Permits, 0)
	l.shareMine += cost
	if span := g.End - l.shareFrom; span >= int64(time.Second) {
		l.share = min(1, float64(l.shareMine)/float64(span))
		l.shareFrom, l.shareMine = g.End, 0
	}
}

func timedOut(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func unreachable(err error) bool {
	return errors.Is(err, store.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded)
}

// changed reacts to a published config change: permits granted under older
// versions are handed back at once, so no permit at the old rate is used.
func (l *Limiter) changed(version int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.closed:
	case version == 0: // deleted: nothing granted by it may be used
		l.dropLost()
		l.version = 0
	case version > l.version:
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
	clear(l.blocks[len(kept):])
	l.blocks = kept
	back := l.back[:0]
	for _, s := range l.back {
		if s.b.g.Version < version {
			l.goBg(func() { _ = l.releaseOne(s.b.g) })
		} else {
			back = append(back, s)
		}
	}
	l.back = back
}

// dropLost empties the pool without handing anything back: the limiter the
// permits came from is gone, and a hand-back would land on a limiter
// re-created under the same name and corrupt its totals.
func (l *Limiter) dropLost() {
	for _, b := range l.blocks {
		b.dropped, b.lost = true, true
	}
	for _, s := range l.back {
		s.b.dropped, s.b.lost = true, true
	}
	l.blocks, l.back = nil, nil
}

// handBack releases a block's undispensed permits in the background.
func (l *Limiter) handBack(b *block) {
	b.dropped = true
	if m := b.left(); m > 0 {
		b.i = b.g.Permits
		l.goBg(func() { _ = l.release(b.g, m) })
	}
}

func (l *Limiter) release(g store.Grant, m int64) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return l.c.t.Release(ctx, g, m)
}

// releaseOne hands back one permit from the middle of a grant (put back by a
// cancelled wait, never reused). Release rewinds the schedule by a grant's
// last permits when nothing was granted since, which for a permit from the
// middle would free a start that another permit used; so the grant is
// presented as of no current version, and the permit's time becomes idle.
func (l *Limiter) releaseOne(g store.Grant) error {
	g.Version = -1
	return l.release(g, 1)
}

// putBack returns the permit of a cancelled wait to the pool, where the next
// caller gets it. One the pool no longer dispenses (a dropped grant, a closed
// handle) goes back to the schedule.
func (l *Limiter) putBack(s slot) {
	l.mu.Lock()
	l.taken--
	switch {
	case s.b.lost:
		l.mu.Unlock()
		return
	case l.closed || s.b.dropped || s.b.g.Version < l.version:
		l.mu.Unlock()
		_ = l.releaseOne(s.b.g)
		return
	}
	s.back = false
	i, _ := slices.BinarySearchFunc(l.back, s.sched, func(x slot, t int64) int { return cmp.Compare(x.sched, t) })
	l.back = slices.Insert(l.back, i, s)
	l.mu.Unlock()
}

// goDown switches to the fallback until the next retry. The pool is dropped:
// Redis may come back empty (a restart without persistence), and its permits
// then belong to a limiter that no longer exists (see dropLost).
func (l *Limiter) goDown(now int64) {
	if !l.down {
		l.down = true
		l.dropLost()
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
	ok, _, _ := l.allow(context.Background())
	return ok
}

// allow is Allow, telling besides how long from now until the next permit may
// start (0: one may start now), which the HTTP middleware advertises.
func (l *Limiter) allow(ctx context.Context) (ok bool, next time.Duration, err error) {
	for {
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return false, 0, ErrClosed
		}
		now := l.c.mono()
		if l.down {
			l.retryInBackground(now)
			ok := l.fallbackAllow()
			next := l.fallbackNext(ok, now)
			l.mu.Unlock()
			return ok, next, nil
		}
		if s, ok := l.next(now); ok {
			if s.start > now {
				l.mu.Unlock()
				return false, time.Duration(s.start - now), nil
			}
			l.take(s, now)
			next := l.peek(now)
			l.mu.Unlock()
			return true, next, nil
		}
		wait := l.await(now)
		l.mu.Unlock()
		if err := l.waitFetch(ctx, wait); err != nil {
			return false, 0, err
		}
	}
}

// peek is how long until the pool's next permit may start; an empty pool
// (the next grant is on its way) counts one slice.
func (l *Limiter) peek(now int64) time.Duration {
	if s, ok := l.next(now); ok {
		return time.Duration(max(0, s.start-now))
	}
	if l.rate > 0 {
		return time.Duration(1e9 / l.rate)
	}
	return 0
}

// fallbackNext is peek while falling back: the next retry for a refusing
// fallback, one slice of the local limit for the safe one.
func (l *Limiter) fallbackNext(allowed bool, now int64) time.Duration {
	switch {
	case l.o.fallback == FallbackOptimistic || (allowed && l.o.fallback != FallbackSafe):
		return 0
	case l.o.fallback == FallbackPessimistic:
		return time.Duration(max(0, l.retryAt-now))
	case l.fallback == nil:
		return time.Duration(max(0, l.retryAt-now))
	}
	return time.Duration(1e9 / l.fallback.Config().Rate)
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
	return l.fallback != nil && l.fallback.Allow() // no rate known yet: refuse
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
			l.putBack(s)
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
	if fb == nil { // no rate was ever learned and none configured: nothing is safe
		return Permit{}, store.ErrUnavailable
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

// Close hands the handle's unused permits back (a grant in flight too, once it
// arrives) and makes further calls fail with ErrClosed.
func (l *Limiter) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.mu.Unlock()
	l.c.forget(l)
	l.bg.Wait() // a grant in flight joins the pool, to be handed back below
	l.mu.Lock()
	blocks, back := l.blocks, l.back
	l.blocks, l.back = nil, nil
	for _, b := range blocks {
		b.dropped = true
	}
	l.mu.Unlock()

	// Newest grant first: each tail handed back rewinds the schedule to the
	// grant before when nothing was granted since, so the whole pool goes
	// back to the next caller. A permit put back by a cancelled wait joins
	// its grant's tail if it borders it, else its time becomes idle.
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
