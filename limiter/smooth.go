package limiter

// The smooth engine (the package doc says what it does): a request spends
// stored permits first and pushes next_free only for what it could not take
// from the store; it waits only for earlier requests: the caller pays later
// (Guava's reserveEarliestAvailable).

import "math"

func (p *Params) acquireSmooth(s *State, now, n, maxWait int64) Result {
	if s.Next-now > maxWait { // Guava's canAcquire: next_free − max_wait ≤ now
		delay := s.Next - now
		return Result{Delay: delay, RetryAfter: delay - maxWait, Wait: p.storedTime(s)}
	}
	p.resync(s, now)
	start := s.Next // resync made next_free ≥ now
	var push int64
	switch {
	case !p.Warm:
		cost, rem := p.Slice.Cost(n, s.Rem)
		from := min(cost, s.Stored)
		s.Rem, s.Stored, push = rem, s.Stored-from, cost-from
	case s.Stored == 0:
		push, s.Rem = p.Slice.Cost(n, s.Rem)
	default:
		stored := float64(s.Stored) / p.Cooldown
		spend := min(float64(n), stored)
		push = p.warmWait(stored, spend) + int64(float64(float64(n)-spend)*p.Stable)
		if spend == stored {
			s.Stored = 0
		} else {
			s.Stored -= min(s.Stored, int64(spend*p.Cooldown))
		}
	}
	s.Next += push
	s.Allocated += push
	s.Permits += n
	s.Last = now
	return Result{Granted: true, Permits: n, Scheduled: start, Start: start, Delay: start - now,
		Wait: p.storedTime(s)}
}

// resync stores the time passed since next_free (Guava's resync); what does not
// fit under Cap is idle.
func (p *Params) resync(s *State, now int64) {
	if now <= s.Next {
		return
	}
	gap := now - s.Next
	into := min(gap, p.Cap-s.Stored)
	s.Stored += into
	s.Idle += gap - into
	s.Next = now
}

// warmWait is Guava's storedPermitsToWaitTime: the area under the warm-up
// trapezoid for taking `take` of `stored` permits, truncated to whole ns.
func (p *Params) warmWait(stored, take float64) int64 {
	var wait int64
	if above := stored - p.Threshold; above > 0 {
		takeAbove := min(above, take)
		length := p.permitsToTime(above) + p.permitsToTime(above-takeAbove)
		wait = int64(takeAbove * length / 2.0)
		take -= takeAbove
	}
	return wait + int64(float64(p.Stable*take))
}

func (p *Params) permitsToTime(permits float64) float64 {
	return p.Stable + float64(permits*p.Slope) // float64(): no fused multiply-add, as in Lua
}

// storedTime is the time-equivalent of the stored permits at the stable rate:
// what callers may still burst through.
func (p *Params) storedTime(s *State) int64 {
	if !p.Warm {
		return s.Stored
	}
	return int64(float64(s.Stored) / p.Cooldown * p.Stable)
}

func compileSmooth(c Config, p *Params) {
	if c.Warmup == nil {
		p.Cap = int64(math.Round(*c.MaxBurstSeconds * 1e9))
		p.Cooldown = p.Stable
		p.Initial = int64(min(float64(p.Cap), *c.InitialPermits*p.Stable)) // clamp before converting
		return
	}
	// Guava's SmoothWarmingUp.doSetRate, in ns.
	warmup := float64(*c.Warmup)
	cold := p.Stable * *c.ColdFactor
	p.Warm = true
	p.Cap = int64(*c.Warmup)
	p.Threshold = 0.5 * warmup / p.Stable
	maxPermits := p.Threshold + 2.0*warmup/(p.Stable+cold)
	p.Slope = (cold - p.Stable) / (maxPermits - p.Threshold)
	p.Cooldown = warmup / maxPermits
	p.Initial = p.Cap // a warming-up limiter starts cold
	if c.InitialPermits != nil {
		p.Initial = int64(min(float64(p.Cap), *c.InitialPermits*p.Cooldown))
	}
}

var smoothEngine = engine{
	acquire: (*Params).acquireSmooth,
	charge: func(p *Params, s *State, now, n, maxWait int64) Result {
		return p.chargeScheduled(s, now, n, maxWait, (*Params).acquireSmooth)
	},
	peek: func(p *Params, s *State, now int64) (int64, int64) {
		p.resync(s, now)
		return p.storedTime(s), max(0, s.Next-now)
	},
	reset: func(p *Params, s *State, now int64) {
		p.resync(s, now)
		s.Idle += s.Stored
		s.Stored = p.Initial
	},
	retune: func(s *State, now int64, old, new *Params) {
		old.resync(s, now)
		switch {
		case old.Cap == 0 && new.Warm:
			s.Stored = new.Cap // Guava: a warming-up limiter without history starts cold
		case old.Cap == 0:
			s.Stored = 0
		default:
			s.Stored = min(new.Cap, int64(float64(s.Stored)*float64(new.Cap)/float64(old.Cap)))
		}
	},
	floor:            func(s *State, _ int64) { s.Stored = 0 },
	startsAtCreation: true,
}
