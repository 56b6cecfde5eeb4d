package redistest

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Mini starts a miniredis and a client of it, both closed when the test
// ends; opts change the client's options before it is made (a PoolSize,
// MaxRetries: -1).
func Mini(t testing.TB, opts ...func(*redis.Options)) (*miniredis.Miniredis, *redis.Client) {
	t.Helper()
	m := miniredis.RunT(t)
	o := &redis.Options{Addr: m.Addr()}
	for _, f := range opts {
		f(o)
	}
	rdb := redis.NewClient(o)
	t.Cleanup(func() { _ = rdb.Close() })
	return m, rdb
}

// ShortClient starts a private redis-server and a client of it with short
// timeouts, so that a stopped server is noticed quickly. The caller may close
// the client early; the test's end closes both.
func ShortClient(t testing.TB) (*Instance, *redis.Client) {
	t.Helper()
	srv := Server(t)
	rdb := redis.NewClient(&redis.Options{
		Addr: srv.Addr(), DialTimeout: 200 * time.Millisecond, ReadTimeout: 500 * time.Millisecond,
		WriteTimeout: 500 * time.Millisecond, MaxRetries: 1, ContextTimeoutEnabled: true,
		DialerRetries: 1, DialerRetryTimeout: 10 * time.Millisecond,
	})
	t.Cleanup(func() { _ = rdb.Close() })
	return srv, rdb
}

// MiniClock is a clock (limiter.Clock) whose Sleep moves a miniredis's clock
// and returns at once: code that sleeps until Redis's time has come, driven
// in a test. It starts at Now, which it sets on the miniredis.
type MiniClock struct {
	M     *miniredis.Miniredis
	Time  time.Time
	Slept time.Duration // the sleeps' total
}

// NewMiniClock returns a MiniClock at now, and sets m's time to it.
func NewMiniClock(m *miniredis.Miniredis, now time.Time) *MiniClock {
	m.SetTime(now)
	return &MiniClock{M: m, Time: now}
}

func (c *MiniClock) Now() time.Time { return c.Time }

func (c *MiniClock) Sleep(_ context.Context, d time.Duration) error {
	c.Slept += d
	c.Time = c.Time.Add(d)
	c.M.SetTime(c.Time)
	return nil
}

// TripHook is a go-redis hook (Client.AddHook) that shows a test every
// round trip a client makes, a command alone or a pipeline: Before sees its
// commands as they go, After once they are answered (or failed). Either may
// be nil.
type TripHook struct {
	Before, After func(ctx context.Context, cmds []redis.Cmder)
}

func (h TripHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h TripHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return h.trip(ctx, []redis.Cmder{cmd}, func() error { return next(ctx, cmd) })
	}
}

func (h TripHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		return h.trip(ctx, cmds, func() error { return next(ctx, cmds) })
	}
}

func (h TripHook) trip(ctx context.Context, cmds []redis.Cmder, send func() error) error {
	if h.Before != nil {
		h.Before(ctx, cmds)
	}
	err := send()
	if h.After != nil {
		h.After(ctx, cmds)
	}
	return err
}
