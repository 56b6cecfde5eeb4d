package client

import (
	"context"
	"sync"
	"time"
)

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
