package redistest

import (
	"context"
	"fmt"
	"strings"
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
// the client early; the test's end closes both. The dial's timeout is not
// short: on loopback a stopped server refuses a connection at once, and a
// busy machine may not run the dialing goroutine for a while.
func ShortClient(t testing.TB) (*Instance, *redis.Client) {
	t.Helper()
	srv := Server(t)
	rdb := redis.NewClient(&redis.Options{
		Addr: srv.Addr(), DialTimeout: 2 * time.Second, ReadTimeout: 500 * time.Millisecond,
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

// AddUser makes name an ACL user of the server with password, allowed every
// key, channel and command unless rules say otherwise (ACL SETUSER's rules,
// in place of "~*", "&*", "+@all"). Named "default", it gives the default
// user a password (requirepass); the server's own calls here keep working.
// Like t.Fatal it must be called from the test goroutine.
func (i *Instance) AddUser(name, password string, rules ...string) {
	i.t.Helper()
	if len(rules) == 0 {
		rules = []string{"~*", "&*", "+@all"}
	}
	args := []any{"ACL", "SETUSER", name, "on", ">" + password}
	for _, r := range rules {
		args = append(args, r)
	}
	i.admin(args)
	if name == "default" {
		i.adminPassword = password
	}
}

// SetPassword gives user name password in place of its own and closes its
// connections: a password changed under a running client.
func (i *Instance) SetPassword(name, password string) {
	i.t.Helper()
	i.admin([]any{"ACL", "SETUSER", name, "resetpass", ">" + password})
	i.admin([]any{"CLIENT", "KILL", "USER", name})
}

// UserClient is a client of the server as user name with password (both
// empty: the default user, without one) that fails at once rather than
// retry, closed when the test ends.
func (i *Instance) UserClient(name, password string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: i.Addr(), Username: name, Password: password, MaxRetries: -1, DialerRetries: 1})
	i.t.Cleanup(func() { _ = c.Close() })
	return c
}

func (i *Instance) admin(args []any) {
	i.t.Helper()
	c := redis.NewClient(&redis.Options{Addr: i.Addr(), Password: i.adminPassword})
	defer c.Close()
	if err := c.Do(context.Background(), args...).Err(); err != nil {
		i.t.Fatalf("redistest: %v: %v", args, err)
	}
}

// FillMemory writes fill:N keys until Redis refuses with OOM (set maxmemory
// with noeviction first), in ever smaller values, so that even a tiny write is
// refused afterwards: a large write's own query buffer counts while it is
// refused, and is freed after.
func FillMemory(t testing.TB, rdb *redis.Client) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	i := 0
	for _, size := range []int{64 << 10, 1 << 10, 16} {
		v := strings.Repeat("x", size)
		for ; ; i++ {
			err := rdb.Set(context.Background(), fmt.Sprintf("fill:%d", i), v, 0).Err()
			if err != nil && strings.HasPrefix(err.Error(), "OOM") {
				break
			}
			if err != nil || time.Now().After(deadline) {
				t.Fatalf("filling Redis: %v after %d keys", err, i)
			}
		}
	}
}
