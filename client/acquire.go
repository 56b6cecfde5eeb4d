package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/limiter"
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

// Charge takes n permits (≥ 0) of the shared limiter whatever is left, in
// one round trip and without the local pool, for work whose cost is known
// only once it is done (an LLM answer's tokens): a schedule or smooth
// limiter goes into debt, which the next callers wait for until it is paid;
// a window counts past its limit and refuses every request until it resets.
// It is never refused for lack of permits, and is bounded by the horizon
// (2^50 ns of the limiter's schedule; a window: 2^50 permits), not by
// max_reserve.
//
// The Decision is Charged. Granted says whether the permits were there to
// take now, Delay how long a new caller would wait after the charge, and for
// a window Limit, Wait (the permits left) and Position (when its window
// resets). A charge of 0 takes nothing: it is a check. Over HTTP (NewHTTP)
// Scheduled, Start and Lateness are 0.
//
// A share or concurrency limiter has nothing to charge: limiter.ErrConflict.
func (l *Limiter) Charge(ctx context.Context, n int64) (limitd.Decision, error) {
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	if closed {
		return limitd.Decision{}, ErrClosed
	}
	if n < 0 {
		return limitd.Decision{}, &limiter.FieldError{Field: "permits", Rule: "a charge must be ≥ 0 (0 is a check)", Value: n}
	}
	ch, ok := l.c.t.(charger)
	if !ok {
		return limitd.Decision{}, fmt.Errorf("client: the transport %T takes no charge", l.c.t)
	}
	l.remoteCalls.Add(1)
	return ch.Charge(ctx, l.name, n)
}

// charger is a Transport that also charges (Limiter.Charge, Reservation.Settle).
type charger interface {
	Charge(ctx context.Context, name string, n int64) (limitd.Decision, error)
}

// Charge is POST .../charge.
func (t *httpTransport) Charge(ctx context.Context, name string, n int64) (limitd.Decision, error) {
	return t.charge(ctx, name, wire.ChargeRequest{Permits: &n})
}

// charge sends a charge (or a settle) and reads its answer as a Decision.
func (t *httpTransport) charge(ctx context.Context, name string, req wire.ChargeRequest) (limitd.Decision, error) {
	var a struct {
		wire.Charged
		Limit     *int64 `json:"limit"` // a window's (0 for one that refuses every request)
		Remaining int64  `json:"remaining"`
		Reset     int64  `json:"reset_ns"`
	}
	if _, _, err := t.do(ctx, http.MethodPost, limiterPath(name, "charge"), req, &a); err != nil {
		return limitd.Decision{}, err
	}
	d := limitd.Decision{Charged: true, Granted: a.Within, Permits: a.Permits, Delay: a.Delay, Wait: a.Wait,
		Version: a.Version, Now: a.Now}
	if a.Limit != nil {
		d.Window, d.Limit, d.Wait, d.Position = true, *a.Limit, a.Remaining, a.Now+a.Reset
	}
	t.sawNow(d.Now)
	return d, nil
}

// settler is a Transport that settles a grant, whose id is id, in one call.
type settler interface {
	settle(ctx context.Context, g limitd.Grant, id string, actual int64) error
}

// settle is POST .../charge with the grant.
func (t *httpTransport) settle(ctx context.Context, g limitd.Grant, id string, actual int64) error {
	j := t.wireGrant(g, id)
	_, err := t.charge(ctx, g.Name, wire.ChargeRequest{Permits: &actual, Grant: &j})
	return err
}

// grantID is the id the server answered g with ("" when forgotten): a
// Reservation keeps it for its Settle, however long its work takes.
func (t *httpTransport) grantID(g limitd.Grant) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ids[keyOf(g)].id
}
