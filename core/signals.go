package core

import (
	"strconv"
	"time"

	"github.com/limitd/limitd/limiter"
)

// Reading is one limiter's live state as an operator reads it: each kind's
// meaning in its own field, worked out here once for every reader. Fields
// that do not apply to the limiter's kind are zero; the flags say which
// apply.
type Reading struct {
	Now int64 // Redis time of the read, Unix ns
	// Rate: a rate kind: Permits is the total it granted, as its state in
	// Redis counts it (whoever took them), and Delay how long a new caller
	// asking one permit would wait now.
	Rate           bool
	Permits, Delay int64
	// Scheduled: a kind with a schedule (not a window). Backlog is its wait
	// time (schedule: time nobody claimed; smooth: its stored time), and
	// LatenessTotal the lateness of every grant added up.
	Scheduled              bool
	Backlog, LatenessTotal int64
	// Counted: a window: Limit per window, Remaining in the current one,
	// which ends at ResetAt.
	Counted                   bool
	Limit, Remaining, ResetAt int64
	// Slots: a concurrency limiter: InUse of Limit slots held, Free left,
	// and the earliest lease expiry (NextExpiry, Unix ns; 0 with none held).
	Slots                   bool
	InUse, Free, NextExpiry int64
	// Shares: a share limiter: Held of Capacity by its Holders, who want
	// Wanted in all.
	Shares                 bool
	Held, Wanted, Capacity float64
	Holders                int
}

// ReadingOf reads l's live state by its kind.
func ReadingOf(l Limiter) Reading {
	c := l.Config
	switch {
	case l.State != nil:
		w := l.State
		r := Reading{Now: w.Now, Rate: true, Permits: w.Permits, Delay: max(0, w.Delay)}
		if w.Window {
			r.Counted, r.Limit, r.Remaining, r.ResetAt = true, w.Limit, w.Wait, w.Position
			if !w.Started {
				r.Remaining = w.Limit
			}
			r.Delay = 0 // a window grants now, or when it resets if none is left
			if r.Remaining < 1 {
				r.Delay = max(0, r.ResetAt-w.Now)
			}
			return r
		}
		r.Scheduled, r.Backlog, r.LatenessTotal = true, w.Wait, w.Lateness
		return r
	case l.Holders != nil && l.Holders.Kind == limiter.KindConcurrency:
		h := l.Holders
		r := Reading{Now: h.Now, Slots: true, InUse: int64(len(h.Slots))}
		if c.Limit != nil {
			r.Limit = *c.Limit
		}
		r.Free = max(0, r.Limit-r.InUse)
		for _, s := range h.Slots {
			if r.NextExpiry == 0 || s.Expires < r.NextExpiry {
				r.NextExpiry = s.Expires
			}
		}
		return r
	case l.Holders != nil:
		h := l.Holders
		r := Reading{Now: h.Now, Shares: true, Held: h.Held, Holders: len(h.Share)}
		if c.Capacity != nil {
			r.Capacity = *c.Capacity
		}
		for _, s := range h.Share {
			r.Wanted += s.Wants
		}
		return r
	}
	return Reading{}
}

// used is the part of the limiter's capacity its state says is used now;
// a schedule's use is a rate, measured over samples (ok false).
func (r Reading) used() (u float64, ok bool) {
	switch {
	case r.Counted:
		return part(float64(r.Limit-r.Remaining), float64(r.Limit)), true
	case r.Slots:
		return part(float64(r.InUse), float64(r.Limit)), true
	case r.Shares:
		return part(r.Held, r.Capacity), true
	}
	return 0, false
}

func part(n, whole float64) float64 {
	if whole <= 0 {
		return 0
	}
	return n / whole
}

// queued reports whether a new caller's wait says callers queue: a window
// out of permits; a scheduled limiter whose next permit is further away
// than the pace of two permits (one interval ahead is pacing, not a queue).
func (r Reading) queued(rate float64) bool {
	switch {
	case r.Delay <= 0:
		return false
	case r.Scheduled && rate > 0:
		return float64(r.Delay) > 2*float64(time.Second)/rate
	}
	return r.Counted
}

// Health says whether a limiter needs an operator, as the shipped alerts
// decide it (docs/operations.md).
type Health string

const (
	HealthOK          Health = "ok"
	HealthRefusing    Health = "refusing"
	HealthSaturated   Health = "saturated"
	HealthWouldRefuse Health = "would_refuse"
)

// Signals are what one limiter did over its last samples and where it
// stands: its Reading, the rates of its counts over the Redis time between
// two reads (Span, never an assumed second), its utilization and health.
type Signals struct {
	Reading
	At   int64 // Redis time of the sample, Unix ns
	Span int64 // the Redis time the rates are measured over, ns; 0: no rate yet
	// GrantedPerS is the permits granted a second: a rate kind's from its
	// state in Redis, a lease kind's from the decision totals.
	// GrantedCallsPerS is the calls granted as limitd's front ends count
	// them (a Go client's pool over Redis takes permits in batches: not
	// counted).
	GrantedPerS, GrantedCallsPerS float64
	// RefusedPerS and RefusedCallsPerS are the permits and calls refused a
	// second; a limiter in shadow mode refuses nobody, and its would-be
	// refusals are ShadowRefusedPerS.
	RefusedPerS, RefusedCallsPerS, ShadowRefusedPerS float64
	// Utilization: a rate limiter's granted permits a second over the last
	// UtilizationSpan over its rate; else Reading's part of its capacity
	// used (a window's limit, a share's capacity, a concurrency limit).
	Utilization float64
	// Wait is how long a new caller asking one permit would wait now; 0 for
	// a lease kind (see Reading.NextExpiry).
	Wait      int64
	Saturated bool // refused or queueing callers, or utilization ≥ SaturatedUtilization
	Shadow    bool // the limiter is in shadow mode
	Health    Health
	// Instance is a template instance's counts in its template's busiest
	// instances over the last InstanceMinutes.
	Instance *InstanceCounts
}

// InstanceCounts are a template instance's decisions as its template's
// busiest-instances sets hold them.
type InstanceCounts struct {
	Template         string
	Since            int64 // Unix ns, Redis clock
	Tracked          bool  // among the template's busiest: the counts are known
	Granted, Refused int64
}

// RefusedShare is the part of its permits an instance was refused.
func (c InstanceCounts) RefusedShare() float64 {
	return part(float64(c.Refused), float64(c.Granted+c.Refused))
}

const (
	// SaturatedUtilization is the utilization from which a limiter counts
	// as saturated even with no caller refused or waiting (LimitdSaturated's).
	SaturatedUtilization = 0.95
	// UtilizationSpan is the Redis time a rate limiter's utilization is
	// measured over.
	UtilizationSpan = 10 * time.Second
	// RateSpan is the least Redis time a sample's rates are measured over:
	// reads land 0 to a few seconds apart and each process adds its counts
	// once a second, so a rate over several seconds charts steadily.
	RateSpan         = 5 * time.Second
	HistoryLen       = 900  // samples a limiter's history keeps: 15 min at one a second
	InstanceMinutes  = 5    // the period an instance's counts are read over
	instanceRefusing = 0.01 // the part refused from which an instance is refusing
)

// point is a limiter's counts at a Redis time.
type point struct {
	now     int64
	permits int64 // a rate kind's state's; else the totals'
	Totals
}

// pointsKept bounds a series' points: UtilizationSpan at several reads a
// second.
const pointsKept = 64

// series is one limiter's recent points and history of samples, both rings.
type series struct {
	kind    limiter.Kind
	points  [pointsKept]point
	npoints int // points kept, up to len(points); the newest at (npoints-1)%len
	samples []sample
	next    int   // where the next sample goes once samples is full
	newest  int64 // the newest sample's time
}

// sample is one limiter's signals as kept in its history, in 40 bytes.
type sample struct {
	t, wait                    int64
	granted, grantedCalls      float32
	refused, refusedCalls, use float32
	saturated, shadow          bool
}

// signals is sm as Signals (its history's: no reading).
func (sm sample) signals() Signals {
	s := Signals{At: sm.t, GrantedPerS: wide(sm.granted), GrantedCallsPerS: wide(sm.grantedCalls),
		RefusedCallsPerS: wide(sm.refusedCalls), Utilization: wide(sm.use), Wait: sm.wait,
		Saturated: sm.saturated, Shadow: sm.shadow}
	if sm.shadow {
		s.ShadowRefusedPerS = wide(sm.refused)
	} else {
		s.RefusedPerS = wide(sm.refused)
	}
	s.Health = healthOf(s)
	return s
}

// wide is f as the float64 of its shortest decimal: 0.4, not 0.40000000596.
func wide(f float32) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(float64(f), 'g', -1, 32), 64)
	return v
}

// add keeps p, forgetting what came before when its counts went back (the
// limiter was created again, or Redis lost it).
func (s *series) add(p point) {
	if s.npoints > 0 {
		last := s.point(0)
		if p.now <= last.now {
			return // read twice in the same instant: nothing happened
		}
		if p.permits < last.permits || p.GrantedCalls < last.GrantedCalls ||
			p.RefusedPermits < last.RefusedPermits || p.RefusedCalls < last.RefusedCalls {
			s.npoints = 0
		}
	}
	s.points[s.npoints%len(s.points)] = p
	s.npoints++
}

// point is the point back before the newest (0: the newest), or the oldest
// kept when there is none that old.
func (s *series) point(back int) point {
	back = min(back, s.npoints-1, len(s.points)-1)
	return s.points[(s.npoints-1-back)%len(s.points)]
}

// since is the newest point at least span before the newest, or the oldest.
func (s *series) since(span time.Duration) point {
	cur := s.point(0)
	n := min(s.npoints, len(s.points))
	for back := 1; back < n; back++ {
		if p := s.point(back); cur.now-p.now >= int64(span) {
			return p
		}
	}
	return s.point(n - 1)
}

func (s *series) keep(sm sample) {
	if len(s.samples) < HistoryLen {
		s.samples = append(s.samples, sm)
		return
	}
	s.samples[s.next] = sm
	s.next = (s.next + 1) % HistoryLen
}

func (s *series) history() []Signals {
	out := make([]Signals, 0, len(s.samples))
	for i := range s.samples {
		out = append(out, s.samples[(s.next+i)%len(s.samples)].signals())
	}
	return out
}

// perSecond is a count's rate between two points.
func perSecond(d, ns int64) float64 {
	if ns <= 0 || d <= 0 {
		return 0
	}
	return float64(d) * float64(time.Second) / float64(ns)
}

// signal is l's signals, its counts added to s first. Granted permits of a
// rate kind are its state's count; refusals and calls are the decision
// totals every front end adds to Redis.
func (s *series) signal(l Limiter) (Signals, sample) {
	r := ReadingOf(l)
	p := point{now: r.Now}
	if l.Totals != nil {
		p.Totals = *l.Totals
	}
	p.permits = p.GrantedPermits
	if r.Rate {
		p.permits = r.Permits
	}
	s.add(p)
	sg := Signals{Reading: r, At: r.Now, Shadow: l.Config.Shadow}
	cur := s.point(0)
	if prev := s.since(RateSpan); prev.now < cur.now {
		dt := cur.now - prev.now
		sg.Span = dt
		sg.GrantedPerS = perSecond(cur.permits-prev.permits, dt)
		// never more calls than the permits Redis granted meanwhile
		sg.GrantedCallsPerS = min(perSecond(cur.GrantedCalls-prev.GrantedCalls, dt), sg.GrantedPerS)
		refused := perSecond(cur.RefusedPermits-prev.RefusedPermits, dt)
		sg.RefusedCallsPerS = perSecond(cur.RefusedCalls-prev.RefusedCalls, dt)
		if sg.Shadow {
			sg.ShadowRefusedPerS = refused
			sg.RefusedCallsPerS = 0
		} else {
			sg.RefusedPerS = refused
		}
	}
	if u, ok := r.used(); ok {
		sg.Utilization = u
	} else if l.Config.Rate > 0 {
		back := s.since(UtilizationSpan)
		sg.Utilization = perSecond(cur.permits-back.permits, cur.now-back.now) / l.Config.Rate
	}
	sg.Wait = r.Delay
	sg.Saturated = sg.RefusedPerS > 0 || sg.RefusedCallsPerS > 0 || r.queued(l.Config.Rate) ||
		sg.Utilization >= SaturatedUtilization
	sg.Health = healthOf(sg)
	sm := sample{t: sg.At, wait: sg.Wait, granted: float32(sg.GrantedPerS), grantedCalls: float32(sg.GrantedCallsPerS),
		refused: float32(sg.RefusedPerS + sg.ShadowRefusedPerS), refusedCalls: float32(sg.RefusedCallsPerS),
		use: float32(sg.Utilization), saturated: sg.Saturated, shadow: sg.Shadow}
	return sg, sm
}

func healthOf(sg Signals) Health {
	switch {
	case sg.Shadow && sg.ShadowRefusedPerS > 0:
		return HealthWouldRefuse
	case sg.Shadow:
		return HealthOK
	case sg.RefusedPerS > 0 || sg.Instance != nil && sg.Instance.RefusedShare() >= instanceRefusing:
		return HealthRefusing
	case sg.Saturated:
		return HealthSaturated
	}
	return HealthOK
}
