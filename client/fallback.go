package client

import (
	"context"
	"time"

	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

// Fallback: what a handle does while the shared schedule is unreachable.

// goDown switches to the fallback until the next retry. The pool is dropped:
// Redis may come back empty (a restart without persistence), and its permits
// then belong to a limiter that no longer exists (see dropLost).
func (l *Limiter) goDown(now int64) {
	l.mayChange()
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
				limiter.WithClock(limiterClock{l.c.o.clock}))
		}
	}
	l.retryAt = now + int64(l.o.retry)
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
	ok := false
	switch l.o.fallback {
	case FallbackOptimistic:
		ok = true
	case FallbackPessimistic:
	default:
		ok = l.fallback != nil && l.fallback.Allow() // no rate known yet: refuse
	}
	if ok {
		l.fallbackPermits.Add(1)
	}
	return ok
}

func (l *Limiter) fallbackWait(ctx context.Context) (Permit, error) {
	switch l.o.fallback {
	case FallbackOptimistic:
		now := l.c.o.clock.Now()
		l.fallbackPermits.Add(1)
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
	l.fallbackPermits.Add(1)
	return Permit{Scheduled: p.Scheduled, Start: p.Start, Lateness: p.Lateness}, nil
}
