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
