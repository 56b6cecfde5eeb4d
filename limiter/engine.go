package limiter

import (
	"math"
	"strconv"
)

// Params are the compiled, immutable parameters of one limiter: everything the
// engine (and its Lua twin) needs, precomputed once from a Config.
type Params struct {
	Kind       Kind
	Slice      Slice
	MaxPermits int64 // most permits one request may ask for

	// schedule
	Burst      float64 // catch-up ratio ≥ 1; +Inf: no pacing
	MaxBacklog int64   // ns of backlog kept; never more than Horizon

	// smooth. Stored permits are kept as nanoseconds of cool-down time, so that a
	// bursting limiter's bookkeeping is exact integer arithmetic.
	Cap       int64   // most stored time, ns (max_burst_seconds or warm-up)
	Initial   int64   // stored time at the first call and after a reset
	Warm      bool    // SmoothWarmingUp rather than SmoothBursty
	Stable    float64 // the slice as a float, ns
	Cooldown  float64 // ns of idle time that store one permit
	Threshold float64 // warm-up: stored permits below which permits cost Stable
	Slope     float64 // warm-up: extra ns per stored permit above Threshold
}

// Compile checks a config and computes its engine parameters.
func Compile(c Config) (Params, error) {
	c, _, err := c.Normalize()
	if err != nil {
		return Params{}, err
	}
	switch c.Kind {
	case KindShare:
		return Params{}, fieldErr("kind", "has no schedule: use Config.Share (a share limiter is asked for capacity, not permits)", strconv.Quote(string(c.Kind)))
	case KindConcurrency:
		return Params{}, fieldErr("kind", "has no schedule: use Config.Concurrency (a concurrency limiter leases slots, not permits)", strconv.Quote(string(c.Kind)))
	}
	sl := SliceOf(c.Rate)
	p := Params{Kind: c.Kind, Slice: sl, MaxPermits: sl.MaxPermits(), Stable: sl.Float()}
	switch c.Kind {
	case KindSchedule:
		p.Burst = float64(*c.Burst)
		p.MaxBacklog = Horizon
		if c.MaxBacklog != nil {
			p.MaxBacklog = int64(*c.MaxBacklog)
		}
	case KindSmooth:
		if c.Warmup == nil {
			p.Cap = int64(math.Round(*c.MaxBurstSeconds * 1e9))
			p.Cooldown = p.Stable
			p.Initial = int64(min(float64(p.Cap), *c.InitialPermits*p.Stable)) // clamp before converting
			break
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
	return p, nil
}

// State is everything about one limiter that changes. All times are ns on the
// clock the caller passes in. For a schedule limiter Next = Origin + Allocated +
// Idle always holds.
type State struct {
	Started   bool
	Origin    int64 // time of the first call
	Next      int64 // schedule: the next permit's scheduled start (A); smooth: next_free
	Pace      int64 // schedule: earliest start allowed while catching up
	Allocated int64 // Σ schedule time granted, ns
	Idle      int64 // Σ schedule time forfeited, ns
	Rem       int64 // sub-ns carry of Allocated, in units of 1/Slice.Den ns
	Stored    int64 // smooth: stored permits as ns of cool-down time
	Permits   int64 // Σ permits granted
	Lateness  int64 // Σ lateness of granted requests, ns
}

// Result is the outcome of one acquire. Times are ns on the caller's clock.
type Result struct {
	Granted    bool
	Permits    int64
	Scheduled  int64 // when the first permit was due on the schedule
	Start      int64 // when the caller may start: max(Scheduled, pace, now)
	Delay      int64 // Start − now; for a denied request, what it would have been
	Lateness   int64 // Start − Scheduled
	Wait       int64 // the limiter's backlog after the call
	RetryAfter int64 // denied: how much later the same request could be granted
}

// View is a limiter's live state as seen at one instant, without changing it.
type View struct {
	Wait      int64 // backlog: schedule time nobody claimed (smooth: stored time)
	Delay     int64 // how long a new caller would wait now
	Idle      int64
	Allocated int64
	Permits   int64
	Lateness  int64
}

// Forever is the max_wait of a caller that will wait as long as it takes.
const Forever = int64(math.MaxInt64)

// CheckPermits reports whether n permits may be asked for in one request.
func (p *Params) CheckPermits(n int64) error {
	if n < 1 || n > p.MaxPermits {
		return fieldErr("permits", "must be ≥ 1 and at most "+itoa(p.MaxPermits)+" (13 days of schedule)", n)
	}
	return nil
}

// Acquire asks for n permits at time now, waiting at most maxWait ns (negative
// counts as 0; Forever for no bound, which Horizon caps). A denied request
// changes nothing but the forfeiture of time, which depends on time alone.
func (p *Params) Acquire(s *State, now, n, maxWait int64) (Result, error) {
	if err := p.CheckPermits(n); err != nil {
		return Result{}, err
	}
	return p.acquire(s, now, n, maxWait), nil
}

func (p *Params) acquire(s *State, now, n, maxWait int64) Result {
	maxWait = min(max(maxWait, 0), Horizon)
	p.Start(s, now)
	if p.Kind == KindSmooth {
		return p.acquireSmooth(s, now, n, maxWait)
	}
	return p.acquireSchedule(s, now, n, maxWait)
}

// Start starts a limiter's schedule at now, if it has not started yet (totals
// are kept). Acquire starts a schedule limiter at its first use; a smooth
// limiter is started when it is created, as Guava's is, so that time passing
// before the first request stores permits.
func (p *Params) Start(s *State, now int64) {
	if s.Started {
		return
	}
	*s = State{Started: true, Origin: now, Next: now, Pace: now, Stored: p.Initial,
		Allocated: s.Allocated, Idle: s.Idle, Permits: s.Permits, Lateness: s.Lateness}
}

// StartsAtCreation reports whether a limiter of these parameters starts its
// schedule when it is created (smooth) rather than at its first use (schedule).
func (p *Params) StartsAtCreation() bool { return p.Kind == KindSmooth }

// Peek returns the view of a limiter at time now; s is not changed.
func (p *Params) Peek(s State, now int64) View {
	if !s.Started {
		return View{Idle: s.Idle, Allocated: s.Allocated, Permits: s.Permits, Lateness: s.Lateness}
	}
	v := View{}
	if p.Kind == KindSmooth {
		p.resync(&s, now)
		v.Wait, v.Delay = p.storedTime(&s), max(0, s.Next-now)
	} else {
		p.forfeit(&s, now, p.MaxBacklog)
		v.Wait, v.Delay = max(0, now-s.Next), max(s.Next, s.Pace, now)-now
	}
	v.Idle, v.Allocated, v.Permits, v.Lateness = s.Idle, s.Allocated, s.Permits, s.Lateness
	return v
}

// Reset starts a new schedule at now: the backlog (smooth: the stored permits)
// is forfeited, totals are kept, and permits already granted stay granted.
func (p *Params) Reset(s *State, now int64) {
	if !s.Started {
		return
	}
	if p.Kind == KindSmooth {
		p.resync(s, now)
		s.Idle += s.Stored
		s.Stored = p.Initial
		return
	}
	p.forfeit(s, now, 0)
	s.Pace = max(s.Pace, now)
}

// Reconfigure moves a limiter from old to new parameters of the same kind at
// time now, keeping its schedule: time passed is settled under the old
// parameters, then later permits cost the new slice. A smooth limiter's stored
// permits are rescaled by new max / old max, as Guava's setRate does.
func Reconfigure(s *State, now int64, old, new *Params) {
	if !s.Started {
		return
	}
	if old.Slice != new.Slice {
		s.Rem = 0 // the sub-ns carry is in old units: round it down
	}
	if new.Kind == KindSmooth {
		old.resync(s, now)
		switch {
		case old.Cap == 0 && new.Warm:
			s.Stored = new.Cap // Guava: a warming-up limiter without history starts cold
		case old.Cap == 0:
			s.Stored = 0
		default:
			s.Stored = min(new.Cap, int64(float64(s.Stored)*float64(new.Cap)/float64(old.Cap)))
		}
		return
	}
	old.forfeit(s, now, old.MaxBacklog)
}

// Undo takes back a granted request whose result was r, given the state just
// before (before) and just after (after) it. If nothing happened since, the
// schedule is rewound as if the request had never been made; otherwise its
// time is moved from allocated to idle (the permits are lost to everyone).
func (p *Params) Undo(s *State, before, after State, r Result) {
	if !r.Granted {
		return
	}
	if *s == after {
		*s = before
		return
	}
	cost := after.Allocated - before.Allocated
	s.Allocated -= cost
	s.Idle += cost
	s.Permits -= r.Permits
	s.Lateness -= r.Lateness
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
