package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
	"github.com/limitd/limitd/wire"
)

// Acquire asks the named limiter (or the template matching name) for n
// permits in one round trip, without a pool: the decision is the limiter's
// own, taken now on the Redis clock, waiting at most maxWait (store.Forever:
// no bound) for a schedule or smooth limiter. It is the way to use a window
// limiter, whose permits a Limiter handle does not pool: a grant is a
// Decision with Granted, and for a window Limit, Wait (the permits left) and
// Position (when its window resets); a refusal says when to retry
// (RetryAfter). A caller of a schedule limiter should start at Start.
func (c *Client) Acquire(ctx context.Context, name string, n int64, maxWait time.Duration) (store.Decision, error) {
	if err := store.CheckName(name); err != nil {
		return store.Decision{}, err
	}
	a, ok := c.t.(acquirer)
	if !ok {
		return store.Decision{}, fmt.Errorf("client: the transport %T takes no direct acquire", c.t)
	}
	return a.Acquire(ctx, name, n, maxWait)
}

// acquirer is a Transport that also decides one acquire (Client.Acquire):
// the Redis and HTTP transports are.
type acquirer interface {
	Acquire(ctx context.Context, name string, n int64, maxWait time.Duration) (store.Decision, error)
}

func (t redisTransport) Acquire(ctx context.Context, name string, n int64, maxWait time.Duration) (store.Decision, error) {
	return t.st.Acquire(ctx, name, n, maxWait)
}

// Acquire is POST .../acquire. A window's answer carries limit, remaining
// and reset_ns, which the Decision holds as the Redis transport's does.
func (t *httpTransport) Acquire(ctx context.Context, name string, n int64, maxWait time.Duration) (store.Decision, error) {
	req := wire.AcquireRequest{Permits: &n}
	if maxWait != store.Forever {
		mw := limiter.Duration(max(0, maxWait))
		req.MaxWait = &mw
	}
	status, b, err := t.do(ctx, http.MethodPost, limiterPath(name, "acquire"), req)
	if err != nil {
		return store.Decision{}, err
	}
	var d store.Decision
	var w wire.Window
	if status == http.StatusTooManyRequests {
		var v wire.WindowDenied // a superset of wire.Denied
		if err := decode(b, &v); err != nil {
			return store.Decision{}, err
		}
		d = store.Decision{RetryAfter: v.RetryAfter, Delay: v.Delay, Wait: v.Wait, Version: v.Version, Now: v.Now}
		w = v.Window
	} else {
		var v wire.WindowGranted // a superset of wire.Granted
		if err := decode(b, &v); err != nil {
			return store.Decision{}, err
		}
		if !v.Granted.Granted {
			return store.Decision{}, errors.New("client: an acquire answered 2xx without a grant (a concurrency limiter? use Semaphore)")
		}
		d = store.Decision{Granted: true, Permits: v.Permits, Scheduled: v.Scheduled, Start: v.Start, Delay: v.Delay,
			Lateness: v.Lateness, Wait: v.Wait, Version: v.Version, Now: v.Now}
		w = v.Window
	}
	if w.Limit > 0 {
		d.Limit, d.Wait, d.Position = w.Limit, w.Remaining, d.Now+w.Reset
	}
	t.sawNow(d.Now)
	return d, nil
}
