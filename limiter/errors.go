package limiter

import (
	"errors"
	"fmt"
	"strconv"
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

// RequestError is bad input in one request of a call over several limiters
// (an AcquireAll): Index is the request's place in the call, Field the
// field within it ("name", "permits"). It unwraps to the *FieldError that
// names the field in full ("requests[1].permits").
type RequestError struct {
	Index int
	Field string
	Err   *FieldError
}

// RequestFieldError is the *RequestError of field in the request at index.
func RequestFieldError(index int, field, rule string, value any) error {
	return &RequestError{Index: index, Field: field, Err: &FieldError{
		Field: "requests[" + strconv.Itoa(index) + "]." + field, Rule: rule, Value: value,
	}}
}

func (e *RequestError) Error() string { return e.Err.Error() }

// Unwrap gives the *FieldError, which matches ErrInvalid.
func (e *RequestError) Unwrap() error { return e.Err }
