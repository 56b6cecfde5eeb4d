package store

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/lua"
)

// Acquire asks the limiter (or the template matching name) for n permits,
// waiting at most maxWait (Forever: no bound). A granted caller should start
// at Decision.Start; a denied one may retry after RetryAfter.
func (s *Store) Acquire(ctx context.Context, name string, n int64, maxWait time.Duration) (limitd.Decision, error) {
	return s.AcquireWithin(ctx, name, n, maxWait, 0)
}

// AcquireWithin is Acquire whose caller waits at most within (> 0; 0: as
// long as ctx allows) for Redis to answer, hung or not: then it returns an
// *UnavailableError, as for a context that ended. It is the bound a server
// puts on every decision, and cheaper than a context with that timeout: a
// call that WithBatching gathers into a batch takes no timer of its own (see
// batcher.go for how the bound travels with it). A direct call ends at the
// bound as at a context deadline, with a client that honours those
// (NewClient's do); a batched caller is answered at its bound in any case.
func (s *Store) AcquireWithin(ctx context.Context, name string, n int64, maxWait, within time.Duration) (limitd.Decision, error) {
	return s.decideWithin(ctx, Request{Name: name, Permits: n, MaxWait: maxWait}, within)
}

// decideWithin is AcquireWithin (and ChargeWithin) of req: once more when a
// calendar window needed its bounds first, all of it within the one bound.
func (s *Store) decideWithin(ctx context.Context, req Request, within time.Duration) (limitd.Decision, error) {
	until := untilOf(within)
	d, err := s.acquireOnce(ctx, req, until)
	if s.boundsSentUntil(ctx, req.Name, until, &err) {
		d, err = s.acquireOnce(ctx, req, until)
	}
	return d, err
}

// untilOf is the instant a bound of within (> 0; 0: none) from now ends,
// zero for none.
func untilOf(within time.Duration) time.Time {
	if within > 0 {
		return time.Now().Add(within)
	}
	return time.Time{}
}

// withUntil is ctx ending by until too (zero: as ctx allows).
func withUntil(ctx context.Context, until time.Time) (context.Context, context.CancelFunc) {
	if until.IsZero() {
		return ctx, func() {}
	}
	return context.WithDeadline(ctx, until)
}

// boundsSentUntil is boundsSent ending by until.
func (s *Store) boundsSentUntil(ctx context.Context, name string, until time.Time, err *error) bool {
	if *err == nil {
		return false
	}
	ctx, cancel := withUntil(ctx, until)
	defer cancel()
	return s.boundsSent(ctx, name, err)
}

func (s *Store) acquireOnce(ctx context.Context, req Request, until time.Time) (limitd.Decision, error) {
	if s.batcher != nil {
		return s.batcher.acquire(ctx, req, until)
	}
	return s.acquireDirect(ctx, req, until)
}

// acquireDirect decides req in a round trip of its own, ending by until as
// at a context deadline (a timer is cheap beside the round trip).
func (s *Store) acquireDirect(ctx context.Context, req Request, until time.Time) (limitd.Decision, error) {
	ctx, cancel := withUntil(ctx, until)
	defer cancel()
	name, maxWait := req.Name, req.MaxWait
	tpl, err := s.match(ctx, name)
	if err != nil {
		return limitd.Decision{}, err
	}
	if err := req.check(); err != nil {
		return limitd.Decision{}, err
	}
	n := req.arg()
	// Without a template, acquire.lua takes the state key and the pair
	// alone, or the pair and its floor; with one, the floors, a head and the
	// pair.
	fl := s.floors.floorArg(name)
	var keys []string
	var args []any
	switch {
	case tpl != nil:
		keys = []string{s.stateKey(name), s.instanceKey(name)}
		args = []any{fl, tpl.acquireHead(1), n, waitArg(maxWait)}
	case fl == noFloors:
		keys, args = []string{s.stateKey(name)}, []any{n, waitArg(maxWait)}
	default:
		keys, args = []string{s.stateKey(name)}, []any{n, waitArg(maxWait), fl}
	}
	v, err := s.runAny(ctx, lua.Acquire, keys, args...)
	if err != nil {
		return limitd.Decision{}, err
	}
	var o Outcome
	u := s.answerUnpacker(v)
	decodeAnswer(name, &u, 1, func(_ int, x Outcome) { o = x.withPermits(req.Permits) })
	if err := u.done("answer"); err != nil && o.Err == nil {
		o.Err = fmt.Errorf("store: acquire of %q: %w", name, err)
	}
	if o.Err == nil {
		s.floors.see(name, o.Now, o.Position)
	}
	return o.Decision, o.Err
}

// acquireHead is the head acquire.lua takes for one limiter's m requests: m,
// or with a template m, its version, its idle TTL and its parameters in one
// string.
func (t *compiledTemplate) acquireHead(m int) any {
	switch {
	case t == nil:
		return m
	case m == 1:
		return t.head1
	}
	return strconv.Itoa(m) + " " + t.head
}

func permitsErr(n int64) error {
	return &limiter.FieldError{Field: "permits", Rule: "must be ≥ 1", Value: n}
}

func waitArg(d time.Duration) int64 {
	if d == limitd.Forever {
		return -1
	}
	return max(0, int64(d))
}

// target returns the keys a per-name script takes and the template that
// applies should the name not be a limiter (nil if none matches).
func (s *Store) target(ctx context.Context, name string) ([]string, *compiledTemplate, error) {
	tpl, err := s.match(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	return []string{s.stateKey(name), s.instanceKey(name)}, tpl, nil
}

// match checks name and returns the template that applies should it not be
// a limiter (nil if none matches).
func (s *Store) match(ctx context.Context, name string) (*compiledTemplate, error) {
	if err := limitd.CheckName(name); err != nil {
		return nil, err
	}
	return s.templates.match(ctx, s, name)
}

// Reset starts a new schedule now: the backlog (smooth: stored permits) is
// forfeited, totals are kept.
func (s *Store) Reset(ctx context.Context, name string) (version int64, err error) {
	keys, tpl, err := s.target(ctx, name)
	if err != nil {
		return 0, err
	}
	v, err := s.run(ctx, lua.Reset, keys, tpl.args()...)
	if err != nil {
		return 0, err
	}
	if err := replyErr("reset", name, v); err != nil { // {-1} has no version
		return 0, err
	}
	r := &reply{v: v}
	version = r.int(1)
	if r.has(2) { // a started limiter's position
		now := r.int(2) * 1000
		if pos := now + r.int(3); r.err == nil {
			s.floors.see(name, now, pos)
		}
	}
	return version, r.check("reset", name)
}

// Charge takes n permits (≥ 0) of the limiter, or of the template instance
// for name, whatever is left: usage recorded after the fact
// (limiter/charge.go), going where an acquire goes. The Decision is Charged;
// Granted says whether the permits were there to take now (a window: its
// count had room for them), and Delay how long a new caller would wait
// after the charge. A charge of 0 is a check, which also starts a limiter
// not yet started. n is bounded by the horizon, not by max_reserve: at most
// 2^50 ns of schedule (a window: 2^50 permits); more is a
// *limiter.FieldError naming permits. A lease limiter is ErrConflict.
func (s *Store) Charge(ctx context.Context, name string, n int64) (limitd.Decision, error) {
	return s.ChargeWithin(ctx, name, n, 0)
}

// ChargeWithin is Charge whose caller waits at most within (> 0; 0: as long
// as ctx allows) for Redis to answer, as AcquireWithin does.
func (s *Store) ChargeWithin(ctx context.Context, name string, n int64, within time.Duration) (limitd.Decision, error) {
	return s.decideWithin(ctx, Request{Name: name, Permits: n, Charge: true}, within)
}

// check is the store's own check of a request's permits (the scripts check
// the limiter's own bounds).
func (r *Request) check() error {
	switch {
	case !r.Charge && r.Permits < 1:
		return permitsErr(r.Permits)
	case r.Charge && (r.Permits < 0 || r.Permits > limiter.Horizon):
		return &limiter.FieldError{Field: "permits", Rule: limiter.ChargeRule(limiter.Horizon), Value: r.Permits}
	}
	return nil
}

// arg is the request's permits as acquire.lua takes them: a charge of n as
// -1 - n.
func (r *Request) arg() int64 {
	if r.Charge {
		return -1 - r.Permits
	}
	return r.Permits
}

// chargedOf is the Decision a charge's record tells (decodeAnswer): its
// retry_after holds the limiter's delay after the charge (a window's: its
// start does, and its retry_after the count after the charge).
func chargedOf(code int64, window bool, now, sched, start, wait, retry, ver int64, inst bool, pos, limit int64) limitd.Decision {
	d := limitd.Decision{Charged: true, Granted: code == recordChargedWithin, Wait: wait, Version: ver, Now: now,
		Instance: inst, Position: pos, Window: window, Limit: limit}
	if window {
		d.Delay, d.Scheduled, d.Start, d.Count = start, now, now, retry
		return d
	}
	d.Delay, d.Lateness = retry, max(0, start-sched)
	d.Scheduled, d.Start = now+sched, now+start
	return d
}
