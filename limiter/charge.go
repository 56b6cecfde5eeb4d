package limiter

import "math"

// Charges: usage recorded after the fact (DESIGN §3.8). Some costs are known
// only once the work is done (an LLM answer's tokens, bytes sent, rows
// scanned); a charge takes them whatever is left. It is never refused for
// lack of permits, and it is counted at the caller's now like any acquire:
//
//   - schedule and smooth: the state moves exactly as for an acquire of n
//     that waits as long as it takes. A schedule's allocated time advances by
//     n slices and a smooth limiter spends its stored permits and pushes its
//     next free time (Guava's reserve: the stored permits it lacked are owed),
//     so later callers wait, or are refused, until the debt is paid.
//   - window: the count grows by n, past the limit if need be, and every
//     request of the window is refused until its count falls back under the
//     limit: at the window's end (a sliding window's count weighs on the next
//     one as a full window's would).
//
// A charge is bounded by MaxCharge, not max_reserve (it records what was
// already used). A charge that would push a schedule beyond MaxAhead takes its
// permits (they are counted) but leaves the schedule there, as does a window
// count at MaxWindowCount; neither is reached by a limiter in use.
//
// A charge of 0 permits is a check, whose answer says whether a request would
// be granted now (within max_wait): time passes on the limiter as for any
// call, and the check is decided on a copy.

// MaxAhead is the furthest a limiter's schedule runs ahead of now: what one
// acquire may leave it at (a delay of at most Horizon, then a cost of at
// most Horizon), and where a charge stops it (see the top of this file).
// Floors keep positions up to it (ApplyFloor).
const MaxAhead = 2 * Horizon

// MaxWindowCount is the most permits a window counts in one window: a
// charged count stays exact up to it (and in the scripts' doubles, whose
// integers are exact below 2^53), then stays there until the window ends.
const MaxWindowCount int64 = 1 << 52

// MaxCharge is the most permits one charge may take: those whose cost is at
// most Horizon of schedule (a window: Horizon permits).
func (p *Params) MaxCharge() int64 { return p.Slice.permitsWithin(Horizon) }

// CheckCharge reports whether n permits may be charged in one request.
func (p *Params) CheckCharge(n int64) error {
	if n < 0 || n > p.MaxCharge() {
		return fieldErr("permits", ChargeRule(p.MaxCharge()), n)
	}
	return nil
}

// ChargeRule is the rule a charge of too many (or negative) permits breaks,
// max being the limiter's MaxCharge.
func ChargeRule(max int64) string {
	return "a charge must be ≥ 0 and at most " + itoa(max) + " (2^50 ns of the limiter's schedule)"
}

// Charge takes n permits (0 ≤ n ≤ MaxCharge) at time now whatever is left
// (see the top of this file); the Result says what they found:
//
//   - Granted: whether an acquire of them waiting at most maxWait (negative
//     counts as 0) would have been granted: a window's count had room for
//     them (used + n ≤ limit, whatever maxWait), a schedule's or smooth
//     limiter's delay was at most maxWait. A check (n = 0) answers that for
//     no permits: a window whose count is past its limit, or a schedule in
//     debt asked with maxWait 0, answers false.
//   - Permits: n.
//   - Scheduled, Start, Lateness: where the permits stand on the schedule, as
//     an acquire that waits as long as it takes places them (a window: now,
//     now, 0).
//   - Delay: how long a new caller would wait now, after the charge (a
//     window: until one more permit would be granted), which is what a
//     caller that pays after the fact wants to know; Wait the limiter's
//     backlog after it (a window: the permits left, 0 when over).
//   - RetryAfter: 0.
//   - Count: a window's count after the charge, the limit's measure (past
//     it when the permits did not fit); 0 for other kinds.
//
// An n out of range is a *FieldError naming permits.
func (p *Params) Charge(s *State, now, n, maxWait int64) (Result, error) {
	if err := p.CheckCharge(n); err != nil {
		return Result{}, err
	}
	maxWait = min(max(maxWait, 0), Horizon)
	s.Observe(now)
	p.Start(s, now)
	if n == 0 { // a check: time passes (as for Peek), and nothing is taken
		p.engine().peek(p, s, now)
		c := *s
		s = &c
	}
	r := p.engine().charge(p, s, now, n, maxWait)
	r.Wait, r.Delay = p.engine().peek(p, s, now) // nothing left to forfeit, roll or resync at now
	return r, nil
}

// chargeScheduled is a schedule's or smooth limiter's charge: the kind's
// acquire waiting as long as it takes, granted whatever its delay, then the
// schedule kept within MaxAhead of now (the time beyond is not allocated).
func (p *Params) chargeScheduled(s *State, now, n, maxWait int64, acquire func(*Params, *State, int64, int64, int64) Result) Result {
	r := acquire(p, s, now, n, math.MaxInt64)
	if over := s.Next - (now + MaxAhead); over > 0 {
		s.Next -= over
		s.Allocated -= over
	}
	s.Pace = min(s.Pace, now+MaxAhead)
	r.Granted = r.Delay <= maxWait
	return r
}

// chargeWindow is a window's charge: the count grows by n whatever the
// limit, up to MaxWindowCount.
func (p *Params) chargeWindow(s *State, now, n, _ int64) Result {
	p.roll(s, now, true)
	used := p.used(s, now)
	s.Stored = min(s.Stored+n, MaxWindowCount)
	s.Permits += n
	s.Last = now
	return Result{Granted: used+n <= p.Limit, Permits: n, Scheduled: now, Start: now, Count: min(used+n, MaxWindowCount)}
}
