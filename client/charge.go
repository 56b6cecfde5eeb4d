package client

import (
	"context"
	"fmt"
	"net/http"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/wire"
)

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
