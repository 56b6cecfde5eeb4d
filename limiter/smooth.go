package limiter

// The smooth engine: Guava's SmoothBursty and SmoothWarmingUp in nanoseconds.
// Time that passes while nobody asks is stored (up to Cap ns of cool-down time);
// a request spends stored permits first and pushes next_free only for what it
// could not take from the store. A request waits only for earlier requests:
// the caller pays later (Guava's reserveEarliestAvailable).

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
