package limiter

import (
	"cmp"
	"encoding/json"
	"math"
	"reflect"
	"slices"
	"strconv"
	"time"

	"gopkg.in/yaml.v3"
)

// Kind names a limiter engine.
type Kind string

const (
	KindSchedule Kind = "schedule" // a strict or bursting shared schedule
	KindSmooth   Kind = "smooth"   // Guava's SmoothBursty / SmoothWarmingUp
	// KindShare divides a capacity among clients by lease (Doorman).
	KindShare Kind = "share"
	// KindConcurrency is a distributed semaphore of leased slots.
	KindConcurrency Kind = "concurrency"
	// KindWindow grants limit permits per period (fixed or sliding windows,
	// the reference Envoy rate limit server's model; see window.go).
	KindWindow Kind = "window"
)

// DefaultKind is the kind of a config that names none.
const DefaultKind = KindSchedule

// Config describes one limiter. It is what the HTTP API takes as JSON and the
// boot file as YAML. Zero or nil fields take their defaults (see Normalize).
type Config struct {
	Kind Kind `json:"kind,omitempty" yaml:"kind,omitempty"`
	// Spec is a rate spec string ("12000,1.1"), an alternative to Rate and Burst
	// for a schedule limiter.
	Spec string  `json:"spec,omitempty" yaml:"spec,omitempty"`
	Rate float64 `json:"rate,omitempty" yaml:"rate,omitempty"` // permits per second
	// MaxReserve bounds the schedule one request may take (schedule and
	// smooth): a request costing more is refused (a 400 naming permits).
	// Default DefaultMaxReserve; never less than one permit's cost.
	MaxReserve *Duration `json:"max_reserve,omitempty" yaml:"max_reserve,omitempty"`

	// schedule
	Burst      *Burst    `json:"burst,omitempty" yaml:"burst,omitempty"`             // ≥ 1 or inf; default 1.1
	MaxBacklog *Duration `json:"max_backlog,omitempty" yaml:"max_backlog,omitempty"` // default unlimited (Horizon)

	// smooth
	MaxBurstSeconds *float64  `json:"max_burst_seconds,omitempty" yaml:"max_burst_seconds,omitempty"` // default 1
	InitialPermits  *float64  `json:"initial_permits,omitempty" yaml:"initial_permits,omitempty"`     // default 0; warm-up: cold
	Warmup          *Duration `json:"warmup,omitempty" yaml:"warmup,omitempty"`
	ColdFactor      *float64  `json:"cold_factor,omitempty" yaml:"cold_factor,omitempty"` // default 3

	// share (Lease also for concurrency)
	Capacity        *float64  `json:"capacity,omitempty" yaml:"capacity,omitempty"`                 // > 0, finite; required
	Algorithm       Algorithm `json:"algorithm,omitempty" yaml:"algorithm,omitempty"`               // default fair_share
	Lease           *Duration `json:"lease,omitempty" yaml:"lease,omitempty"`                       // share: default 60s; concurrency: default 30s
	RefreshInterval *Duration `json:"refresh_interval,omitempty" yaml:"refresh_interval,omitempty"` // default min(5s, lease); ≤ lease
	SafeCapacity    *float64  `json:"safe_capacity,omitempty" yaml:"safe_capacity,omitempty"`       // ≤ capacity; absent: capacity / clients
	Learning        *Duration `json:"learning,omitempty" yaml:"learning,omitempty"`                 // default = lease; 0: no learning mode

	// concurrency (Limit also for window)
	Limit *int64 `json:"limit,omitempty" yaml:"limit,omitempty"` // slots, ≥ 1 and ≤ 1e6; required

	// window
	Period  string `json:"period,omitempty" yaml:"period,omitempty"`   // a duration, or day, week, month or year; required
	Sliding bool   `json:"sliding,omitempty" yaml:"sliding,omitempty"` // a sliding window (duration periods only)
	Zone    string `json:"zone,omitempty" yaml:"zone,omitempty"`       // IANA zone of a calendar period; default UTC

	// Shadow (every kind) decides and counts but never refuses: a refusal
	// is reported as granted, marked shadow, and takes nothing (for trying
	// a limit on live traffic). core applies it.
	Shadow bool `json:"shadow,omitempty" yaml:"shadow,omitempty"`
}

// Limits on config values.
const (
	MaxStoredSeconds = 1e6 // max_burst_seconds and warm-up, about 11.6 days
	MaxColdFactor    = 1e6
	MaxLimit         = 1e6 // a concurrency limiter's slots
)

// DefaultMaxReserve is how much schedule one request may take when a config
// sets no max_reserve: a request for more permits than fit is refused, so that
// one caller cannot take a limiter for days.
const DefaultMaxReserve = time.Minute

// Defaults of share and concurrency limiters.
const (
	DefaultShareLease       = 60 * time.Second
	DefaultRefreshInterval  = 5 * time.Second
	DefaultConcurrencyLease = 30 * time.Second
)

// Normalize checks c and returns it in canonical form: the spec string applied,
// every default filled in, so that two configs that behave the same compare
// equal. The verb of a spec string is returned beside it (VerbStart without one).
func (c Config) Normalize() (Config, Verb, error) {
	verb := VerbStart
	c.Kind = cmp.Or(c.Kind, DefaultKind)
	if c.Spec != "" {
		if k, ok := Lookup(c.Kind); ok && !slices.Contains(k.Fields, "spec") {
			return Config{}, "", fieldErr("spec", "is only for kind schedule", c.Kind)
		}
		if c.Rate != 0 || c.Burst != nil {
			return Config{}, "", fieldErr("spec", "excludes rate and burst: give one or the other", nil)
		}
		sp, err := ParseSpec(c.Spec)
		if err != nil {
			return Config{}, "", err
		}
		c.Spec, c.Rate, c.Burst, verb = "", sp.Rate, new(Burst(sp.Burst)), sp.Verb
	}
	k, ok := Lookup(c.Kind)
	if !ok {
		return Config{}, "", fieldErr("kind", kindRule(), strconv.Quote(string(c.Kind)))
	}
	// The row's fields are the kind's: any other field set is refused
	// before the kind checks its own, so that a typo in the kind cannot
	// silently drop a setting.
	for _, f := range configFields {
		if f.set(&c) && !slices.Contains(k.Fields, f.name) {
			return Config{}, "", fieldErr(f.name, "is not a setting of kind "+string(k.Name), nil)
		}
	}
	if err := k.normalize(&c); err != nil {
		return Config{}, "", err
	}
	return c, verb, nil
}

func (c *Config) normalizeSchedule() error {
	if err := checkRate(c.Rate); err != nil {
		return err
	}
	c.Burst = cmp.Or(c.Burst, new(Burst(DefaultBurst)))
	if b := float64(*c.Burst); math.IsNaN(b) || b < 1 || (b > MaxBurst && !math.IsInf(b, 1)) {
		return fieldErr("burst", "must be ≥ 1 and ≤ 1e6, or \"inf\"", b)
	}
	if err := checkDuration("max_backlog", c.MaxBacklog, 0); err != nil {
		return err
	}
	return checkDuration("max_reserve", c.MaxReserve, 1)
}

func (c *Config) normalizeSmooth() error {
	if err := checkRate(c.Rate); err != nil {
		return err
	}
	if err := checkDuration("max_reserve", c.MaxReserve, 1); err != nil {
		return err
	}
	if c.Warmup != nil && c.MaxBurstSeconds != nil {
		return fieldErr("warmup", "excludes max_burst_seconds: a limiter warms up or bursts", nil)
	}
	if c.Warmup == nil || *c.Warmup == 0 {
		// A zero warm-up is a bursting limiter without stored permits, never an
		// unlimited one.
		if c.Warmup != nil {
			c.Warmup, c.MaxBurstSeconds = nil, new(0.0)
		}
		if c.ColdFactor != nil {
			return fieldErr("cold_factor", "needs a warmup", nil)
		}
		c.MaxBurstSeconds = cmp.Or(c.MaxBurstSeconds, new(1.0))
		if v := *c.MaxBurstSeconds; math.IsNaN(v) || v < 0 || v > MaxStoredSeconds {
			return fieldErr("max_burst_seconds", "must be ≥ 0 and ≤ 1e6", v)
		}
		c.InitialPermits = cmp.Or(c.InitialPermits, new(0.0))
	} else {
		if err := checkDuration("warmup", c.Warmup, 1); err != nil {
			return err
		}
		if time.Duration(*c.Warmup).Seconds() > MaxStoredSeconds {
			return fieldErr("warmup", "must be at most 1e6 s", c.Warmup.String())
		}
		c.ColdFactor = cmp.Or(c.ColdFactor, new(3.0))
		if v := *c.ColdFactor; math.IsNaN(v) || v < 1 || v > MaxColdFactor {
			return fieldErr("cold_factor", "must be ≥ 1 and ≤ 1e6", v)
		}
	}
	if c.InitialPermits != nil {
		if v := *c.InitialPermits; math.IsNaN(v) || v < 0 || math.IsInf(v, 0) {
			return fieldErr("initial_permits", "must be ≥ 0", v)
		}
	}
	return nil
}

func (c *Config) normalizeShare() error {
	if c.Capacity == nil {
		return fieldErr("capacity", "is required for kind share: a number > 0", nil)
	}
	capacity := *c.Capacity
	if math.IsNaN(capacity) || math.IsInf(capacity, 0) || capacity <= 0 {
		return fieldErr("capacity", "must be > 0 and finite", capacity)
	}
	c.Algorithm = cmp.Or(c.Algorithm, AlgorithmFair)
	if _, ok := algorithms[c.Algorithm]; !ok {
		return fieldErr("algorithm", "must be none, static, proportional_share or fair_share", strconv.Quote(string(c.Algorithm)))
	}
	c.Lease = cmp.Or(c.Lease, D(DefaultShareLease))
	if err := checkDuration("lease", c.Lease, 1); err != nil {
		return err
	}
	c.RefreshInterval = cmp.Or(c.RefreshInterval, D(min(DefaultRefreshInterval, time.Duration(*c.Lease))))
	if err := checkDuration("refresh_interval", c.RefreshInterval, 1); err != nil {
		return err
	}
	if *c.RefreshInterval > *c.Lease {
		return fieldErr("refresh_interval", "must be ≤ lease ("+c.Lease.String()+")", c.RefreshInterval.String())
	}
	if c.SafeCapacity != nil {
		v := *c.SafeCapacity
		if math.IsNaN(v) || v < 0 || v > capacity {
			return fieldErr("safe_capacity", "must be ≥ 0 and ≤ capacity", v)
		}
		if v == 0 { // 0 is "capacity / clients", as when absent
			c.SafeCapacity = nil
		}
	}
	c.Learning = cmp.Or(c.Learning, D(time.Duration(*c.Lease)))
	return checkDuration("learning", c.Learning, 0)
}

func (c *Config) normalizeConcurrency() error {
	if c.Limit == nil {
		return fieldErr("limit", "is required for kind concurrency: a whole number ≥ 1", nil)
	}
	if v := *c.Limit; v < 1 || v > MaxLimit {
		return fieldErr("limit", "must be ≥ 1 and ≤ 1e6", v)
	}
	c.Lease = cmp.Or(c.Lease, D(DefaultConcurrencyLease))
	return checkDuration("lease", c.Lease, 1)
}

// Share returns the parameters of a share limiter.
func (c Config) Share() (ShareParams, error) {
	n, _, err := c.Normalize()
	if err != nil {
		return ShareParams{}, err
	}
	if n.Kind != KindShare {
		return ShareParams{}, fieldErr("kind", "is not share", strconv.Quote(string(n.Kind)))
	}
	return ShareParams{Capacity: *n.Capacity, Algorithm: n.Algorithm, Lease: int64(*n.Lease),
		Refresh: int64(*n.RefreshInterval), Learning: int64(*n.Learning),
		SafeCapacity: *cmp.Or(n.SafeCapacity, new(0.0))}, nil
}

// Concurrency returns the parameters of a concurrency limiter: its slots and
// the lease of each, ns.
func (c Config) Concurrency() (limit int64, lease int64, err error) {
	n, _, err := c.Normalize()
	if err != nil {
		return 0, 0, err
	}
	if n.Kind != KindConcurrency {
		return 0, 0, fieldErr("kind", "is not concurrency", strconv.Quote(string(n.Kind)))
	}
	return *n.Limit, int64(*n.Lease), nil
}

// configFields are the config fields besides kind, by JSON name, in the
// order Normalize checks them, each with whether it is set.
var configFields = []struct {
	name string
	set  func(c *Config) bool
}{
	{"spec", func(c *Config) bool { return c.Spec != "" }},
	{"rate", func(c *Config) bool { return c.Rate != 0 }},
	{"max_reserve", func(c *Config) bool { return c.MaxReserve != nil }},
	{"burst", func(c *Config) bool { return c.Burst != nil }},
	{"max_backlog", func(c *Config) bool { return c.MaxBacklog != nil }},
	{"max_burst_seconds", func(c *Config) bool { return c.MaxBurstSeconds != nil }},
	{"initial_permits", func(c *Config) bool { return c.InitialPermits != nil }},
	{"warmup", func(c *Config) bool { return c.Warmup != nil }},
	{"cold_factor", func(c *Config) bool { return c.ColdFactor != nil }},
	{"capacity", func(c *Config) bool { return c.Capacity != nil }},
	{"algorithm", func(c *Config) bool { return c.Algorithm != "" }},
	{"refresh_interval", func(c *Config) bool { return c.RefreshInterval != nil }},
	{"safe_capacity", func(c *Config) bool { return c.SafeCapacity != nil }},
	{"learning", func(c *Config) bool { return c.Learning != nil }},
	{"lease", func(c *Config) bool { return c.Lease != nil }},
	{"limit", func(c *Config) bool { return c.Limit != nil }},
	{"period", func(c *Config) bool { return c.Period != "" }},
	{"sliding", func(c *Config) bool { return c.Sliding }},
	{"zone", func(c *Config) bool { return c.Zone != "" }},
}

// checkDuration checks an optional duration field (nil: not set) against
// min and the horizon.
func checkDuration(field string, d *Duration, min Duration) error {
	if d != nil && (*d < min || int64(*d) > Horizon) {
		rule := "must be ≥ 0 and at most 2^50 ns (~13 days)"
		if min > 0 {
			rule = "must be > 0 and at most 2^50 ns (~13 days)"
		}
		return fieldErr(field, rule, d.String())
	}
	return nil
}

// Duration is a time.Duration written as a Go duration string ("250ms") in JSON
// and YAML.
type Duration time.Duration

// D returns a Duration pointer, for building configs in Go.
func D(d time.Duration) *Duration { return new(Duration(d)) }

func (d Duration) String() string { return time.Duration(d).String() }

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return &json.UnmarshalTypeError{Value: "non-string " + string(b), Type: reflect.TypeFor[Duration]()}
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		// An UnmarshalTypeError gets the field's name filled in by encoding/json.
		return &json.UnmarshalTypeError{Value: "duration " + strconv.Quote(s), Type: reflect.TypeFor[Duration]()}
	}
	*d = Duration(v)
	return nil
}

func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil || n.Kind != yaml.ScalarNode {
		return fieldErr("duration", "must be a Go duration string like \"250ms\"", strconv.Quote(n.Value))
	}
	*d = Duration(v)
	return nil
}

// Burst is a schedule's burst ratio: a number ≥ 1, or +Inf written "inf".
type Burst float64

// B returns a Burst pointer, for building configs in Go.
func B(b float64) *Burst { return new(Burst(b)) }

// Inf is the burst ratio "inf": unlimited catch-up.
var Inf = math.Inf(1)

func (b Burst) String() string { return formatBurst(float64(b)) }

func (b Burst) MarshalJSON() ([]byte, error) {
	if math.IsInf(float64(b), 1) {
		return []byte(`"inf"`), nil
	}
	return json.Marshal(float64(b))
}

func (b *Burst) UnmarshalJSON(data []byte) error {
	var f float64
	if err := json.Unmarshal(data, &f); err == nil {
		*b = Burst(f)
		return nil
	}
	var s string
	if err := json.Unmarshal(data, &s); err == nil && (s == "inf" || s == "+inf") {
		*b = Burst(math.Inf(1))
		return nil
	}
	return &json.UnmarshalTypeError{Value: string(data), Type: reflect.TypeFor[Burst]()}
}

func (b Burst) MarshalYAML() (any, error) {
	if math.IsInf(float64(b), 1) {
		return "inf", nil
	}
	return float64(b), nil
}

func (b *Burst) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParseBurst(n.Value)
	if err != nil || n.Kind != yaml.ScalarNode {
		return fieldErr("burst", "must be a number ≥ 1, or \"inf\"", strconv.Quote(n.Value))
	}
	*b = Burst(v)
	return nil
}
