package store

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/limiter"
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

// replyErr maps the error codes a rate limiter's script answers for op on
// name; a reply without a code it knows is ErrBadReply.
func replyErr(op, name string, v []any) error {
	r := reply{v: v}
	switch r.int(0) {
	case replyOK:
		return nil
	case replyNotFound:
		return fmt.Errorf("limiter %q: %w", name, ErrNotFound)
	case replyPermitsRange:
		if maxn := r.int(1); r.err == nil {
			return &limiter.FieldError{Field: "permits", Rule: limiter.PermitsRule(maxn)}
		}
	case replyOtherKind: // a limiter of a kind without a schedule (share, concurrency)
		if kind := r.str(1); r.err == nil {
			return kindConflict(name, limiter.Kind(kind))
		}
	case replyNeedBounds:
		if now := r.int(1); r.err == nil {
			return &needBounds{now: now * 1000}
		}
	default:
		r.fail(0, "not a reply code")
	}
	return r.check(op, name)
}

// decodeAnswer reads one limiter's answer from u, the reply of acquire.lua
// (acquire_many in lua/lib.lua): its head (code, now_us, version, instance,
// position) and one record per request (code, sched, start, wait,
// retry_after), or an error code. set gets the Outcome of each of its m
// requests, in order, without a grant's permits (Outcome.withPermits).
func decodeAnswer(name string, u *unpacker, m int, set func(r int, o Outcome)) {
	code := u.uint(1)
	var err error
	switch {
	case u.err != nil:
	case code == answerNotFound:
		err = fmt.Errorf("limiter %q: %w", name, ErrNotFound)
	case code == answerBounds:
		if now := u.int(7); u.err == nil {
			err = &needBounds{now: now * 1000}
		}
	case code == answerOtherKind: // a limiter of a kind without a schedule
		if kind := u.str(); u.err == nil {
			err = kindConflict(name, limiter.Kind(kind))
		}
	case code != answerOK && code != answerCounted:
		u.err = badReply("answer code %d", code)
	}
	if u.err != nil {
		err = fmt.Errorf("store: acquire of %q: %w", name, u.err)
	}
	if err != nil {
		for r := range m {
			set(r, Outcome{Err: err})
		}
		return
	}
	counted := code == answerCounted
	now, ver, inst := u.int(7)*1000, u.int(7), u.uint(1) == 1
	pos := now + u.int(7)
	for r := range m {
		code := u.uint(1)
		sched, start, wait, retry := u.int(7), u.int(7), u.int(7), u.int(7)
		var limit int64
		if counted && code != recordPermitsRange { // the limit, and a grant starts now
			limit, sched = sched, 0
		}
		var o Outcome
		switch {
		case u.err != nil:
			o.Err = fmt.Errorf("store: acquire of %q: record %d: %w", name, r, u.err)
		case code == recordPermitsRange:
			o.Err = &limiter.FieldError{Field: "permits", Rule: limiter.PermitsRule(sched)}
		case code == recordChargeRange:
			o.Err = &limiter.FieldError{Field: "permits", Rule: limiter.ChargeRule(sched)}
		case code == recordChargedWithin || code == recordChargedOver:
			o.Decision = chargedOf(code, counted, now, sched, start, wait, retry, ver, inst, pos, limit)
		case code != recordGranted && code != recordDenied:
			u.err = badReply("record code %d", code)
			o.Err = fmt.Errorf("store: acquire of %q: record %d: %w", name, r, u.err)
		default:
			// A grant's delay is its start, its lateness start − sched; a
			// denial's delay comes as start.
			o.Decision = limitd.Decision{Granted: code == recordGranted, Delay: start, Wait: wait, RetryAfter: retry,
				Version: ver, Now: now, Instance: inst, Position: pos, Window: counted, Limit: limit}
			if o.Granted {
				o.Lateness = max(0, start-sched) // a start at once, ahead of its slot (burst inf), is on time
				o.Scheduled, o.Start = now+sched, now+start
			}
		}
		set(r, o)
	}
}

// withPermits is o with a grant's (or a charge's) permits, n.
func (o Outcome) withPermits(n int64) Outcome {
	if o.Err == nil && (o.Granted || o.Charged) {
		o.Permits = n
	}
	return o
}

// answerUnpacker reads acquire.lua's reply, v; a binary one switches the
// floors to binary.
func (s *Store) answerUnpacker(v any) unpacker {
	str, ok := v.(string)
	if !ok {
		return unpacker{err: badReply("answer %v (%T), want a string", v, v)}
	}
	u := newUnpacker(str)
	if !u.isText {
		s.floors.useBinary()
	}
	return u
}
