package store

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

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
}

// Acquire asks the limiter (or the template matching name) for n permits,
// waiting at most maxWait (Forever: no bound). A granted caller should start
// at Decision.Start; a denied one may retry after RetryAfter.
func (s *Store) Acquire(ctx context.Context, name string, n int64, maxWait time.Duration) (Decision, error) {
	if s.batcher != nil {
		return s.batcher.acquire(ctx, Request{Name: name, Permits: n, MaxWait: maxWait})
	}
	return s.acquireDirect(ctx, name, n, maxWait)
}

func (s *Store) acquireDirect(ctx context.Context, name string, n int64, maxWait time.Duration) (Decision, error) {
	tpl, err := s.match(ctx, name)
	if err != nil {
		return Decision{}, err
	}
	if n < 1 {
		return Decision{}, permitsErr(n)
	}
	// Without a template, acquire.lua takes the state key and the pair alone.
	keys, args := []string{s.stateKey(name)}, []any{n, waitArg(maxWait)}
	if tpl != nil {
		keys = append(keys, s.instanceKey(name))
		args = []any{tpl.acquireHead(1), n, waitArg(maxWait)}
	}
	v, err := s.runAny(ctx, lua.Acquire, keys, args...)
	if err != nil {
		return Decision{}, err
	}
	var o Outcome
	u := answerUnpacker(v)
	decodeAnswer(name, u, 1, func(int) (int64, *Outcome) { return n, &o })
	if err := u.done("answer"); err != nil && o.Err == nil {
		o.Err = fmt.Errorf("store: acquire of %q: %w", name, err)
	}
	return o.Decision, o.Err
}

// acquireHead is the head acquire.lua takes for one limiter's m requests: m,
// or with a template m, its idle TTL and its parameters in one string.
func (t *compiledTemplate) acquireHead(m int) any {
	if t == nil {
		return m
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
	args := append([]any{n, waitArg(maxWait), tpl.idleTTLms()}, tpl.args()...)
	v, err := s.run(ctx, lua.Grant, keys, args...)
	if err != nil {
		return nil, err
	}
	return v, replyErr(name, v)
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

func replyErr(name string, v []any) error {
	switch toInt(v[0]) {
	case -1:
		return fmt.Errorf("limiter %q: %w", name, ErrNotFound)
	case -2:
		// Older rate scripts refuse a share or concurrency limiter as a
		// request for too many permits, {-2, maxn}, with the marker its
		// hash holds as maxn (configure_lease.lua).
		switch maxn := toInt(v[1]); {
		case maxn == maxnShare:
			return kindConflict(name, limiter.KindShare)
		case maxn == maxnConcurrency:
			return kindConflict(name, limiter.KindConcurrency)
		case maxn < 1: // no rate limiter has fewer than 1
			return kindConflict(name, "")
		}
		return &limiter.FieldError{Field: "permits", Rule: "must be ≥ 1 and at most " + strconv.FormatInt(toInt(v[1]), 10) + " (13 days of schedule)"}
	case -5: // a limiter of a kind without a schedule (share, concurrency)
		kind := ""
		if len(v) > 1 {
			kind = toString(v[1])
		}
		return kindConflict(name, limiter.Kind(kind))
	}
	return nil
}

func abs(ep, rel int64) int64 { return ep*1000 + rel }

func decodeDecision(v []any) Decision {
	ep := toInt(v[3])
	d := Decision{
		Granted: toInt(v[1]) == 1, Permits: toInt(v[2]), Delay: toInt(v[6]), Lateness: toInt(v[7]),
		Wait: toInt(v[8]), RetryAfter: toInt(v[9]), Version: toInt(v[10]), Now: toInt(v[11]) * 1000,
		Instance: toInt(v[12]) == 1,
	}
	if d.Granted {
		d.Scheduled, d.Start = abs(ep, toInt(v[4])), abs(ep, toInt(v[5]))
	}
	return d
}

// decodeAnswer reads one limiter's answer from u, the reply of acquire.lua
// (acquire_many in lua/lib.lua): its head (code 1, now_us, version,
// instance) and one record per request (code, then sched, start, wait,
// retry_after), or code 3 (not found), or code 4 and a kind's name. req
// gives the permits of each of its m requests and where its Outcome goes; it
// is called once for each, in order.
func decodeAnswer(name string, u *unpacker, m int, req func(r int) (int64, *Outcome)) {
	fail := func(err error) {
		for r := range m {
			_, o := req(r)
			o.Err = err
		}
	}
	switch code := u.uint(1); {
	case u.err != nil:
		fail(fmt.Errorf("store: acquire of %q: %w", name, u.err))
		return
	case code == 3:
		fail(fmt.Errorf("limiter %q: %w", name, ErrNotFound))
		return
	case code == 4: // a limiter of a kind without a schedule
		fail(kindConflict(name, limiter.Kind(u.str())))
		return
	case code != 1:
		u.err = fmt.Errorf("answer code %d", code)
		fail(fmt.Errorf("store: acquire of %q: %w", name, u.err))
		return
	}
	now, ver, inst := u.int(7)*1000, u.int(7), u.uint(1) == 1
	for r := range m {
		code := u.uint(1)
		sched, start, wait, retry := u.int(7), u.int(7), u.int(7), u.int(7)
		n, o := req(r)
		switch {
		case u.err != nil:
			o.Err = fmt.Errorf("store: acquire of %q: record %d: %w", name, r, u.err)
			continue
		case code == 2:
			o.Err = &limiter.FieldError{Field: "permits", Rule: "must be ≥ 1 and at most " + strconv.FormatInt(sched, 10) + " (13 days of schedule)"}
			continue
		}
		// A grant's delay is its start, its lateness start − sched; a
		// denial's delay comes as start.
		d := Decision{Granted: code == 1, Delay: start, Wait: wait, RetryAfter: retry,
			Version: ver, Now: now, Instance: inst}
		if d.Granted {
			d.Permits, d.Lateness = n, start-sched
			d.Scheduled, d.Start = now+sched, now+start
		}
		o.Decision = d
	}
}

// answerUnpacker reads acquire.lua's reply, v.
func answerUnpacker(v any) *unpacker {
	s, ok := v.(string)
	if !ok {
		return &unpacker{err: fmt.Errorf("unexpected answer %v", v)}
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
	End       int64   // the schedule pointer after the grant (Unix ns)
	epoch     int64   // µs; Scheduled, Start and End relative to it are exact
}

// Params returns engine parameters able to compute costs and pace for the
// grant's permits (Slice, Burst, Kind).
func (g *Grant) Params() limiter.Params {
	return limiter.Params{Kind: g.Kind, Slice: g.Slice, Burst: g.Burst}
}

// Grant takes k permits for a client pool (see Grant), waiting at most maxWait.
func (s *Store) Grant(ctx context.Context, name string, k int64, maxWait time.Duration) (Grant, error) {
	v, err := s.grantCall(ctx, name, k, maxWait)
	if err != nil {
		return Grant{}, err
	}
	g := Grant{Decision: decodeDecision(v), Name: name, epoch: toInt(v[3])}
	g.RemBefore = toInt(v[13])
	g.End = abs(g.epoch, toInt(v[14]))
	g.Slice = limiter.Slice{Whole: toInt(v[15]), Frac: toInt(v[16]), Den: toInt(v[17])}
	g.Burst, _ = strconv.ParseFloat(toString(v[18]), 64)
	if g.Burst == 0 {
		g.Burst = math.Inf(1)
	}
	g.Kind = limiter.Kind(toString(v[19]))
	return g, nil
}

// Release hands back the last m permits of a grant that the pool will not use.
// If nothing was taken from the schedule since the grant, the schedule is
// rewound and the next caller gets them; otherwise their time is counted as
// idle. It reports whether the schedule was rewound.
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
	args := append([]any{g.Version, g.epoch, h.Sched, h.End, h.PaceUsed, h.Unused, h.Permits, h.RemUsed, h.RemAfter}, tpl.args()...)
	v, err := s.run(ctx, lua.Release, keys, args...)
	if err != nil {
		return false, err
	}
	if err := replyErr(g.Name, v); err != nil {
		return false, err
	}
	return toInt(v[1]) == 1, nil
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
	Instance  bool // a template instance answered (see Decision.Instance)
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
	if err := replyErr(name, v); err != nil {
		return WaitInfo{}, err
	}
	// {1, wait, delay, version, now_us, started, instance, then the totals
	// allocated, idle, permits, lateness as int64 lo, hi pairs}.
	return WaitInfo{
		Wait: toInt(v[1]), Delay: toInt(v[2]), Version: toInt(v[3]), Now: toInt(v[4]) * 1000,
		Started: toInt(v[5]) == 1, Instance: toInt(v[6]) == 1,
		Allocated: total(v[7], v[8]), Idle: total(v[9], v[10]), Permits: total(v[11], v[12]), Lateness: total(v[13], v[14]),
	}, nil
}

// total is the int64 hi·2^32 + lo of a total the scripts reply in two parts.
func total(lo, hi any) int64 { return toInt(hi)<<32 + toInt(lo) }

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
	if err := replyErr(name, v); err != nil { // {-1} has no version
		return 0, err
	}
	return toInt(v[1]), nil
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
