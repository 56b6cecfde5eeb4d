package limiter

import "math"

// The schedule engine (EngineBlock's strict limiter and nosqlbench's hybrid
// limiter, shared): the schedule pointer Next advances one slice per permit;
// time that passes without a caller becomes backlog, which callers may catch up
// at Burst × rate, and backlog beyond MaxBacklog is forfeited as idle time.

// acquireSchedule is acquire(n, max_wait) of DESIGN §3.1.
func (p *Params) acquireSchedule(s *State, now, n, maxWait int64) Result {
	p.forfeit(s, now, p.MaxBacklog)
	sched := s.Next
	start := max(sched, s.Pace, now)
	delay := start - now
	if delay > maxWait {
		return Result{Delay: delay, RetryAfter: delay - maxWait, Wait: max(0, now-s.Next)}
	}
	cost, rem := p.Slice.Cost(n, s.Rem)
	s.Rem = rem
	s.Allocated += cost
	s.Next += cost
	s.Pace = start + p.PaceOf(cost)
	lateness := start - sched
	s.Permits += n
	s.Lateness += lateness
	return Result{Granted: true, Permits: n, Scheduled: sched, Start: start, Delay: delay,
		Lateness: lateness, Wait: max(0, now-s.Next)}
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
