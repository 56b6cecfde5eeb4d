package client

import (
	"context"
	"time"

	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
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
		return Permit{}, limiter.ErrDeadline
	}
	if err := l.c.sleep(ctx, d); err != nil {
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
	l.remoteCalls.Add(1)
	g, err := l.c.t.Grant(ctx, l.name, n, store.Forever)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.sharedPermits += n
	l.mu.Unlock()
	t1 := l.c.mono()
	return &Reservation{l: l, g: g, offset: l.c.clk.Sample(g.Now, t0, t1)}, nil
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
