package core

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

// The errors callers branch on (errors.Is), the domain's (limiter's).
var (
	ErrInvalid     = limiter.ErrInvalid
	ErrNotFound    = limiter.ErrNotFound
	ErrConflict    = limiter.ErrConflict
	ErrUnavailable = limiter.ErrUnavailable
)

// NotHeldError is a lease or a client's capacity that an existing limiter
// does not hold (released already, or expired). It matches ErrNotFound and
// names the input at fault (lease_id, client_id).
type NotHeldError struct {
	Field  string
	Detail string
	Err    error // the store's ErrNotFound
}

func (e *NotHeldError) Error() string { return e.Detail }
func (e *NotHeldError) Unwrap() error { return e.Err }

// invalid is bad input naming field (value nil: none to repeat).
func invalid(field, rule string, value any) error {
	return &limiter.FieldError{Field: field, Rule: rule, Value: value}
}

// specFault names "spec" when a config given as a spec string is at fault
// (limiter names its parts: rate, burst, spec.verb). prefix is the config's
// path in the request ("limiter" inside a template).
func specFault(err error, spec, prefix string) error {
	var fe *limiter.FieldError
	if spec == "" || !errors.As(err, &fe) {
		return err
	}
	f, field := fe.Field, "spec"
	if prefix != "" {
		f, field = strings.TrimPrefix(f, prefix+"."), prefix+".spec"
	}
	if f == "rate" || f == "burst" || strings.HasPrefix(f, "spec.") {
		return &limiter.FieldError{Field: field, Rule: fe.Field + ": " + fe.Rule, Value: fe.Value}
	}
	return err
}

// The causes of an ErrUnavailable that the operator fixes in a known way
// (errors.Is): at most one holds for an error.
var (
	// ErrRedisUnauthorized: Redis refused limitd's credentials (WRONGPASS,
	// NOAUTH) or its user's permissions forbid a command or key (NOPERM).
	ErrRedisUnauthorized = store.ErrUnauthorized
	ErrRedisLoading      = store.ErrLoading  // Redis is loading its dataset (LOADING)
	ErrRedisReadOnly     = store.ErrReadOnly // limitd writes to a read-only replica (READONLY)
)

// RedisCause is which of the known causes keeps Redis from serving.
type RedisCause int

// The causes: RedisCauseOther for every condition without a known fix.
const (
	RedisCauseOther RedisCause = iota
	RedisCauseUnauthorized
	RedisCauseLoading
	RedisCauseReadOnly
)

// RedisCauseOf is the known cause of err (RedisCauseOther when it has none,
// or does not match ErrUnavailable).
func RedisCauseOf(err error) RedisCause {
	switch {
	case !errors.Is(err, ErrUnavailable):
		return RedisCauseOther
	case errors.Is(err, ErrRedisUnauthorized):
		return RedisCauseUnauthorized
	case errors.Is(err, ErrRedisLoading):
		return RedisCauseLoading
	case errors.Is(err, ErrRedisReadOnly):
		return RedisCauseReadOnly
	}
	return RedisCauseOther
}

// Unavailability is why Redis could not serve a call that failed with
// ErrUnavailable.
type Unavailability struct {
	// Condition is the condition in Redis' own words where Redis said it
	// (READONLY, OOM, LOADING, WRONGPASS, NOPERM, ...) or in a few plain
	// ones (timeout, connection refused, ...).
	Condition string
	// Description says in one sentence what the condition means and what to
	// look at, with no part of the underlying error's text: safe to show to
	// any client.
	Description string
	Cause       RedisCause
	// Fix says what the operator changes for a known cause, naming the
	// setting (RedisSettings); "" from UnavailabilityOf.
	Fix string
	// OneLimiter: the condition is one limiter's alone (its state in a
	// layout this limitd does not read).
	OneLimiter bool
}

// UnavailabilityOf tells why err (matching ErrUnavailable) happened; ok is
// false when err names no condition.
func UnavailabilityOf(err error) (u Unavailability, ok bool) {
	var ue *store.UnavailableError
	if !errors.As(err, &ue) {
		return Unavailability{}, false
	}
	return Unavailability{Condition: ue.Condition, Description: ue.Describe(), Cause: RedisCauseOf(err),
		OneLimiter: ue.Condition == store.ConditionUnknownLayout}, true
}

// RedisSettings name the settings through which the operator gives limitd
// its Redis, for the fixes an Unavailability names.
type RedisSettings struct {
	Address     string // names the Redis to use (default LIMITD_REDIS_URL)
	Credentials string // holds the user name and password (default Address)
}

// Unavailability is UnavailabilityOf with the fix of a known cause, in the
// words of the service's RedisSettings.
func (s *Service) Unavailability(err error) (Unavailability, bool) {
	u, ok := UnavailabilityOf(err)
	if !ok {
		return u, false
	}
	r := s.redis
	switch {
	case u.Condition == "NOPERM":
		u.Fix = "give limitd's Redis user the commands and keys it needs (docs/reliability.md), or name another user in " + r.Credentials
	case u.Cause == RedisCauseUnauthorized:
		u.Fix = "set the user name and password Redis expects in " + r.Credentials
	case u.Cause == RedisCauseLoading:
		u.Fix = "wait until Redis has loaded its data; nothing to change in limitd"
	case u.Cause == RedisCauseReadOnly:
		u.Fix = "point " + r.Address + " at the master (or a Sentinel or cluster URL that finds it)"
	}
	return u, true
}

// explainTimeout bounds the probe Explain sends.
const explainTimeout = 500 * time.Millisecond

// Explain is err, or, when err is a lost connection with no named cause,
// the named cause a probe finds: Redis closes the connection of a client
// that did not authenticate once it sends a long request, where a plain
// write (Ready) hears NOAUTH.
func (s *Service) Explain(ctx context.Context, err error) error {
	u, ok := UnavailabilityOf(err)
	if !ok || u.Cause != RedisCauseOther || u.Condition != "connection lost" {
		return err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), explainTimeout)
	defer cancel()
	if rerr := s.store.Ready(ctx); RedisCauseOf(rerr) != RedisCauseOther {
		return rerr
	}
	return err
}
