package store

import (
	"fmt"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/limiter"
)

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
