package limitd

import (
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/limitd/limitd/limiter"
)

// NameRule is the rule of limiter names, and of every other name that
// shares their alphabet (template ids, share client ids, list cursors).
const NameRule = "must match ^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"

// CheckName reports whether name is a valid limiter name (NameRule); a byte
// loop, not a regexp: it is on every call's path.
func CheckName(name string) error { return CheckNameAs("name", name) }

// CheckNameAs is CheckName for an input that follows the same rule under
// another name (a template id, a client id): its error is a
// *limiter.FieldError naming field.
func CheckNameAs(field, v string) error {
	ok := len(v) >= 1 && len(v) <= 128 && isAlnum(v[0])
	for i := 1; ok && i < len(v); i++ {
		c := v[i]
		ok = isAlnum(c) || c == '.' || c == '_' || c == ':' || c == '-'
	}
	if !ok {
		return &limiter.FieldError{Field: field, Rule: NameRule, Value: fmt.Sprintf("%q", v)}
	}
	return nil
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z'
}

// LeaseIDLen is the length of a concurrency slot's lease id: 16 random
// bytes in lowercase hex.
const LeaseIDLen = 32

// CheckLeaseID accepts what a concurrency limiter's acquire hands out:
// LeaseIDLen lowercase hex digits. Its error is a *limiter.FieldError
// naming lease_id.
func CheckLeaseID(id string) error {
	ok := len(id) == LeaseIDLen
	for i := 0; ok && i < len(id); i++ {
		c := id[i]
		ok = c >= '0' && c <= '9' || c >= 'a' && c <= 'f'
	}
	if !ok {
		return &limiter.FieldError{Field: "lease_id", Rule: "must be the lease_id an acquire answered: " + strconv.Itoa(LeaseIDLen) + " lowercase hex digits", Value: fmt.Sprintf("%q", id)}
	}
	return nil
}

// Template makes limiters on demand: a name that is not a limiter but matches
// Pattern (path.Match globs: * and ?) gets its own state with the template's
// config on first use. Templates are tried by ascending Order (then ID).
// An instance's state is a key with a TTL (see DefaultIdleTTL), so that idle
// names cost nothing.
type Template struct {
	ID      string            `json:"id"`
	Pattern string            `json:"pattern"`
	Order   int               `json:"order"`
	IdleTTL *limiter.Duration `json:"idle_ttl,omitempty"` // default DefaultIdleTTL after the debt
	Limiter limiter.Config    `json:"limiter"`
	Version int64             `json:"version"`
	// Description is what displays call the template instead of its id
	// (an Envoy rule's descriptors: "mongo_cps.database_users").
	Description string `json:"description,omitempty"`
	// FixedWindows: the instances count their hits as the Envoy reference
	// does, in a plain counter per window of the limiter's limit and period
	// aligned to the Unix epoch (FixedWindow), not in their state, whichever
	// front end counts them. Set by rate limit service rules only.
	FixedWindows bool `json:"fixed_windows,omitempty"`
}

// DefaultIdleTTL is how long a template instance is kept once its debt is
// paid when its template sets no idle_ttl (an idle_ttl counts from its last
// use), less once its state is no different from a fresh one. An instance is
// never dropped while it owes (a fresh one would grant again what it
// granted): its TTL covers its debt first, whatever the idle TTL.
const DefaultIdleTTL = 10 * time.Minute

const maxDescription = 200 // characters

var patternRE = regexp.MustCompile(`^[A-Za-z0-9*?][A-Za-z0-9._:*?-]{0,127}$`)

// Normalize checks a template and returns it with its config in canonical
// form, as the store keeps it. Its errors are *limiter.FieldError naming the
// template's field (id, pattern, limiter.rate, ...).
func (t Template) Normalize() (Template, error) {
	if err := CheckNameAs("id", t.ID); err != nil {
		return Template{}, err
	}
	if _, err := path.Match(t.Pattern, ""); err != nil || !patternRE.MatchString(t.Pattern) {
		return Template{}, &limiter.FieldError{Field: "pattern", Rule: "must be name characters with * and ? wildcards", Value: fmt.Sprintf("%q", t.Pattern)}
	}
	if n := utf8.RuneCountInString(t.Description); n > maxDescription || !utf8.ValidString(t.Description) ||
		strings.ContainsFunc(t.Description, unicode.IsControl) {
		return Template{}, &limiter.FieldError{Field: "description", Rule: fmt.Sprintf("must be at most %d characters of text, without control characters", maxDescription), Value: n}
	}
	if t.IdleTTL != nil && (*t.IdleTTL <= 0 || int64(*t.IdleTTL) > limiter.Horizon) {
		return Template{}, &limiter.FieldError{Field: "idle_ttl", Rule: "must be > 0 and at most ~13 days", Value: t.IdleTTL.String()}
	}
	norm, _, err := t.Limiter.Normalize()
	if err != nil {
		if fe, ok := err.(*limiter.FieldError); ok {
			fe2 := *fe
			fe2.Field = "limiter." + fe.Field
			return Template{}, &fe2
		}
		return Template{}, err
	}
	if !limiter.IsRate(norm.Kind) {
		return Template{}, &limiter.FieldError{Field: "limiter.kind", Rule: "must be a rate kind (" + limiter.RateKinds() + "): templates make rate limiters", Value: fmt.Sprintf("%q", norm.Kind)}
	}
	t.Limiter = norm
	if _, _, ok := t.FixedWindow(); t.FixedWindows && !ok {
		return Template{}, &limiter.FieldError{Field: "fixed_windows", Rule: "only a window kind's template with a limit and a fixed period of whole milliseconds counts in fixed windows", Value: fmt.Sprintf("%q", norm.Kind)}
	}
	return t, nil
}

// FixedWindow is the window t's instances count in when FixedWindows is
// set: limit hits per period (ok false: t's limiter has no such window).
func (t Template) FixedWindow() (limit int64, period time.Duration, ok bool) {
	c := t.Limiter
	if !limiter.Counts(c.Kind) || c.Limit == nil || c.Sliding {
		return 0, 0, false
	}
	period, err := time.ParseDuration(c.Period)
	if err != nil || period <= 0 || period%time.Millisecond != 0 {
		return 0, 0, false
	}
	return *c.Limit, period, true
}
