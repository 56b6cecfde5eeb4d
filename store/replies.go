package store

import (
	"errors"
	"fmt"
	"strconv"
)

// ErrBadReply means a script answered what store cannot read (too few
// elements, one of the wrong type, an unknown code): limitd's fault, never
// the caller's, and never read as a zero.
var ErrBadReply = errors.New("unreadable reply from redis")

// The scripts' reply codes: the first element of a reply. lua/lib.lua names
// them the same (OK, NOT_FOUND, …; A_* and R_* below), and so do the
// standalone scripts that answer them (share.lua, concurrency.lua,
// configure_lease.lua); TestReplyCodesMatchLua reads the Lua and compares.
const (
	replyOK           = 1
	replyNotFound     = -1  // no such limiter
	replyPermitsRange = -2  // {-2, max_permits}
	replyNotHeld      = -2  // share and concurrency: a lease not held (NOT_HELD)
	replyVersionMoved = -3  // configure's patch: the version moved
	replyKindChange   = -4  // configure's patch: a change of kind, refused
	replyOtherKind    = -5  // {-5, kind}: a limiter of another kind
	replyNeedBounds   = -6  // {-6, now_us}: a calendar window needs its bounds first (bounds.go)
	replyUpdated      = 200 // configure: applied (or nothing to change)
	replyCreated      = 201 // configure: created
)

// acquire.lua's codes (acquire_many in lua/lib.lua): an answer's head
// (A_* there) and a request's record (R_* there).
const (
	answerOK        = 1
	answerNotFound  = 3
	answerOtherKind = 4
	answerCounted   = 5 // a window's: each record has the limit in place of sched
	answerBounds    = 6 // and now_us: a calendar window needs its bounds first (bounds.go)

	recordDenied       = 0
	recordGranted      = 1
	recordPermitsRange = 2
	// A charge's (R_CHARGED_* there): taken and fitted, taken and over,
	// and n out of range (with the limiter's most in sched's place).
	recordChargedWithin = 3
	recordChargedOver   = 4
	recordChargeRange   = 5
)

func badReply(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrBadReply}, a...)...)
}

// reply reads a script's array reply by position, checking each element's
// presence and type; the first problem sticks in err.
type reply struct {
	v   []any
	err error
}

// int is element i, an integer (Redis answers a Lua number as one; a string
// of digits is read too).
func (r *reply) int(i int) int64 {
	if !r.has(i) {
		r.fail(i, "missing")
		return 0
	}
	switch x := r.v[i].(type) {
	case int64:
		return x
	case string:
		if n, err := strconv.ParseInt(x, 10, 64); err == nil {
			return n
		}
	}
	r.fail(i, "not an integer")
	return 0
}

func (r *reply) flag(i int) bool {
	n := r.int(i)
	if n != 0 && n != 1 {
		r.fail(i, "not 0 or 1")
	}
	return n == 1
}

func (r *reply) str(i int) string {
	if !r.has(i) {
		r.fail(i, "missing")
		return ""
	}
	s, ok := r.v[i].(string)
	if !ok {
		r.fail(i, "not a string")
	}
	return s
}

// float is element i, a number the scripts send as text ('%.17g', "inf").
func (r *reply) float(i int) float64 {
	s := r.str(i)
	if r.err != nil {
		return 0
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		r.fail(i, "not a number")
	}
	return f
}

// has tells whether the reply has element i and nothing went wrong before.
func (r *reply) has(i int) bool { return r.err == nil && i < len(r.v) }

func (r *reply) fail(i int, what string) {
	if r.err == nil {
		r.err = badReply("element %d of %d (%v) %s", i, len(r.v), r.v, what)
	}
}

func (r *reply) check(op, name string) error {
	if r.err != nil {
		return fmt.Errorf("store: %s of %q: %w", op, name, r.err)
	}
	return nil
}

// total is the int64 hi·2^32 + lo of a total the scripts reply in two parts,
// elements i (lo) and i+1 (hi).
func (r *reply) total(i int) int64 { return r.int(i+1)<<32 + r.int(i) }
