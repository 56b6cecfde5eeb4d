package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/lua"
)

// Forever is the max wait of a caller that waits as long as it takes.
const Forever = time.Duration(math.MaxInt64)

// Decision is the outcome of an acquire. Time points are Unix ns on the Redis
// clock; durations are ns.
type Decision struct {
	Granted    bool
	Permits    int64
	Scheduled  int64 // when the permits were due on the schedule
	Start      int64 // when the caller may start
	Delay      int64 // Start − Now
	Lateness   int64 // Start − Scheduled
	Wait       int64 // the limiter's backlog after the call
	RetryAfter int64 // denied: how much later the same request could be granted
	Version    int64 // the limiter's config version
	Now        int64 // Redis time of the decision
	// Instance is true when a template instance answered: name is no
	// limiter but matches a template (the one Store.Resolve names, give or
	// take a template change in between), whose instance for name decided.
	// It costs nothing to ask, so callers can label by template without a
	// round trip of their own.
	Instance bool
	// Position is where the limiter's schedule stands after the call (Unix
	// ns, Redis clock): the next permit's scheduled start (smooth: its next
	// free time). The store remembers the furthest it has seen per name and
	// sends it as a floor with its next call (floors.go).
	Position int64
	// Window is true when a window limiter answered, and Limit is then its
	// permits per window (0 for other kinds, and for a window that refuses
	// every request). For a window, Wait is the permits left in it
	// (limiter.Result), Position the end of its window (the instant its
	// count resets), and a grant starts now.
	Window bool
	Limit  int64
	// Charged is true for the answer to a charge (Store.Charge,
	// Request.Charge): the permits were taken whatever Granted says, which
	// tells whether they fitted (within MaxWait: for a window, in its
	// count), and Delay is how long a new caller would wait now, after
	// them (see limiter.Params.Charge).
	Charged bool
	// Count is a window's count after a charge: what its limit is
	// measured against, past it when the permits did not fit (0 otherwise).
	Count int64
	// Shadow marks a refusal by a limiter in shadow mode that core reports
	// as granted: it took nothing (the store never sets it).
	Shadow bool
}

// Acquire asks the limiter (or the template matching name) for n permits,
// waiting at most maxWait (Forever: no bound). A granted caller should start
// at Decision.Start; a denied one may retry after RetryAfter.
func (s *Store) Acquire(ctx context.Context, name string, n int64, maxWait time.Duration) (Decision, error) {
	return s.AcquireWithin(ctx, name, n, maxWait, 0)
}

// AcquireWithin is Acquire whose caller waits at most within (> 0; 0: as
// long as ctx allows) for Redis to answer, hung or not: then it returns an
// *UnavailableError, as for a context that ended. It is the bound a server
// puts on every decision, whatever the number of callers, and cheaper than a
// context with that timeout: a call that WithBatching gathers into a batch
// takes no timer of its own. The bound travels with the call: its batch's
// round trip ends by the earliest bound of its calls, a call whose bound
// passes while it waits to be sent is answered then, and a worker drops it
// rather than send it. A direct call (and a batch's round trip) ends at the
// bound as at a context deadline: with a client that honours those
// (NewClient's do); a batched caller is answered at its bound in any case.
func (s *Store) AcquireWithin(ctx context.Context, name string, n int64, maxWait, within time.Duration) (Decision, error) {
	return s.decideWithin(ctx, Request{Name: name, Permits: n, MaxWait: maxWait}, within)
}

// decideWithin is AcquireWithin (and ChargeWithin) of req: once more when a
// calendar window needed its bounds first, all of it within the one bound.
func (s *Store) decideWithin(ctx context.Context, req Request, within time.Duration) (Decision, error) {
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

// boundsSentUntil is boundsSent ending by until (zero: as ctx allows).
func (s *Store) boundsSentUntil(ctx context.Context, name string, until time.Time, err *error) bool {
	if *err == nil {
		return false
	}
	if !until.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, until)
		defer cancel()
	}
	return s.boundsSent(ctx, name, err)
}

func (s *Store) acquireOnce(ctx context.Context, req Request, until time.Time) (Decision, error) {
	if s.batcher != nil {
		return s.batcher.acquire(ctx, req, until)
	}
	return s.acquireDirectUntil(ctx, req, until)
}

// acquireDirectUntil is acquireDirect ending by until (zero: as ctx allows)
// as at a context deadline: one round trip of its own, so a timer is cheap
// beside it.
func (s *Store) acquireDirectUntil(ctx context.Context, req Request, until time.Time) (Decision, error) {
	if !until.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, until)
		defer cancel()
	}
	return s.acquireDirect(ctx, req)
}

func (s *Store) acquireDirect(ctx context.Context, req Request) (Decision, error) {
	name, maxWait := req.Name, req.MaxWait
	tpl, err := s.match(ctx, name)
	if err != nil {
		return Decision{}, err
	}
	if err := req.check(); err != nil {
		return Decision{}, err
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
		return Decision{}, err
	}
	var o Outcome
	u := answerUnpacker(v)
	if !u.isText && u.err == nil {
		s.floors.useBinary()
	}
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

// grantCall runs grant.lua (see grant_main in lua/lib.lua).
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

func permitsErr(n int64) error {
	return &limiter.FieldError{Field: "permits", Rule: "must be ≥ 1", Value: n}
}

func waitArg(d time.Duration) int64 {
	if d == Forever {
		return -1
	}
	return max(0, int64(d))
}

// replyErr maps the error codes a rate limiter's script answers (grant,
// peek, release, reset) for op on name; a reply without a code it knows is
// ErrBadReply.
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

func abs(ep, rel int64) int64 { return ep*1000 + rel }

// decodeDecision reads grant.lua's reply (grant_main in lua/lib.lua) as far
// as a Decision goes; r.err tells whether it could.
func decodeDecision(r *reply) Decision {
	ep := r.int(3)
	d := Decision{
		Granted: r.flag(1), Permits: r.int(2), Delay: r.int(6), Lateness: r.int(7),
		Wait: r.int(8), RetryAfter: r.int(9), Version: r.int(10), Now: r.int(11) * 1000,
		Instance: r.flag(12),
	}
	if d.Granted {
		d.Scheduled, d.Start = abs(ep, r.int(4)), abs(ep, r.int(5))
	}
	return d
}

// decodeAnswer reads one limiter's answer from u, the reply of acquire.lua
// (acquire_many in lua/lib.lua): its head (code 1, now_us, version,
// instance, position) and one record per request (code, then sched, start, wait,
// retry_after), or code 3 (not found), or code 4 and a kind's name. set gets
// the Outcome of each of its m requests, once each, in order; a grant's
// permits are not in the answer (Outcome.withPermits fills them in).
func decodeAnswer(name string, u *unpacker, m int, set func(r int, o Outcome)) {
	fail := func(err error) {
		for r := range m {
			set(r, Outcome{Err: err})
		}
	}
	code := u.uint(1)
	switch {
	case u.err != nil:
		fail(fmt.Errorf("store: acquire of %q: %w", name, u.err))
		return
	case code == answerNotFound:
		fail(fmt.Errorf("limiter %q: %w", name, ErrNotFound))
		return
	case code == answerBounds:
		if now := u.int(7); u.err == nil {
			fail(&needBounds{now: now * 1000})
		} else {
			fail(fmt.Errorf("store: acquire of %q: %w", name, u.err))
		}
		return
	case code == answerOtherKind: // a limiter of a kind without a schedule
		kind := u.str()
		if u.err != nil {
			fail(fmt.Errorf("store: acquire of %q: %w", name, u.err))
			return
		}
		fail(kindConflict(name, limiter.Kind(kind)))
		return
	case code != answerOK && code != answerCounted:
		u.err = badReply("answer code %d", code)
		fail(fmt.Errorf("store: acquire of %q: %w", name, u.err))
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
		switch {
		case u.err != nil:
			set(r, Outcome{Err: fmt.Errorf("store: acquire of %q: record %d: %w", name, r, u.err)})
			continue
		case code == recordPermitsRange:
			set(r, Outcome{Err: &limiter.FieldError{Field: "permits", Rule: limiter.PermitsRule(sched)}})
			continue
		case code == recordChargeRange:
			set(r, Outcome{Err: &limiter.FieldError{Field: "permits", Rule: limiter.ChargeRule(sched)}})
			continue
		case code == recordChargedWithin || code == recordChargedOver:
			set(r, Outcome{Decision: chargedOf(code, counted, now, sched, start, wait, retry, ver, inst, pos, limit)})
			continue
		case code != recordGranted && code != recordDenied:
			u.err = badReply("record code %d", code)
			set(r, Outcome{Err: fmt.Errorf("store: acquire of %q: record %d: %w", name, r, u.err)})
			continue
		}
		// A grant's delay is its start, its lateness start − sched; a
		// denial's delay comes as start.
		d := Decision{Granted: code == recordGranted, Delay: start, Wait: wait, RetryAfter: retry,
			Version: ver, Now: now, Instance: inst, Position: pos, Window: counted, Limit: limit}
		if d.Granted {
			d.Lateness = start - sched
			d.Scheduled, d.Start = now+sched, now+start
		}
		set(r, Outcome{Decision: d})
	}
}

// withPermits is o with a grant's (or a charge's) permits, n (the answer
// does not repeat them).
func (o Outcome) withPermits(n int64) Outcome {
	if o.Err == nil && (o.Granted || o.Charged) {
		o.Permits = n
	}
	return o
}

// answerUnpacker reads acquire.lua's reply, v.
func answerUnpacker(v any) unpacker {
	s, ok := v.(string)
	if !ok {
		return unpacker{err: badReply("answer %v (%T), want a string", v, v)}
	}
	return newUnpacker(s)
}

// Grant is k permits taken from the shared schedule in one call, for a client
// pool to dispense locally. Besides the decision it carries what the pool
// needs to place each permit and to hand unused ones back.
type Grant struct {
	Decision
	Name      string
	Kind      limiter.Kind
	Slice     limiter.Slice
	Burst     float64 // +Inf for "inf"
	RemBefore int64   // the carry before the grant
	End       int64   // the schedule pointer after the grant (Unix ns): the Position
	// MaxPermits is the most permits one grant of this limiter may take
	// (its max_reserve of schedule), for the pool to size the next one.
	MaxPermits int64
	epoch      int64  // µs; Scheduled, Start and End relative to it are exact
	nonce      uint64 // tells this grant from any other (handbackKey)
}

// GrantOrigin is what of a grant only the store makes: the epoch (µs) its
// times are exact in, and the nonce that tells it from every other grant
// (handbackKey). A front end that hands grants out over a wire carries it
// with the grant and restores it (SetOrigin) before Release, so that no
// process has to keep the grants it issued.
type GrantOrigin struct {
	Epoch int64
	Nonce uint64
}

// Origin returns g's origin.
func (g *Grant) Origin() GrantOrigin { return GrantOrigin{Epoch: g.epoch, Nonce: g.nonce} }

// SetOrigin restores the origin of a grant rebuilt from its wire form. With
// the wrong epoch, the grant's end is misplaced and Release rewinds nothing
// (it counts the permits as idle); with the wrong nonce, the grant can be
// handed back once more, which rewinds only if nothing moved since.
func (g *Grant) SetOrigin(o GrantOrigin) { g.epoch, g.nonce = o.Epoch, o.Nonce }

// Params returns engine parameters able to compute costs and pace for the
// grant's permits (Slice, Burst, Kind).
func (g *Grant) Params() limiter.Params {
	return limiter.Params{Kind: g.Kind, Slice: g.Slice, Burst: g.Burst}
}

// Grant takes k permits for a client pool (see Grant), waiting at most maxWait.
func (s *Store) Grant(ctx context.Context, name string, k int64, maxWait time.Duration) (Grant, error) {
	v, err := s.grantCall(ctx, name, k, maxWait)
	if s.boundsSent(ctx, name, &err) {
		v, err = s.grantCall(ctx, name, k, maxWait)
	}
	if err != nil {
		return Grant{}, err
	}
	g, err := decodeGrant(name, v)
	if err != nil {
		return Grant{}, err
	}
	s.floors.see(name, g.Now, g.End)
	return g, nil
}

// decodeGrant reads grant.lua's reply to a grant on name: {code, granted,
// permits, ep, sched, start, delay, lateness, wait, retry_after, version,
// now_us, instance, rem_before, next_after, whole, frac, den, burst, kind,
// max_permits} (grant_main in lua/lib.lua).
func decodeGrant(name string, v []any) (Grant, error) {
	r := &reply{v: v}
	g := Grant{Decision: decodeDecision(r), Name: name, epoch: r.int(3), nonce: rand.Uint64() | 1}
	g.RemBefore = r.int(13)
	g.End = abs(g.epoch, r.int(14))
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
		return Grant{}, err
	}
	g.Position = g.End
	if limiter.Counts(g.Kind) {
		g.Window, g.Limit = true, g.MaxPermits
		if r.has(21) { // its limit (max_permits is 1 for a limit of 0)
			g.Limit = r.int(21)
		}
		if err := r.check("grant", name); err != nil {
			return Grant{}, err
		}
	}
	return g, nil
}

// Release hands back the last m permits of a grant that the pool will not use.
// If nothing was taken from the schedule since the grant, the schedule is
// rewound and the next caller gets them; otherwise their time is counted as
// idle. It reports whether the schedule was rewound. A grant is handed back
// once: a second Release of the same grant (within an hour of its end)
// changes nothing and reports false.
func (s *Store) Release(ctx context.Context, g Grant, m int64) (bool, error) {
	if !g.Granted || m <= 0 {
		return false, nil
	}
	p := g.Params()
	base := g.epoch * 1000
	r := limiter.Result{Scheduled: g.Scheduled - base, Start: g.Start - base}
	h := p.HandbackOf(r, g.RemBefore, g.End-base, g.Permits, m)
	keys, tpl, err := s.target(ctx, g.Name)
	if err != nil {
		return false, err
	}
	keys = append(keys, s.handbackKey(g))
	args := append([]any{g.Version, g.epoch, h.Sched, h.End, h.PaceUsed, h.Unused, h.Permits, h.RemUsed, h.RemAfter}, tpl.args()...)
	v, err := s.run(ctx, lua.Release, keys, args...)
	if err != nil {
		return false, err
	}
	if err := replyErr("release", g.Name, v); err != nil {
		return false, err
	}
	// {1, rewound, now_us, position, again}, or {1, 0} if not started
	rep := &reply{v: v}
	rewound := rep.flag(1)
	if rep.has(2) {
		now := rep.int(2) * 1000
		pos := now + rep.int(3)
		if rep.err == nil && rewound {
			s.floors.lower(g.Name, now, pos)
		} else if rep.err == nil {
			s.floors.see(g.Name, now, pos)
		}
	}
	return rewound, rep.check("release", g.Name)
}

// handbackKey is where release.lua records that a grant was handed back, so
// that it is handed back once: a key in the limiter's hash tag named after
// the grant's nonce, drawn when Grant took it (a Grant value made by hand has
// none: it is named after its decision time, schedule, end and size).
func (s *Store) handbackKey(g Grant) string {
	id := strconv.FormatUint(g.nonce, 36)
	if g.nonce == 0 {
		id = strconv.FormatInt(g.Now/1000, 36) + ":" + strconv.FormatInt(g.Scheduled, 36) + ":" +
			strconv.FormatInt(g.End, 36) + ":" + strconv.FormatInt(g.Permits, 36)
	}
	return s.prefix + ":{" + g.Name + "}:h:" + id
}

// WaitInfo is a limiter's live state: what GET /v1/limiters/{name}/wait returns.
type WaitInfo struct {
	Wait      int64 // backlog: schedule time nobody claimed (smooth: stored time), ns
	Delay     int64 // how long a new caller would wait now, ns
	Idle      int64 // total time forfeited, ns
	Allocated int64 // total time granted, ns
	Permits   int64 // total permits granted
	Lateness  int64 // total lateness of granted requests, ns
	Now       int64 // Redis time, Unix ns
	Version   int64
	Started   bool
	Instance  bool  // a template instance answered (see Decision.Instance)
	Position  int64 // a started limiter's position (see Decision.Position), Unix ns
	// Window is true for a window limiter, and Limit is then its permits
	// per window (0 for other kinds, and for a window that refuses every
	// request): Wait is then the permits left, Delay the time until one
	// is, and Position the end of the current window.
	Window bool
	Limit  int64
}

// Wait returns the live state of a limiter (or template instance) without
// changing it.
func (s *Store) Wait(ctx context.Context, name string) (WaitInfo, error) {
	keys, tpl, err := s.target(ctx, name)
	if err != nil {
		return WaitInfo{}, err
	}
	v, err := s.run(ctx, lua.Peek, keys, tpl.args()...)
	if err != nil {
		return WaitInfo{}, err
	}
	err = replyErr("peek", name, v)
	if s.boundsSent(ctx, name, &err) {
		if v, err = s.run(ctx, lua.Peek, keys, tpl.args()...); err == nil {
			err = replyErr("peek", name, v)
		}
	}
	if err != nil {
		return WaitInfo{}, err
	}
	return s.decodeWait(name, v)
}

// WaitMany is Wait for each of names, in one pipeline: what a sampler of
// many limiters reads at once. out[i] and errs[i] are Wait's for names[i].
// A name the pipeline could not answer (the scripts not loaded, a calendar
// window that needs its bounds first) is read again by Wait alone.
func (s *Store) WaitMany(ctx context.Context, names []string) (out []WaitInfo, errs []error) {
	out, errs = make([]WaitInfo, len(names)), make([]error, len(names))
	cmds := make([]*redis.Cmd, len(names))
	verb, fn := "evalsha", s.scripts[lua.Peek].Hash()
	if f := s.fn.function(lua.Peek); f != "" {
		verb, fn = "fcall", f
	}
	_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, name := range names {
			keys, tpl, err := s.target(ctx, name)
			if err != nil {
				errs[i] = err
				continue
			}
			cmds[i] = onceCmd(ctx, verb, fn, keys, tpl.args())
			_ = p.Process(ctx, once{cmds[i]})
		}
		return nil
	})
	for i, cmd := range cmds {
		if cmd == nil {
			continue
		}
		x, err := cmd.Result()
		var nb *needBounds
		switch v, ok := x.([]any); {
		case isNoScript(err) || fnMissing(err) || fnUnsupported(err):
			out[i], errs[i] = s.Wait(ctx, names[i])
		case err != nil:
			errs[i] = wrapErr(err)
		case !ok:
			errs[i] = fmt.Errorf("store: %s: unexpected reply %v", lua.Peek, x)
		default:
			if err := replyErr("peek", names[i], v); errors.As(err, &nb) {
				out[i], errs[i] = s.Wait(ctx, names[i])
			} else if err != nil {
				errs[i] = err
			} else {
				out[i], errs[i] = s.decodeWait(names[i], v)
			}
		}
	}
	return out, errs
}

// decodeWait reads peek.lua's reply v for name, and sees its position as
// name's floor.
func (s *Store) decodeWait(name string, v []any) (WaitInfo, error) {
	// {1, wait, delay, version, now_us, started, instance, then the totals
	// allocated, idle, permits, lateness as int64 lo, hi pairs, then a
	// started limiter's position relative to now}.
	r := &reply{v: v}
	w := WaitInfo{
		Wait: r.int(1), Delay: r.int(2), Version: r.int(3), Now: r.int(4) * 1000,
		Started: r.flag(5), Instance: r.flag(6),
		Allocated: r.total(7), Idle: r.total(9), Permits: r.total(11), Lateness: r.total(13),
	}
	if w.Started {
		w.Position = w.Now + r.int(15)
	}
	if len(v) > 16 {
		w.Window, w.Limit = true, r.int(16)
	}
	if err := r.check("peek", name); err != nil {
		return WaitInfo{}, err
	}
	if w.Started {
		s.floors.see(name, w.Now, w.Position)
	}
	return w, nil
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
	if err := CheckName(name); err != nil {
		return nil, err
	}
	return s.templates.match(ctx, s, name)
}
