package core

import (
	"errors"
	"fmt"
	"strings"

	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

// The errors callers branch on (errors.Is). Bad input is a
// *limiter.FieldError, which matches ErrInvalid.
var (
	ErrInvalid     = limiter.ErrInvalid
	ErrNotFound    = store.ErrNotFound
	ErrConflict    = store.ErrConflict
	ErrUnavailable = store.ErrUnavailable
	ErrClosed      = store.ErrClosed
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

// UnavailableError names the condition that keeps Redis from serving
// (READONLY, OOM, timeout, ...); it matches ErrUnavailable.
type UnavailableError = store.UnavailableError

// ConditionUnknownLayout is the UnavailableError condition of one limiter
// whose state a newer limitd wrote (store.ConditionUnknownLayout).
const ConditionUnknownLayout = store.ConditionUnknownLayout

// CheckName checks an input that follows the rule of limiter names
// (store.NameRule): a name, a template id, a client id. Its error is a
// *limiter.FieldError naming field.
func CheckName(field, v string) error { return store.CheckNameAs(field, v) }
