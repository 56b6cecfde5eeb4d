package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/limiter"
)

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
	if dl, has := ctx.Deadline(); has && l.c.o.clock.Now().Add(d).After(dl) {
		_ = r.Cancel()
		l.refused.many(n)
		return Permit{}, limiter.ErrDeadline
	}
	if err := l.c.sleep(ctx, d); err != nil {
		_ = r.Cancel()
		return Permit{}, err
	}
	return r.Permit(), nil
}

// Reservation is n permits taken from the shared limiter in one call, ahead
// of work whose cost is known only once it is done: wait out Delay, do the
// work, then Settle with what it used (or Cancel if it did not run). It is
// not safe for concurrent use.
type Reservation struct {
	l      *Limiter
	g      limitd.Grant
	id     string // the grant's id over HTTP, for Settle
	offset int64
	done   bool
}

// ErrRefused is returned by Reserve (and WaitN) when the limiter refuses the
// permits outright: a window whose count has no room for them until it
// resets, or a schedule whose debt (after charges) runs past the horizon.
// The error says when the same request could be granted.
var ErrRefused = errors.New("client: the limiter refused the permits")

// ErrSettled is returned by Settle of a reservation already settled or cancelled.
var ErrSettled = errors.New("client: the reservation is settled already")

// Reserve takes n permits from the shared limiter in one round trip, however
// far ahead they start (a window grants now or refuses: ErrRefused). Wait
// out Delay before using them, then Settle with what the work used, or
// Cancel to hand them all back.
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
	l.remoteCalls.Add(1)
	g, err := l.c.t.Grant(ctx, l.name, n, limitd.Forever)
	if err != nil {
		return nil, err
	}
	l.refused.saw(g.Instance)
	if !g.Granted {
		l.refused.many(n)
		return nil, fmt.Errorf("%w: %d permits of %q, retry after %v", ErrRefused, n, l.name, time.Duration(g.RetryAfter))
	}
	l.mu.Lock()
	l.sharedPermits += n
	l.mu.Unlock()
	t1 := l.c.mono()
	r := &Reservation{l: l, g: g, offset: l.c.clk.Sample(g.Now, t0, t1)}
	if h, ok := l.c.t.(interface{ grantID(limitd.Grant) string }); ok {
		r.id = h.grantID(g)
	}
	return r, nil
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

// Cancel hands the reserved permits back to the shared schedule (Settle
// with 0). Once settled or cancelled, it does nothing.
func (r *Reservation) Cancel() error {
	if r.done {
		return nil
	}
	r.done = true
	return r.l.release(r.g, r.g.Permits)
}

// Settle records what the reservation's work actually used: actual (≥ 0)
// permits of the n reserved. It guarantees that the limiter counts actual
// permits for the work, no more and no less, whatever happened in between:
//
//   - actual < n: the unused permits are handed back, as a pool hands back:
//     a schedule is rewound when nothing was taken from it since, else their
//     time counts as idle; a window gives them back to its count while its
//     window is the reservation's, never below 0.
//   - actual > n: the excess is charged (Charge).
//   - actual = n: nothing to do, and no round trip.
//
// A reservation settles once: a second Settle, or one after Cancel, is
// ErrSettled. When Settle fails, the unused permits may not have been
// handed back, or the excess not charged (the error says which); they are
// not tried again.
func (r *Reservation) Settle(ctx context.Context, actual int64) error {
	if actual < 0 {
		return &limiter.FieldError{Field: "permits", Rule: "must be ≥ 0: the permits the work used", Value: actual}
	}
	if r.done {
		return ErrSettled
	}
	r.done = true
	n := r.g.Permits
	if actual == n {
		return nil
	}
	if s, ok := r.l.c.t.(settler); ok && r.id != "" {
		r.l.remoteCalls.Add(1)
		return s.settle(ctx, r.g, r.id, actual)
	}
	if actual < n {
		r.l.remoteCalls.Add(1)
		if err := r.l.c.t.Release(ctx, r.g, n-actual); err != nil {
			return fmt.Errorf("client: settling %q: handing back the %d permits not used: %w", r.l.name, n-actual, err)
		}
		return nil
	}
	if _, err := r.l.Charge(ctx, actual-n); err != nil {
		return fmt.Errorf("client: settling %q: charging the %d permits past the reservation: %w", r.l.name, actual-n, err)
	}
	return nil
}
