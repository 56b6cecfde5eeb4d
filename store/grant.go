package store

import (
	"context"
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/lua"
)

func (s *Store) grantCall(ctx context.Context, name string, n int64, maxWait time.Duration) ([]any, error) {
	keys, tpl, err := s.target(ctx, name)
	if err != nil {
		return nil, err
	}
	if n < 1 {
		return nil, permitsErr(n)
	}
	args := append([]any{n, waitArg(maxWait), tpl.idleTTLms(), s.floors.floorArg(name)}, tpl.args()...)
	v, err := s.run(ctx, lua.Grant, keys, args...)
	if err != nil {
		return nil, err
	}
	return v, replyErr("grant", name, v)
}

// Grant takes k permits for a client pool (see Grant), waiting at most maxWait.
func (s *Store) Grant(ctx context.Context, name string, k int64, maxWait time.Duration) (limitd.Grant, error) {
	v, err := s.grantCall(ctx, name, k, maxWait)
	if s.boundsSent(ctx, name, &err) {
		v, err = s.grantCall(ctx, name, k, maxWait)
	}
	if err != nil {
		return limitd.Grant{}, err
	}
	g, err := decodeGrant(name, v)
	if err != nil {
		return limitd.Grant{}, err
	}
	s.floors.see(name, g.Now, g.End)
	return g, nil
}

// decodeGrant reads grant.lua's reply to a grant on name: {code, granted,
// permits, ep, sched, start, delay, lateness, wait, retry_after, version,
// now_us, instance, rem_before, next_after, whole, frac, den, burst, kind,
// max_permits[, limit]}.
func decodeGrant(name string, v []any) (limitd.Grant, error) {
	r := &reply{v: v}
	base := r.int(3) * 1000 // the epoch, µs
	g := limitd.Grant{Name: name, Decision: limitd.Decision{
		Granted: r.flag(1), Permits: r.int(2), Delay: r.int(6), Lateness: r.int(7),
		Wait: r.int(8), RetryAfter: r.int(9), Version: r.int(10), Now: r.int(11) * 1000,
		Instance: r.flag(12),
	}}
	if g.Granted {
		g.Scheduled, g.Start = base+r.int(4), base+r.int(5)
	}
	g.SetOrigin(limitd.GrantOrigin{Epoch: base / 1000, Nonce: rand.Uint64() | 1})
	g.RemBefore = r.int(13)
	g.End = base + r.int(14)
	g.Slice = limiter.Slice{Whole: r.int(15), Frac: r.int(16), Den: r.int(17)}
	g.Burst = r.float(18)
	if g.Burst == 0 { // "inf" travels as 0
		g.Burst = math.Inf(1)
	}
	g.Kind = limiter.Kind(r.str(19))
	g.MaxPermits = r.int(20)
	if r.err == nil && (g.Slice.Den < 1 || g.MaxPermits < 1 || !limiter.IsRate(g.Kind)) {
		r.err = badReply("grant of kind %q, slice %+v, max permits %d", g.Kind, g.Slice, g.MaxPermits)
	}
	if err := r.check("grant", name); err != nil {
		return limitd.Grant{}, err
	}
	g.Position = g.End
	if limiter.Counts(g.Kind) {
		g.Window, g.Limit = true, g.MaxPermits
		if r.has(21) { // its limit (max_permits is 1 for a limit of 0)
			g.Limit = r.int(21)
		}
	}
	return g, r.check("grant", name)
}

// Release hands back the last m permits of a grant that the pool will not
// use, and reports whether the schedule was rewound (nothing was taken from
// it since the grant) rather than their time counted as idle. A second
// Release of the same grant (within an hour of its end) changes nothing.
func (s *Store) Release(ctx context.Context, g limitd.Grant, m int64) (bool, error) {
	if !g.Granted || m <= 0 {
		return false, nil
	}
	p, o := g.Params(), g.Origin()
	base := o.Epoch * 1000
	r := limiter.Result{Scheduled: g.Scheduled - base, Start: g.Start - base}
	h := p.HandbackOf(r, g.RemBefore, g.End-base, g.Permits, m)
	keys, tpl, err := s.target(ctx, g.Name)
	if err != nil {
		return false, err
	}
	keys = append(keys, s.handbackKey(g))
	args := append([]any{g.Version, o.Epoch, h.Sched, h.End, h.PaceUsed, h.Unused, h.Permits, h.RemUsed, h.RemAfter}, tpl.args()...)
	v, err := s.run(ctx, lua.Release, keys, args...)
	if err != nil {
		return false, err
	}
	if err := replyErr("release", g.Name, v); err != nil {
		return false, err
	}
	rep := &reply{v: v} // {1, rewound, now_us, position, again}, or {1, 0} if not started
	rewound := rep.flag(1)
	if rep.has(2) {
		now := rep.int(2) * 1000
		pos := now + rep.int(3)
		if rep.err == nil { // after a rewind, the process's own floor must not undo it
			s.floors.put(g.Name, now, pos, rewound)
		}
	}
	return rewound, rep.check("release", g.Name)
}

// handbackKey is where release.lua records that a grant was handed back: a
// key named after the grant's nonce (one made by hand has none: after its
// decision time, schedule, end and size).
func (s *Store) handbackKey(g limitd.Grant) string {
	nonce := g.Origin().Nonce
	id := strconv.FormatUint(nonce, 36)
	if nonce == 0 {
		id = strconv.FormatInt(g.Now/1000, 36) + ":" + strconv.FormatInt(g.Scheduled, 36) + ":" +
			strconv.FormatInt(g.End, 36) + ":" + strconv.FormatInt(g.Permits, 36)
	}
	return s.prefix + ":{" + g.Name + "}:h:" + id
}
