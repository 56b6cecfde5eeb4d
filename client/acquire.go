package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/wire"
)

// Acquire asks the named limiter (or the template matching name) for n
// permits in one round trip, without a pool, waiting at most maxWait
// (limitd.Forever: no bound) for a schedule or smooth limiter. It is the way
// to use a window limiter, whose permits a Limiter handle does not pool: its
// Decision holds Limit, Wait (the permits left) and Position (when its
// window resets). A refusal says when to retry (RetryAfter); a caller of a
// schedule limiter should start at Start.
func (c *Client) Acquire(ctx context.Context, name string, n int64, maxWait time.Duration) (limitd.Decision, error) {
	if err := limitd.CheckName(name); err != nil {
		return limitd.Decision{}, err
	}
	a, ok := c.t.(acquirer)
	if !ok {
		return limitd.Decision{}, fmt.Errorf("client: the transport %T takes no direct acquire", c.t)
	}
	d, err := a.Acquire(ctx, name, n, maxWait)
	if err == nil && !d.Granted && c.refusals != nil {
		c.refusals.direct(ctx, name, n, d.Instance)
	}
	return d, err
}

// acquirer is a Transport that also decides one acquire (Client.Acquire).
type acquirer interface {
	Acquire(ctx context.Context, name string, n int64, maxWait time.Duration) (limitd.Decision, error)
}

// Acquire is POST .../acquire.
func (t *httpTransport) Acquire(ctx context.Context, name string, n int64, maxWait time.Duration) (limitd.Decision, error) {
	req := wire.AcquireRequest{Permits: &n, MaxWait: maxWaitField(maxWait)}
	var a wire.Answer // a 429's body is a Denied, a 200's a Granted or a Shadowed
	status, _, err := t.do(ctx, http.MethodPost, limiterPath(name, "acquire"), req, &a)
	if err != nil {
		return limitd.Decision{}, err
	}
	if status != http.StatusTooManyRequests && !a.Shadowed.Granted.Granted {
		return limitd.Decision{}, errors.New("client: an acquire answered 2xx without a grant (a concurrency limiter? use Semaphore)")
	}
	d := decisionOf(a)
	t.sawNow(d.Now)
	return d, nil
}

// decisionOf is the decision an acquire's answer tells, in any of its forms
// (a window limiter's: its limit, the permits left as Wait, its window's
// end as Position).
func decisionOf(a wire.Answer) limitd.Decision {
	g := a.Shadowed.Granted
	d := limitd.Decision{Granted: g.Granted, Shadow: a.Shadow, Permits: g.Permits, Scheduled: g.Scheduled,
		Start: g.Start, Delay: g.Delay, Lateness: g.Lateness, Wait: g.Wait, RetryAfter: a.RetryAfter,
		Version: g.Version, Now: g.Now}
	if a.Limit > 0 || a.Reset > 0 { // a window's (one of limit 0 always has a reset ahead)
		d.Window, d.Limit, d.Wait, d.Position = true, a.Limit, a.Remaining, a.Now+a.Reset
	}
	return d
}
