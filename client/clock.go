package client

import (
	"context"
	"sync"
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

// redisClock is the offset of the Redis clock (leases expire on it) from the
// client's local monotonic clock.
type redisClock struct {
	mu  sync.Mutex
	off int64 // Redis Unix ns − local ns
	at  int64 // local ns of the last measure; 0: none yet
}

// clockResample is how long an offset measure serves before a new one.
const clockResample = 30 * time.Second

// redisOffset returns Redis Unix ns − c.mono(), measured by a TIME round trip
// when the last measure is older than clockResample (through c.clk, which
// keeps the best of the recent round trips, grants' included). Until Redis
// has answered one, the local wall clock stands in for it.
func (c *Client) redisOffset(ctx context.Context) int64 {
	c.rc.mu.Lock()
	off, at := c.rc.off, c.rc.at
	c.rc.mu.Unlock()
	if at != 0 && c.mono()-at < int64(clockResample) {
		return off
	}
	t0 := c.mono()
	now, err := c.t.Time(ctx)
	t1 := c.mono()
	if err != nil {
		if at != 0 {
			return off
		}
		return c.base.UnixNano()
	}
	off = c.clk.Sample(now, t0, t1)
	c.rc.mu.Lock()
	c.rc.off, c.rc.at = off, max(t1, 1)
	c.rc.mu.Unlock()
	return off
}
