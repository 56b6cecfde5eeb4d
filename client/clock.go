package client

import (
	"context"
	"time"

	"github.com/limitd/limitd/limiter"
)

// Clock is a client's local time source. Pools place permits on it, leases
// are judged on it, and every wait of the client sleeps on its timers. The
// default is the system's monotonic clock; tests inject a clock they drive
// (WithClock), and keep Redis's clock in step with it (miniredis SetTime).
//
// Context deadlines are compared with Now: a clock far from the wall clock
// makes deadlines meaningless.
type Clock interface {
	Now() time.Time
	// NewTimer returns a timer whose channel receives once d has passed on
	// this clock (at once for d ≤ 0).
	NewTimer(d time.Duration) Timer
}

// Timer is a one-shot timer of a Clock.
type Timer interface {
	C() <-chan time.Time
	// Stop prevents the timer from firing; false if it already fired or stopped.
	Stop() bool
}

// WithClock sets the client's local clock (default: the system's); see Clock.
func WithClock(c Clock) ClientOption { return clientOption(func(o *options) { o.clock = c }) }

type systemClock struct{}

func (systemClock) Now() time.Time                 { return time.Now() }
func (systemClock) NewTimer(d time.Duration) Timer { return sysTimer{time.NewTimer(d)} }

type sysTimer struct{ t *time.Timer }

func (t sysTimer) C() <-chan time.Time { return t.t.C }
func (t sysTimer) Stop() bool          { return t.t.Stop() }

// sleep waits d on the client's clock, or until ctx is done (ctx.Err()).
func (c *Client) sleep(ctx context.Context, d time.Duration) error {
	return sleepOn(c.o.clock, ctx, d)
}

func sleepOn(clk Clock, ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// limiterClock is a Clock as the local limiters (fallback, share rate) take it.
type limiterClock struct{ c Clock }

func (l limiterClock) Now() time.Time { return l.c.Now() }
func (l limiterClock) Sleep(ctx context.Context, d time.Duration) error {
	return sleepOn(l.c, ctx, d)
}

var _ limiter.Clock = limiterClock{}
