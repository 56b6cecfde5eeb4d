package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/lua"
)

// Several limits in one call (AcquireAll), all or nothing: how atomic that
// is on one server (one script, acquire_all.lua) and on a cluster (a dry
// run, the takes, and restore.lua's undo of those a later refusal voids) is
// told in docs/concepts.md, "Several limits in one call". A call of one
// limiter taking permits is that limiter's own acquire.

// restoreTimeout bounds the undo of a cluster AcquireAll that another
// limiter refused, which runs whether or not the caller's context ended.
const restoreTimeout = 2 * time.Second

// MaxMultiRequests bounds the limiters of one AcquireAll call.
const MaxMultiRequests = 64

// AcquireAll asks every limiter (or template instance) of reqs for its
// permits, all or nothing, each waiting at most maxWait (Forever: no bound).
// Bad requests (a limiter named twice, none or over MaxMultiRequests,
// permits out of range) are a *limiter.FieldError naming requests[i]'s
// field; a missing limiter is ErrNotFound, a lease limiter ErrConflict. On
// an error nothing is taken.
func (s *Store) AcquireAll(ctx context.Context, reqs []limitd.MultiRequest, maxWait time.Duration) (limitd.MultiDecision, error) {
	if len(reqs) == 0 || len(reqs) > MaxMultiRequests {
		return limitd.MultiDecision{}, &limiter.FieldError{Field: "requests", Rule: "must name 1 to " + strconv.Itoa(MaxMultiRequests) + " limiters", Value: len(reqs)}
	}
	if r := reqs[0]; len(reqs) == 1 && r.Permits >= 1 {
		return s.acquireOne(ctx, r, maxWait)
	}
	groups := make([]multiGroup, len(reqs))
	seen := make(map[string]int, len(reqs))
	for i, r := range reqs {
		if err := checkRequestName(i, r.Name); err != nil {
			return limitd.MultiDecision{}, err
		}
		if j, dup := seen[r.Name]; dup {
			return limitd.MultiDecision{}, limiter.RequestFieldError(i, "name", fmt.Sprintf("names the limiter of requests[%d] again: name each limiter once", j), r.Name)
		}
		seen[r.Name] = i
		if r.Permits < 0 {
			return limitd.MultiDecision{}, limiter.RequestFieldError(i, "permits", "must be ≥ 0 (0 checks without taking)", r.Permits)
		}
		tpl, err := s.templates.match(ctx, s, r.Name)
		if err != nil {
			return limitd.MultiDecision{}, err
		}
		groups[i] = multiGroup{req: r, tpl: tpl, index: i}
	}
	out := limitd.MultiDecision{Decisions: make([]limitd.Decision, len(reqs))}
	if _, single := s.rdb.(*redis.Client); single && s.spread == nil {
		granted, _, err := s.acquireCall(ctx, groups, maxWait, "1", &out)
		if err != nil {
			return limitd.MultiDecision{}, err
		}
		out.Granted = granted
		if granted {
			s.seeAll(groups, out)
		}
		return out, nil
	}
	// A cluster or ring: one group per limiter. First a dry run.
	out.Granted = true
	for i := range groups {
		granted, _, err := s.acquireCall(ctx, groups[i:i+1], maxWait, "0", &out)
		if err != nil {
			return limitd.MultiDecision{}, err
		}
		out.Granted = out.Granted && granted
	}
	if !out.Granted {
		return out, nil
	}
	if s.spread != nil && s.spread.afterCheck != nil {
		s.spread.afterCheck()
	}
	var taken []written
	for i := range groups {
		granted, w, err := s.takeGroup(ctx, groups[i:i+1], maxWait, &out)
		taken = append(taken, w...)
		if err == nil && granted {
			continue
		}
		out.Granted = false
		// Refused (or failed) after others took: undo what was taken, even
		// when the caller's context ended (the undo must not be cut short).
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), restoreTimeout)
		n, uerr := s.restore(rctx, taken)
		cancel()
		out.Unrestored = n
		if err == nil {
			err = uerr
		}
		if err != nil {
			return limitd.MultiDecision{Unrestored: n}, err
		}
		return out, nil
	}
	s.seeAll(groups, out)
	return out, nil
}

// seeAll records the positions of a granted call's limiters (floors.go); a
// refused call's are where its permits would have put them.
func (s *Store) seeAll(groups []multiGroup, out limitd.MultiDecision) {
	for _, g := range groups {
		d := out.Decisions[g.index]
		s.floors.see(g.req.Name, d.Now, d.Position)
	}
}

// spreadHooks make a store on one server decide AcquireAll as on a cluster,
// one limiter at a time, for tests; afterCheck runs between the dry run and
// the takes (another caller's moment).
type spreadHooks struct{ afterCheck func() }

// multiGroup is one limiter of an AcquireAll call.
type multiGroup struct {
	req   limitd.MultiRequest
	tpl   *compiledTemplate
	index int // in the call's requests
}

// written is what acquire_all.lua's mode '2' wrote to one key.
type written struct {
	key, before, after string
	pttl               int64
	us                 int64 // the Redis time of the write
}

// takeGroup takes groups writing (mode '2') and returns whether they all
// granted and what was written.
func (s *Store) takeGroup(ctx context.Context, groups []multiGroup, maxWait time.Duration, out *limitd.MultiDecision) (bool, []written, error) {
	granted, rest, err := s.acquireCall(ctx, groups, maxWait, "2", out)
	if err != nil || len(rest) == 0 {
		return granted, nil, err
	}
	r := &reply{v: rest}
	us := r.int(len(rest) - 1)
	var ws []written
	for i := 0; i+4 < len(rest); i += 4 {
		ws = append(ws, written{key: r.str(i), before: r.str(i + 1), pttl: r.int(i + 2), after: r.str(i + 3), us: us})
	}
	return granted, ws, r.check("acquire_all", groups[0].req.Name)
}

func checkRequestName(i int, name string) error {
	if fe, ok := errors.AsType[*limiter.FieldError](limitd.CheckNameAs("name", name)); ok {
		return limiter.RequestFieldError(i, "name", fe.Rule, fe.Value)
	}
	return nil
}

// requestPermitsErr names requests[i]'s permits in err when they are at fault.
func requestPermitsErr(i int, r limitd.MultiRequest, err error) error {
	if fe, ok := errors.AsType[*limiter.FieldError](err); ok && fe.Field == "permits" {
		return limiter.RequestFieldError(i, "permits", fe.Rule, r.Permits)
	}
	return err
}

// acquireOne is AcquireAll of one limiter taking permits: its own acquire
// (its fast path, batched where the store batches). A refusal leaves it as
// a refused acquire does (a backlog past max_backlog forfeited, an
// instance's idle TTL renewed).
func (s *Store) acquireOne(ctx context.Context, r limitd.MultiRequest, maxWait time.Duration) (limitd.MultiDecision, error) {
	if err := checkRequestName(0, r.Name); err != nil {
		return limitd.MultiDecision{}, err
	}
	d, err := s.Acquire(ctx, r.Name, r.Permits, maxWait)
	if err != nil {
		return limitd.MultiDecision{}, requestPermitsErr(0, r, err)
	}
	return limitd.MultiDecision{Granted: d.Granted || r.Optional, Decisions: []limitd.Decision{d}}, nil
}

// acquireCall runs acquire_all.lua for groups (mode '0': a dry run, '1':
// writing if all grant, '2': and telling what it wrote), sets their
// decisions in out, and returns whether all granted (or were optional) and
// the reply's part after the answers. A calendar window that needs its
// bounds makes it write nothing and go again once they are sent.
func (s *Store) acquireCall(ctx context.Context, groups []multiGroup, maxWait time.Duration, mode string, out *limitd.MultiDecision) (bool, []any, error) {
	granted, rest, err := s.acquireCallOnce(ctx, groups, maxWait, mode, out)
	if errors.Is(err, errBoundsSent) {
		granted, rest, err = s.acquireCallOnce(ctx, groups, maxWait, mode, out)
		if errors.Is(err, errBoundsSent) {
			err = ErrBoundsUnsettled
		}
	}
	return granted, rest, err
}

// errBoundsSent is a call that decided nothing because a calendar window
// needed its bounds, which the store has sent since.
var errBoundsSent = errors.New("store: a calendar window's bounds were sent")

func (s *Store) acquireCallOnce(ctx context.Context, groups []multiGroup, maxWait time.Duration, mode string, out *limitd.MultiDecision) (bool, []any, error) {
	keys := make([]string, 0, 2*len(groups))
	floors, some := s.floors.startFloors(nil), false
	for _, g := range groups {
		keys = append(keys, s.stateKey(g.req.Name))
		if g.tpl != nil {
			keys = append(keys, s.instanceKey(g.req.Name))
		}
		var ok bool
		floors, ok = s.floors.appendFloor(floors, g.req.Name)
		some = some || ok
	}
	args := make([]any, 0, 2+4*len(groups))
	if some {
		args = append(args, string(floors))
	} else {
		args = append(args, noFloors)
	}
	args = append(args, mode)
	for _, g := range groups {
		opt := 0
		if g.req.Optional {
			opt = 1
		}
		args = append(args, g.tpl.acquireHead(1), g.req.Permits, waitArg(maxWait), opt)
	}
	v, err := s.runAny(ctx, lua.AcquireAll, keys, args...)
	if err != nil {
		return false, nil, err
	}
	rep, ok := v.([]any)
	if !ok || len(rep) == 0 {
		return false, nil, fmt.Errorf("store: acquire_all: %w", badReply("reply %v (%T), want an array", v, v))
	}
	u := s.answerUnpacker(rep[0])
	granted, sent := true, false
	for _, g := range groups {
		o := Outcome{}
		decodeAnswer(g.req.Name, &u, 1, func(_ int, x Outcome) { o = x.withPermits(g.req.Permits) })
		if s.boundsSent(ctx, g.req.Name, &o.Err) {
			sent = true
			continue
		}
		if o.Err != nil {
			return false, nil, requestPermitsErr(g.index, g.req, o.Err)
		}
		out.Decisions[g.index] = o.Decision
		if !o.Decision.Granted && !g.req.Optional {
			granted = false
		}
	}
	if err := u.done("answer"); err != nil {
		return false, nil, fmt.Errorf("store: acquire_all: %w", err)
	}
	if sent {
		return false, nil, errBoundsSent
	}
	return granted, rep[1:], nil
}

// restore undoes takes (restore.lua), one call per key, and returns how
// many keys another caller wrote since, and so kept.
func (s *Store) restore(ctx context.Context, ws []written) (int, error) {
	kept := 0
	var first error
	for _, w := range ws {
		v, err := s.run(ctx, lua.Restore, []string{w.key}, w.us, w.before, w.pttl, w.after)
		first = cmp.Or(first, err)
		if err != nil || (&reply{v: v}).int(0) != 1 {
			kept++
		}
	}
	return kept, first
}
