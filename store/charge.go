package store

import (
	"context"
	"time"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/limiter"
)

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
