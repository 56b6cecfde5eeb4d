package limiter

import (
	"errors"
	"fmt"
)

// Errors callers branch on with errors.Is.
var (
	// ErrInvalid marks bad input: a config, spec or argument that breaks a rule.
	// The error also unwraps to a *FieldError naming the field and the rule.
	ErrInvalid = errors.New("invalid")
	// ErrNotFound is returned for a limiter or template that does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict means a change contradicts the limiter as it is (a kind
	// change through a patch), or a call is not one the limiter's kind takes
	// (an acquire of a share limiter, a capacity of a schedule...).
	ErrConflict = errors.New("conflict")
	// ErrUnavailable means the shared state could not be reached: Redis did
	// not answer (down, timed out, failing over), or the store is closed.
	ErrUnavailable = errors.New("redis unavailable")
)

// FieldError names the field at fault and the rule it breaks.
type FieldError struct {
	Field string // e.g. "rate", "burst", "permits"
	Rule  string // e.g. "must be > 0 and ≤ 1e9"
	Value any    // the offending value, if any
}

func (e *FieldError) Error() string {
	if e.Value == nil {
		return fmt.Sprintf("%s: %s", e.Field, e.Rule)
	}
	return fmt.Sprintf("%s: %s (got %v)", e.Field, e.Rule, e.Value)
}

// Is makes every FieldError match ErrInvalid.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

func fieldErr(field, rule string, value any) error {
	return &FieldError{Field: field, Rule: rule, Value: value}
}
