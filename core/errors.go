package core

import (
	"errors"
	"fmt"
	"strings"

	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

// The errors callers branch on (errors.Is), the domain's (limiter's): every
// layer names them the same. Bad input is a *limiter.FieldError, which
// matches ErrInvalid; a store that is closed answers ErrUnavailable.
var (
	ErrInvalid     = limiter.ErrInvalid
	ErrNotFound    = limiter.ErrNotFound
	ErrConflict    = limiter.ErrConflict
	ErrUnavailable = limiter.ErrUnavailable
)

// NotHeldError is a lease or a client's capacity that an existing limiter
// does not hold (released already, or expired). It matches ErrNotFound, and
// names the input at fault (lease_id, client_id). When the limiter itself
// does not exist, the store's ErrNotFound is returned instead.
type NotHeldError struct {
	Field  string
	Detail string
	Err    error // the store's ErrNotFound
}

func (e *NotHeldError) Error() string { return e.Detail }
func (e *NotHeldError) Unwrap() error { return e.Err }

// invalid is bad input naming field: "field: rule (got value)" (value nil:
// no "got").
func invalid(field, rule string, value any) error {
	return &limiter.FieldError{Field: field, Rule: rule, Value: value}
}

// specFault names "spec" when a config given as a rate spec string is at
// fault: limiter reports the spec's parts as rate, burst and spec.verb, but
// the caller sent only "spec". prefix is the config's path in the request
// ("limiter" inside a template).
func specFault(err error, spec, prefix string) error {
	var fe *limiter.FieldError
	if spec == "" || !errors.As(err, &fe) {
		return err
	}
	f := fe.Field
	if prefix != "" {
		f = strings.TrimPrefix(f, prefix+".")
	}
	switch {
	case f == "rate", f == "burst", strings.HasPrefix(f, "spec."):
		return &limiter.FieldError{Field: join(prefix, "spec"), Rule: fe.Field + ": " + fe.Rule, Value: fe.Value}
	}
	return err
}

func join(prefix, s string) string {
	if prefix == "" {
		return s
	}
	return prefix + "." + s
}

// quoted is a string input as an error repeats it.
func quoted(s string) string { return fmt.Sprintf("%q", s) }

// Unavailability is why Redis could not serve a call that failed with
// ErrUnavailable.
type Unavailability struct {
	// Condition is the condition in Redis' own words where Redis said it
	// (READONLY, OOM, LOADING, ...) or in a few plain ones (timeout,
	// connection refused, ...).
	Condition string
	// Description says in one sentence what the condition means and what to
	// look at, with no part of the underlying error's text (no address, no
	// password): safe to show to any client.
	Description string
	// OneLimiter: the condition is one limiter's alone (its state in a
	// layout this limitd does not read), where every other is Redis's.
	OneLimiter bool
}

// UnavailabilityOf tells why err (matching ErrUnavailable) happened; ok is
// false when err names no condition.
func UnavailabilityOf(err error) (u Unavailability, ok bool) {
	var ue *store.UnavailableError
	if !errors.As(err, &ue) {
		return Unavailability{}, false
	}
	return Unavailability{Condition: ue.Condition, Description: ue.Describe(),
		OneLimiter: ue.Condition == store.ConditionUnknownLayout}, true
}

// CheckName checks an input that follows the rule of limiter names
// (store.NameRule): a name, a template id, a client id. Its error is a
// *limiter.FieldError naming field.
func CheckName(field, v string) error { return store.CheckNameAs(field, v) }
