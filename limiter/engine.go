package limiter

import (
	"cmp"
	"math"
	"strconv"
)

// Params are the compiled, immutable parameters of one limiter: everything the
// engine (and its Lua twin) needs, precomputed once from a Config.
type Params struct {
	Kind       Kind
	Slice      Slice
	MaxPermits int64 // most permits one request may ask for (max_reserve of schedule, at least 1)

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

	// window (see window.go)
	Limit    int64    // permits per window
	Period   int64    // a duration period, ns (a whole number of µs); 0 for a calendar one
	Sliding  bool     // a sliding window (duration periods only)
	Calendar Calendar // a calendar period (Day, Week, Month, Year), in Zone
	Zone     string   // the IANA zone of a calendar period
	ZoneID   uint32   // FNV-32a of Zone, as the scripts keep it (they see a change of zone)
}

// Compile checks a config and computes its engine parameters.
func Compile(c Config) (Params, error) {
	c, _, err := c.Normalize()
	if err != nil {
		return Params{}, err
	}
	k, _ := Lookup(c.Kind) // Normalize knows it
	if k.compile == nil {
		return Params{}, fieldErr("kind", "has no schedule: "+k.noSchedule, strconv.Quote(string(c.Kind)))
	}
	sl := Slice{Whole: 1, Den: 1} // a kind without a rate (window) has no pace
	if c.Rate > 0 {
		sl = SliceOf(c.Rate)
	}
	reserve := int64(*cmp.Or(c.MaxReserve, D(DefaultMaxReserve)))
	p := Params{Kind: c.Kind, Slice: sl, MaxPermits: sl.PermitsWithin(reserve), Stable: sl.Float()}
	k.compile(c, &p)
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
	Last      int64 // the time of the latest grant, reset or reconfiguration (see Observe)
}

// Result is the outcome of one acquire, or of a charge (see Params.Charge:
// Granted then says whether the permits taken fitted, and Delay is the wait
// of a new caller after them). Times are ns on the caller's clock.
type Result struct {
	Granted    bool
	Permits    int64
	Scheduled  int64 // when the first permit was due on the schedule
	Start      int64 // when the caller may start: max(Scheduled, pace, now)
	Delay      int64 // Start − now; for a denied request, what it would have been
	Lateness   int64 // Start − Scheduled
	Wait       int64 // the limiter's backlog after the call
	RetryAfter int64 // denied: how much later the same request could be granted
	// Count is a window's count after a charge (Params.Charge): what its
	// limit is measured against, which a charge may take past it; 0
	// otherwise.
	Count int64
}

// View is a limiter's live state as seen at one instant, without changing it.
type View struct {
	Wait      int64 // backlog: schedule time nobody claimed (smooth: stored time)
	Delay     int64 // how long a new caller would wait now
	Idle      int64
	Allocated int64
	Permits   int64
	Lateness  int64
	// Next is the schedule's position as the state holds it (State.Next
	// before this instant's forfeit or resync, which a floor must not
	// anticipate: a smooth limiter stores that time as permits), but not
	// more than 2^52 ns behind now.
	Next int64
}

// Forever is the max_wait of a caller that will wait as long as it takes.
const Forever = int64(math.MaxInt64)

// CheckPermits reports whether n permits may be asked for in one request.
func (p *Params) CheckPermits(n int64) error {
	if n < 1 || n > p.MaxPermits {
		return fieldErr("permits", PermitsRule(p.MaxPermits), n)
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
	s.Observe(now)
	p.Start(s, now)
	return p.engine().acquire(p, s, now, n, maxWait)
}

// engine is the kind's engine (KindInfo.engine); the zero Kind, as in a
// Params made by hand, is a schedule.
func (p *Params) engine() *engine {
	for i := range kinds {
		if kinds[i].Name == p.Kind && kinds[i].engine != nil {
			return kinds[i].engine
		}
	}
	return &scheduleEngine
}

// Start starts a limiter's schedule at now, if it has not started yet (totals
// are kept). Acquire starts a schedule limiter at its first use; a smooth
// limiter is started when it is created, as Guava's is, so that time passing
// before the first request stores permits.
func (p *Params) Start(s *State, now int64) {
	if s.Started {
		return
	}
	*s = State{Started: true, Origin: now, Next: now, Pace: now, Stored: p.Initial, Last: now,
		Allocated: s.Allocated, Idle: s.Idle, Permits: s.Permits, Lateness: s.Lateness}
}

// StartsAtCreation reports whether a limiter of these parameters starts its
// schedule when it is created (smooth) rather than at its first use (schedule).
func (p *Params) StartsAtCreation() bool { return p.engine().startsAtCreation }

// Peek returns the view of a limiter at time now; s is not changed.
func (p *Params) Peek(s State, now int64) View {
	if !s.Started {
		return View{Idle: s.Idle, Allocated: s.Allocated, Permits: s.Permits, Lateness: s.Lateness}
	}
	s.Observe(now)
	v := View{Next: max(s.Next, now-floorBack)} // a schedule pointer that far back is as good as any (lua/lib.lua now_rel)
	v.Wait, v.Delay = p.engine().peek(p, &s, now)
	v.Idle, v.Allocated, v.Permits, v.Lateness = s.Idle, s.Allocated, s.Permits, s.Lateness
	return v
}

// Reset starts a new schedule at now: the backlog (smooth: the stored permits)
// is forfeited, totals are kept, and permits already granted stay granted.
func (p *Params) Reset(s *State, now int64) {
	if !s.Started {
		return
	}
	s.Observe(now)
	s.Last = now
	p.engine().reset(p, s, now)
}

// Reconfigure moves a limiter from old to new parameters of the same kind at
// time now, keeping its schedule: time passed is settled under the old
// parameters, then later permits cost the new slice. A smooth limiter's stored
// permits are rescaled by new max / old max, as Guava's setRate does.
func Reconfigure(s *State, now int64, old, new *Params) {
	if !s.Started {
		return
	}
	s.Observe(now)
	s.Last = now
	if old.Slice != new.Slice {
		s.Rem = 0 // the sub-ns carry is in old units: round it down
	}
	new.engine().retune(s, now, old, new)
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

// PermitsRule is the rule a request for too many permits breaks, max being the
// limiter's MaxPermits: the same words wherever a limiter refuses it.
func PermitsRule(max int64) string {
	return "must be ≥ 1 and at most " + itoa(max) + " (the limiter's max_reserve of schedule)"
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
