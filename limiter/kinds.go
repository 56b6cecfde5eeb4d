package limiter

import (
	"slices"
	"strings"
)

// Class is what a kind of limiter hands out.
type Class int

const (
	// ClassRate kinds hand out permits on a schedule (Params: Acquire,
	// Grant, Release, Peek, Reset); store/ keeps their state in one packed
	// value that lua/lib.lua reads and writes.
	ClassRate Class = iota + 1
	// ClassLease kinds lease parts of a capacity to clients (share) or
	// slots (concurrency); each has its own script in lua/.
	ClassLease
)

// KindInfo is everything the layers need to know of one kind. kinds holds
// one per kind: every layer asks it (Lookup, IsRate, Kinds) instead of
// listing kinds, so that adding a kind is adding a row (see docs/kinds.md).
type KindInfo struct {
	Name  Kind
	Class Class
	// Code is a rate kind's code in its packed state: the first byte of x
	// (code in lua/<kind>.lua, which must agree). 0 for lease kinds.
	Code int
	// Fields are the config fields (JSON names) that belong to the kind,
	// besides kind itself; any other field set is refused (Normalize).
	// Schedule and smooth take rate and max_reserve.
	Fields []string
	// Params are a rate kind's own engine parameters in the order its
	// state keeps them, after the slice and MaxPermits, which every rate
	// kind has (params in lua/<kind>.lua, which must agree). store/ sends
	// and reads a rate limiter's parameters by this list. nil for lease
	// kinds.
	Params []Param
	// normalize checks a config of this kind and fills in its defaults.
	normalize func(c *Config) error
	// compile fills in a rate kind's own engine parameters (p has Kind,
	// Slice, MaxPermits and Stable already); nil for lease kinds.
	compile func(c Config, p *Params)
	// noSchedule says, for a lease kind, what to use instead of Compile.
	noSchedule string
	// engine is a rate kind's engine; nil for lease kinds.
	engine *engine
}

// engine is what a rate kind's engine does differently from another's; the
// rest (Observe, Start, totals, floors' position) is Params' for all. One
// engine file holds each (schedule.go, smooth.go).
type engine struct {
	// acquire decides a request on a started state (see Params.acquire).
	acquire func(p *Params, s *State, now, n, maxWait int64) Result
	// charge takes n permits whatever is left (see Params.Charge, which
	// fills in Wait and Delay).
	charge func(p *Params, s *State, now, n, maxWait int64) Result
	// peek returns a View's Wait and Delay; s is a copy it may change.
	peek func(p *Params, s *State, now int64) (wait, delay int64)
	// reset forfeits the backlog (Params.Reset, after Observe).
	reset func(p *Params, s *State, now int64)
	// retune settles time passed under old before new applies (Reconfigure).
	retune func(s *State, now int64, old, new *Params)
	// floor is the kind's part of ApplyFloor once Next moved to at.
	floor func(s *State, at int64)
	// startsAtCreation: the schedule starts when the limiter is created
	// (StartsAtCreation), not at its first use.
	startsAtCreation bool
	// rewinds: a handback may rewind the schedule (Params.Release).
	rewinds bool
	// counts: the kind counts permits against a limit (window): a grant's
	// permits are not handed back (Params.Release changes nothing).
	counts bool
}

// Param is one of a rate kind's own engine parameters (KindInfo.Params), a
// number as the scripts keep it.
type Param struct {
	Name string // its name in lua/<kind>.lua (snake case)
	get  func(p *Params) float64
	set  func(p *Params, v float64)
}

// Value is the parameter's value in p: exact (an integer below 2^53, or a
// float64), a bool 0 or 1, and a Burst of +Inf ("inf") 0.
func (q Param) Value(p *Params) float64 { return q.get(p) }

// Set sets the parameter in p to v, a Value: the inverse of Value, except
// that a Burst of 0 stays 0.
func (q Param) Set(p *Params, v float64) { q.set(p, v) }

// The engine parameters of each rate kind (KindInfo.Params).
var (
	scheduleParams = []Param{
		{"burst", func(p *Params) float64 {
			if p.Burst > MaxBurst { // "inf" travels and is kept as 0
				return 0
			}
			return p.Burst
		}, func(p *Params, v float64) { p.Burst = v }},
		{"max_backlog", func(p *Params) float64 { return float64(p.MaxBacklog) },
			func(p *Params, v float64) { p.MaxBacklog = int64(v) }},
	}
	smoothParams = []Param{
		{"cap", func(p *Params) float64 { return float64(p.Cap) }, func(p *Params, v float64) { p.Cap = int64(v) }},
		{"initial", func(p *Params) float64 { return float64(p.Initial) },
			func(p *Params, v float64) { p.Initial = int64(v) }},
		{"warm", func(p *Params) float64 { return boolParam(p.Warm) },
			func(p *Params, v float64) { p.Warm = v == 1 }},
		{"cooldown", func(p *Params) float64 { return p.Cooldown }, func(p *Params, v float64) { p.Cooldown = v }},
		{"threshold", func(p *Params) float64 { return p.Threshold }, func(p *Params, v float64) { p.Threshold = v }},
		{"slope", func(p *Params) float64 { return p.Slope }, func(p *Params, v float64) { p.Slope = v }},
	}
)

// boolParam is a bool as a Param's Value: 0 or 1.
func boolParam(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

var kinds = []KindInfo{
	{Name: KindSchedule, Class: ClassRate, Code: 1,
		Fields:    []string{"rate", "max_reserve", "spec", "burst", "max_backlog", "shadow"},
		Params:    scheduleParams,
		normalize: (*Config).normalizeSchedule, compile: compileSchedule, engine: &scheduleEngine},
	{Name: KindSmooth, Class: ClassRate, Code: 2,
		Fields: []string{"rate", "max_reserve", "max_burst_seconds", "initial_permits", "warmup", "cold_factor",
			"shadow"},
		Params:    smoothParams,
		normalize: (*Config).normalizeSmooth, compile: compileSmooth, engine: &smoothEngine},
	{Name: KindWindow, Class: ClassRate, Code: 3,
		Fields:    []string{"limit", "period", "sliding", "zone"},
		Params:    windowParams,
		normalize: (*Config).normalizeWindow, compile: compileWindow, engine: &windowEngine},
	{Name: KindShare, Class: ClassLease,
		Fields: []string{"capacity", "algorithm", "lease", "refresh_interval", "safe_capacity", "learning",
			"shadow"},
		normalize:  (*Config).normalizeShare,
		noSchedule: "use Config.Share (a share limiter is asked for capacity, not permits)"},
	{Name: KindConcurrency, Class: ClassLease,
		Fields:     []string{"limit", "lease", "shadow"},
		normalize:  (*Config).normalizeConcurrency,
		noSchedule: "use Config.Concurrency (a concurrency limiter leases slots, not permits)"},
}

// Kinds returns every kind, in the order the docs list them. The slice is
// the caller's.
func Kinds() []KindInfo { return slices.Clone(kinds) }

// Lookup returns the kind named k.
func Lookup(k Kind) (KindInfo, bool) {
	for _, i := range kinds {
		if i.Name == k {
			return i, true
		}
	}
	return KindInfo{}, false
}

// IsRate tells whether k is a rate kind (ClassRate): one with a schedule.
func IsRate(k Kind) bool {
	i, ok := Lookup(k)
	return ok && i.Class == ClassRate
}

// Counts tells whether k is a rate kind that counts permits against a limit
// per window (window) rather than placing them on a schedule: its answers
// carry a limit, what is left and when it resets, and a grant's permits are
// not handed back to a schedule.
func Counts(k Kind) bool {
	i, ok := Lookup(k)
	return ok && i.engine != nil && i.engine.counts
}

// RateKinds names the rate kinds in words, "schedule, smooth or window",
// for an error that asks for one.
func RateKinds() string { return kindNames(ClassRate) }

// kindNames words the kinds of class (0: every kind) as "a, b or c".
func kindNames(class Class) string {
	var names []string
	for _, k := range kinds {
		if class == 0 || k.Class == class {
			names = append(names, string(k.Name))
		}
	}
	last := len(names) - 1
	return strings.Join(names[:last], ", ") + " or " + names[last]
}

// IsLease tells whether k is a lease kind (ClassLease).
func IsLease(k Kind) bool {
	i, ok := Lookup(k)
	return ok && i.Class == ClassLease
}

// kindRule is the rule a kind must follow: "must be schedule, smooth, share
// or concurrency".
func kindRule() string { return "must be " + kindNames(0) }
