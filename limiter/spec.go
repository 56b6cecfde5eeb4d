package limiter

import (
	"math"
	"strconv"
	"strings"
)

// DefaultBurst is the burst ratio of a schedule limiter when none is given.
const DefaultBurst = 1.1

// Verb says what applying a rate spec does to a limiter that already runs.
type Verb string

const (
	VerbStart     Verb = "start"     // create, or reconfigure keeping state
	VerbConfigure Verb = "configure" // reconfigure keeping state
	VerbRestart   Verb = "restart"   // reconfigure and reset the schedule
)

// Spec is a parsed rate spec string: "<rate>[,<burst>[,<verb>]]".
type Spec struct {
	Rate  float64 // permits per second
	Burst float64 // ≥ 1, +Inf for "inf"
	Verb  Verb
}

// ParseSpec parses a rate spec: a rate, an optional burst ratio and an optional
// verb, separated by ',', ';' or ':'. Examples: "523", "12000,1.1,restart",
// "1.5K;inf", "100/s", "5000/min", "2^20". Errors name the part at fault.
func ParseSpec(s string) (Spec, error) {
	// Split at ',', ';' and ':' keeping empty parts (so "5,,1.2" is an
	// error, not burst 1.2); one trailing separator is allowed, as in
	// nosqlbench.
	parts := strings.Split(strings.NewReplacer(";", ",", ":", ",").Replace(s), ",")
	if len(parts) > 1 && parts[len(parts)-1] == "" {
		parts = parts[:len(parts)-1]
	}
	if strings.Trim(s, ",;: \t") == "" {
		return Spec{}, fieldErr("spec", "must be <rate>[,<burst>[,<verb>]]", strconv.Quote(s))
	}
	for i, p := range parts {
		if strings.TrimSpace(p) == "" {
			return Spec{}, fieldErr([]string{"rate", "burst", "spec.verb"}[min(i, 2)], "is empty", strconv.Quote(s))
		}
	}
	if len(parts) > 3 {
		return Spec{}, fieldErr("spec", "has more than three parts (<rate>,<burst>,<verb>)", strconv.Quote(s))
	}
	rate, err := ParseRate(parts[0])
	if err != nil {
		return Spec{}, err
	}
	sp := Spec{Rate: rate, Burst: DefaultBurst, Verb: VerbStart}
	if len(parts) > 1 {
		if sp.Burst, err = ParseBurst(parts[1]); err != nil {
			return Spec{}, err
		}
	}
	if len(parts) > 2 {
		switch v := Verb(strings.ToLower(strings.TrimSpace(parts[2]))); v {
		case VerbStart, VerbConfigure, VerbRestart:
			sp.Verb = v
		default:
			return Spec{}, fieldErr("spec.verb", "must be start, configure or restart", strconv.Quote(parts[2]))
		}
	}
	return sp, nil
}

// String formats the spec so that ParseSpec gives it back.
func (s Spec) String() string {
	return strconv.FormatFloat(s.Rate, 'g', -1, 64) + "," + formatBurst(s.Burst) + "," + string(s.Verb)
}

var rateUnits = map[string]float64{
	"s": 1, "sec": 1, "second": 1,
	"m": 60, "min": 60, "minute": 60,
	"h": 3600, "hour": 3600,
}

var rateSuffixes = map[byte]float64{'K': 1e3, 'M': 1e6, 'G': 1e9, 'B': 1e9, 'T': 1e12}

// ParseRate parses a rate in permits per second: a number with an optional
// suffix K, M, G (or B), T ("1.5K"), a power "a^b" ("2^20"), or "<n>/<unit>"
// with unit s, min or h ("100/s", "5000/min", "1/h"). The result lies in
// [MinRate, MaxRate].
func ParseRate(s string) (float64, error) {
	t := strings.TrimSpace(s)
	bad := func(rule string) (float64, error) {
		return 0, fieldErr("rate", rule, strconv.Quote(s))
	}
	if t == "" {
		return bad("is empty")
	}
	var r float64
	if num, unit, ok := strings.Cut(t, "/"); ok {
		per, known := rateUnits[strings.ToLower(strings.TrimSpace(unit))]
		if !known {
			return bad("unit must be s, min or h")
		}
		n, err := parseNumber(num)
		if err != nil {
			return bad("count before '/' is not a number")
		}
		r = n / per
	} else if base, exp, ok := strings.Cut(t, "^"); ok {
		b, err1 := parseNumber(base)
		e, err2 := parseNumber(exp)
		if err1 != nil || err2 != nil {
			return bad("power must be <number>^<number>")
		}
		r = math.Pow(b, e)
	} else {
		mult := 1.0
		if m, ok := rateSuffixes[strings.ToUpper(t[len(t)-1:])[0]]; ok {
			mult, t = m, t[:len(t)-1]
		}
		n, err := parseNumber(t)
		if err != nil {
			return bad("must be a number with an optional K, M, G or T suffix, a^b, or n/unit")
		}
		r = n * mult
	}
	if err := checkRate(r); err != nil {
		return 0, err
	}
	return r, nil
}

// parseNumber accepts plain decimal numbers only (no "inf", "nan" or hex).
func parseNumber(s string) (float64, error) {
	s = strings.TrimSpace(s)
	if strings.Trim(s, "0123456789.eE+-") != "" {
		return 0, strconv.ErrSyntax
	}
	return strconv.ParseFloat(s, 64)
}

func checkRate(r float64) error {
	if math.IsNaN(r) || r < MinRate || r > MaxRate {
		return fieldErr("rate", "must be ≥ 1e-6 and ≤ 1e9 permits per second", r)
	}
	return nil
}

// ParseBurst parses a burst ratio: a number ≥ 1, or "inf".
func ParseBurst(s string) (float64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	if t == "inf" || t == "+inf" {
		return math.Inf(1), nil
	}
	b, err := parseNumber(t)
	if err != nil || b < 1 || math.IsInf(b, 0) || b > MaxBurst {
		return 0, fieldErr("burst", "must be a number ≥ 1 and ≤ 1e6, or \"inf\"", strconv.Quote(s))
	}
	return b, nil
}

// MaxBurst is the largest finite burst ratio; use "inf" for unlimited catch-up.
const MaxBurst = 1e6

func formatBurst(b float64) string {
	if math.IsInf(b, 1) {
		return "inf"
	}
	return strconv.FormatFloat(b, 'g', -1, 64)
}
