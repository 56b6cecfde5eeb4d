package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"time"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/limiter"
)

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
	if l.maxK > 0 { // the limiter's max_reserve bounds one grant
		l.lastK = min(l.lastK, l.maxK)
	}
	return l.lastK
}

func (l *Limiter) startFetch(now int64) {
	done := make(chan struct{})
	l.fetching, l.fetchVer = done, l.version
	k := l.grantSize(now)
	handing := slices.Clone(l.handing)
	l.bg.Go(func() {
		defer close(done)
		for _, h := range handing {
			<-h
		}
		l.fetch(k)
	})
}

// fetch takes one grant from the shared schedule.
func (l *Limiter) fetch(k int64) {
	ctx, cancel := context.WithTimeout(l.c.ctx, 2*time.Second)
	defer cancel()
	var (
		t0  int64
		g   limitd.Grant
		err error
	)
	grant := func(k int64) {
		t0 = l.c.mono()
		l.remoteCalls.Add(1)
		g, err = l.c.t.Grant(ctx, l.name, k, limitd.Forever)
	}
	grant(k)
	sent := t0
	if timedOut(err) && l.c.ctx.Err() == nil {
		// One more try, with time of its own, before falling back: a process
		// stalled (GC, SIGSTOP) across the call sees a timeout though Redis is
		// fine. A refused connection is not retried: go-redis stops dialing
		// for a while after repeated dial errors.
		cancel()
		ctx, cancel = context.WithTimeout(l.c.ctx, 2*time.Second)
		defer cancel()
		grant(k)
	}
	window := err == nil && limiter.Counts(g.Kind)
	if window {
		// A window grants now or not at all, and a pool's schedule has no
		// place for that: the permits of this first grant are lost, and
		// the handle asks no more (below).
		err = fmt.Errorf("%w: %q is a window limiter: use Client.Acquire (a window's permits are not pooled)", limiter.ErrInvalid, l.name)
	}
	var fe *limiter.FieldError
	if k > 1 && errors.As(err, &fe) && fe.Field == "permits" {
		// More than the limiter's max_reserve allows one grant (the first
		// grant, sized before the pool knows it): one permit always fits.
		grant(1)
	}
	t1 := l.c.mono()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mayChange()
	l.fetching = nil
	l.err = err
	l.missingUntil = 0
	if err != nil {
		switch {
		case errors.Is(err, limiter.ErrNotFound):
			l.missingUntil = t1 + int64(missingFor)
		case window: // until a change event says the limiter changed
			l.missingUntil = math.MaxInt64
		}
		switch {
		case l.closed:
		case unreachable(err):
			l.goDown(sent, t1)
		case l.down:
			// Redis answered (the limiter is missing, say): the processes
			// that did not fall back take the schedule as soon as the
			// limiter is back, so this one tries again soon too.
			l.retryStep = min(int64(l.o.retry), int64(firstRetry))
			l.retryAt = t1 + l.retryStep
		}
		return
	}
	l.refused.saw(g.Instance)
	off := l.c.clk.Sample(g.Now, t0, t1)
	p := g.Params()
	b := &block{g: g, p: p, sched: g.Scheduled - off, start: g.Start - off, offset: off, got: t1}
	l.offset = off
	l.schedEnd = max(l.schedEnd, g.End-off)
	l.schedLead = g.End - off - t1
	if l.closed {
		l.blocks = append(l.blocks, b) // Close, waiting for this fetch, hands it back
		return
	}
	if l.down {
		l.comeBack(t1, g, p)
	}
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
	if g.MaxPermits > 0 {
		l.maxK = g.MaxPermits
	}
	l.estimateShare(g, p, t1)
	l.blocks = append(l.blocks, b)
}

// estimateShare records this process's part of the shared schedule (see
// schedPart) from a grant that arrived at local time now. Not while the
// handle falls back, nor for a retry interval after it came back: other
// processes may not reach the schedule yet, and what it takes then is more
// than its part when all is well.
func (l *Limiter) estimateShare(g limitd.Grant, p limiter.Params, now int64) {
	if gd := l.guard; gd != nil && (l.down || now-gd.back < int64(l.o.retry)) {
		l.part.pause()
		return
	}
	cost, _ := p.Slice.Cost(g.Permits, 0)
	l.part.add(g.End, cost)
}

func timedOut(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func unreachable(err error) bool {
	return errors.Is(err, limiter.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded)
}

// missingFor is how long a handle whose limiter does not exist answers
// limiter.ErrNotFound (Allow: false) from memory before it asks Redis again:
// a missing limiter costs no round trip per call. A change event that
// creates the limiter ends it at once.
const missingFor = time.Second

// awaitGrant waits for the fetch in flight, starting one if needed, and
// returns the error a caller must know (not found, invalid): the last
// fetch's at once while it says the limiter is missing (missingFor). It is
// called with l.mu held, and releases it.
func (l *Limiter) awaitGrant(ctx context.Context, now int64) error {
	if now < l.missingUntil {
		err := l.err
		l.mu.Unlock()
		return err
	}
	l.starved = true
	if l.fetching == nil {
		l.startFetch(now)
	}
	done := l.fetching
	l.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	l.mu.Lock()
	err := l.err
	l.mu.Unlock()
	if err != nil && !unreachable(err) {
		return err
	}
	return nil
}
