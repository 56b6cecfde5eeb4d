package core

import (
	"context"
	"time"
)

// Charges: usage recorded after the fact (DESIGN §3.8). A caller that
// knows what its work cost only once it is done (an LLM answer's tokens,
// bytes sent) takes the permits then, whatever is left: a schedule or smooth
// limiter goes into debt, which later callers wait for or are refused until
// it is paid, and a window counts past its limit and refuses until it
// resets. A charge of 0 is a check: it takes nothing and says whether a
// request would be granted now.

// ChargeRequest takes Permits of a limiter (or template instance) whatever
// is left.
type ChargeRequest struct {
	Name    string
	Permits int64 // ≥ 0; 0 is a check
}

// Charge takes r.Permits whatever is left (store.Store.Charge): the
// Decision is Charged, Granted says whether the permits were there to take
// now (a window: its count had room for them), and Delay how long a new
// caller would wait after them. It is never refused for lack of permits; a
// share or concurrency limiter, which has none to charge, is ErrConflict
// naming its kind. Its Redis part is bounded by the service's
// DecideTimeout, as an acquire's is, and it is observed as an EventRate
// decision with outcome "charged" and its permits.
func (s *Service) Charge(ctx context.Context, r ChargeRequest) (Decision, error) {
	if r.Permits < 0 {
		return Decision{}, invalid("permits", "a charge must be ≥ 0 (0 is a check)", r.Permits)
	}
	start := time.Now()
	d, err := s.store.ChargeWithin(ctx, r.Name, r.Permits, s.within(time.Time{}))
	s.timed(OpCharge, start)
	if err != nil {
		return Decision{}, err
	}
	lim, tpl := s.subjectOf(ctx, r.Name, d.Instance)
	s.obs.Decided(Event{Kind: EventRate, Limiter: lim, Template: tpl, Outcome: "charged", Permits: r.Permits})
	return d, nil
}
