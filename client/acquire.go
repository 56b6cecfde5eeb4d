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

// Permits names a limiter (or template instance) and the permits an
// AcquireAll takes from it; 0 checks it without taking.
type Permits struct {
	Name    string
	Permits int64
}

// AllResult is the answer of AcquireAll: Granted when every limiter granted
// and took its permits (false: nothing was taken), and each limiter's own
// decision in request order. Over HTTP a refusal by a limiter in shadow mode
// is a decision with Granted and Shadow set (it took nothing).
type AllResult struct {
	Granted   bool
	Decisions []limitd.Decision
}

// Delay is how long to wait before starting: the granted decisions' longest.
func (r AllResult) Delay() time.Duration {
	var d int64
	for _, x := range r.Decisions {
		if x.Granted {
			d = max(d, x.Delay)
		}
	}
	return time.Duration(d)
}

// allAcquirer is a Transport that takes several limiters in one call.
type allAcquirer interface {
	AcquireAll(ctx context.Context, reqs []Permits, maxWait time.Duration) (AllResult, error)
}

// AcquireAll takes permits from several limiters in one call, all or
// nothing, each within maxWait (limitd.Forever: no bound), straight from the
// shared schedules; it does not wait out the delay (see AllResult.Delay).
// Shadow mode applies over HTTP only, being the server's. A transport that
// cannot is errors.ErrUnsupported.
func (c *Client) AcquireAll(ctx context.Context, reqs []Permits, maxWait time.Duration) (AllResult, error) {
	a, ok := c.t.(allAcquirer)
	if !ok {
		return AllResult{}, fmt.Errorf("client: AcquireAll over %T: %w", c.t, errors.ErrUnsupported)
	}
	r, err := a.AcquireAll(ctx, reqs, maxWait)
	if err == nil && !r.Granted && c.refusals != nil && len(r.Decisions) == len(reqs) {
		for i, d := range r.Decisions {
			if !d.Granted { // those that granted took nothing: not counted
				c.refusals.direct(ctx, reqs[i].Name, reqs[i].Permits, d.Instance)
			}
		}
	}
	return r, err
}

func (t *httpTransport) AcquireAll(ctx context.Context, reqs []Permits, maxWait time.Duration) (AllResult, error) {
	body := wire.AcquireAllRequest{Requests: make([]wire.LimiterPermits, len(reqs)), MaxWait: maxWaitField(maxWait)}
	for i := range reqs {
		body.Requests[i] = wire.LimiterPermits{Name: reqs[i].Name, Permits: &reqs[i].Permits}
	}
	var v struct {
		Granted bool          `json:"granted"`
		Results []wire.Answer `json:"results"`
	}
	if _, _, err := t.do(ctx, http.MethodPost, "/v1/acquire", body, &v); err != nil {
		return AllResult{}, err
	}
	if len(v.Results) != len(reqs) {
		return AllResult{}, fmt.Errorf("client: the limitd server answered %d results for %d limiters", len(v.Results), len(reqs))
	}
	out := AllResult{Granted: v.Granted, Decisions: make([]limitd.Decision, len(reqs))}
	for i, a := range v.Results {
		out.Decisions[i] = decisionOf(a)
		t.sawNow(out.Decisions[i].Now)
	}
	return out, nil
}
