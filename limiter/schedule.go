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
	s.Last = now
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

// compileSchedule fills in a schedule limiter's own parameters (see Compile).
func compileSchedule(c Config, p *Params) {
	p.Burst = float64(*c.Burst)
	p.MaxBacklog = Horizon
	if c.MaxBacklog != nil {
		p.MaxBacklog = int64(*c.MaxBacklog)
	}
}

var scheduleEngine = engine{
	acquire: (*Params).acquireSchedule,
	charge: func(p *Params, s *State, now, n, maxWait int64) Result {
		return p.chargeScheduled(s, now, n, maxWait, (*Params).acquireSchedule)
	},
	peek: func(p *Params, s *State, now int64) (int64, int64) {
		p.forfeit(s, now, p.MaxBacklog)
		return max(0, now-s.Next), max(s.Next, s.Pace, now) - now
	},
	reset: func(p *Params, s *State, now int64) {
		p.forfeit(s, now, 0)
		s.Pace = max(s.Pace, now)
	},
	retune:  func(s *State, now int64, old, _ *Params) { old.forfeit(s, now, old.MaxBacklog) },
	floor:   func(s *State, at int64) { s.Pace = max(s.Pace, at) },
	rewinds: true,
}
