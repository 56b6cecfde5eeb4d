package limiter

import (
	"cmp"
	"math"
)

// The schedule engine (the package doc says what it does): the schedule
// pointer Next advances one slice per permit; backlog beyond MaxBacklog is
// forfeited as idle time.

// AtOnce is how early a schedule of burst inf lets a call start: its
// starts are at once while the schedule runs at most AtOnce (or its
// max_backlog, if less) ahead of now. See acquireSchedule.
const AtOnce int64 = 1_000_000 // 1 ms

// acquireSchedule is acquire(n, max_wait) of DESIGN §3.1.
//
// When a call starts at once: it waits for the schedule (the permits
// granted before it) and for the pace (the distance its burst puts between
// two starts), and a call that cannot wait is refused when either holds it
// past now. With a finite burst the second of two simultaneous requests
// waits for the pace, as it would a microsecond later. Burst inf has no
// pace, and a start within its pace is at once: a call starts as early as
// AtOnce before its slot (bounded by max_backlog: 0 keeps it strict), so
// that the requests a batch decides at one Redis time, which arrived over
// up to a millisecond (the batch's linger, a round trip), and a clock that
// reads one time for many calls, do not turn a schedule meant to let them
// through into refusals. The schedule still advances by every permit: a
// run of starts at once leaves debt that the callers after it wait out,
// and over any span the schedule grants at most AtOnce of the rate more
// than its rate and backlog allow.
func (p *Params) acquireSchedule(s *State, now, n, maxWait int64) Result {
	p.forfeit(s, now, p.MaxBacklog)
	sched := s.Next
	start := p.startAt(s, now)
	delay := start - now
	if delay > maxWait {
		return Result{Delay: delay, RetryAfter: delay - maxWait, Wait: max(0, now-s.Next)}
	}
	cost, rem := p.Slice.Cost(n, s.Rem)
	s.Rem = rem
	s.Allocated += cost
	s.Next += cost
	s.Pace = start + p.PaceOf(cost)
	lateness := max(0, start-sched) // a start at once, ahead of its slot, is on time
	s.Permits += n
	s.Lateness += lateness
	s.Last = now
	return Result{Granted: true, Permits: n, Scheduled: sched, Start: start, Delay: delay,
		Lateness: lateness, Wait: max(0, now-s.Next)}
}

// startAt is where a call at now starts: after the schedule and the pace,
// and for burst inf up to AtOnce (at most max_backlog) before its slot.
func (p *Params) startAt(s *State, now int64) int64 {
	return max(s.Next-p.early(), s.Pace, now)
}

// early is how long before its slot a call may start: for burst inf
// AtOnce, at most max_backlog; else 0.
func (p *Params) early() int64 {
	if math.IsInf(p.Burst, 1) {
		return min(p.MaxBacklog, AtOnce)
	}
	return 0
}

// PaceOf is how far the pace moves for a grant of cost ns: cost/burst rounded
// up, so that no two starts are ever closer than slice/burst.
func (p *Params) PaceOf(cost int64) int64 {
	if math.IsInf(p.Burst, 1) {
		return 0
	}
	return int64(math.Ceil(float64(cost) / p.Burst))
}

// forfeit moves backlog beyond maxBacklog to idle: nobody may catch it up.
func (p *Params) forfeit(s *State, now, maxBacklog int64) {
	if late := now - s.Next; late > maxBacklog {
		s.Idle += late - maxBacklog
		s.Next = now - maxBacklog
	}
}

func compileSchedule(c Config, p *Params) {
	p.Burst = float64(*c.Burst)
	p.MaxBacklog = int64(*cmp.Or(c.MaxBacklog, new(Duration(Horizon))))
}

var scheduleEngine = engine{
	acquire: (*Params).acquireSchedule,
	charge: func(p *Params, s *State, now, n, maxWait int64) Result {
		return p.chargeScheduled(s, now, n, maxWait, (*Params).acquireSchedule)
	},
	peek: func(p *Params, s *State, now int64) (int64, int64) {
		p.forfeit(s, now, p.MaxBacklog)
		return max(0, now-s.Next), p.startAt(s, now) - now
	},
	reset: func(p *Params, s *State, now int64) {
		p.forfeit(s, now, 0)
		s.Pace = max(s.Pace, now)
	},
	retune:  func(s *State, now int64, old, _ *Params) { old.forfeit(s, now, old.MaxBacklog) },
	floor:   func(s *State, at int64) { s.Pace = max(s.Pace, at) },
	rewinds: true,
}
