// Package envvar reads a configuration from environment variables and words
// its errors by variable: every error it makes is an *Error that names the
// variable, so that a caller that must know which variable failed (limitd
// ratelimit, which says so under the reference server's name) reads Name,
// not the text.
package envvar

import (
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/caarlos0/env/v11"
)

// Error is a variable whose value is refused: Name is the variable, Err
// why. As, when set, is the variable Name set that is at fault ("NEAR_LIMIT_RATIO
// (as LIMITD_GRPC_NEAR_LIMIT_RATIO): …").
type Error struct {
	Name string
	As   string
	Err  error
}

func (e *Error) Error() string {
	if e.As != "" {
		return fmt.Sprintf("%s (as %s): %v", e.Name, e.As, e.Err)
	}
	return fmt.Sprintf("%s: %v", e.Name, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf is the *Error of variable name, its reason formatted as
// fmt.Errorf does.
func Errorf(name, format string, args ...any) error {
	return &Error{Name: name, Err: fmt.Errorf(format, args...)}
}

// Parse reads T from environ (the environment as a map) by T's env tags
// (github.com/caarlos0/env). A value that does not parse is an *Error that
// names its variable and what it must be.
func Parse[T any](environ map[string]string) (T, error) {
	v, err := env.ParseAsWithOptions[T](env.Options{Environment: environ})
	var pe env.ParseError
	if err == nil || !errors.As(err, &pe) {
		return v, err
	}
	f, _ := reflect.TypeFor[T]().FieldByName(pe.Name)
	key := f.Tag.Get("env")
	got := environ[key]
	switch k := pe.Type.Kind(); {
	case k == reflect.Bool:
		return v, Errorf(key, "must be true or false (got %q)", got)
	case pe.Type == reflect.TypeFor[time.Duration]():
		return v, Errorf(key, "must be a duration like 30s or 5m, or 0 (got %q)", got)
	case k >= reflect.Uint && k <= reflect.Uint64:
		return v, Errorf(key, "must be a whole number from 0 to %d (got %q)", ^uint64(0)>>(64-pe.Type.Bits()), got)
	case k == reflect.Int:
		return v, Errorf(key, "must be a whole number (got %q)", got)
	case k == reflect.Float64:
		return v, Errorf(key, "must be a number (got %q)", got)
	}
	return v, Errorf(key, "%v (got %q)", pe.Err, got)
}
