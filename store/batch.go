package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/lua"
)

// Request is one acquire of a batch, or one charge.
type Request struct {
	Name    string
	Permits int64
	MaxWait time.Duration // Forever: no bound
	// Charge takes Permits (≥ 0; 0 is a check) whatever is left (see
	// Store.Charge).
	Charge bool
	// Fixed, with Charge, counts the permits in a fixed window of a plain
	// Redis integer (fixed.go), not in a limiter's state.
	Fixed *Fixed
}

// Outcome is the answer to one Request of a batch.
type Outcome struct {
	limitd.Decision
	Err error
}

// acquireMany is AcquireMany writing to out, with sc's memory (the batcher
// keeps one for all its batches).
func (s *Store) acquireMany(ctx context.Context, reqs []Request, out []Outcome, sc *batchScratch) {
	// Fixed windows go in the first pipeline of the limiters' calls.
	var fc *fixedCount
	if slices.ContainsFunc(reqs, func(r Request) bool { return r.Fixed != nil }) {
		fc = s.fixedCountOf(reqs, out)
	}
	s.batchCalls(ctx, reqs, out, sc)
	calls := sc.calls
	if len(calls) == 0 {
		if fc != nil {
			s.countFixed(ctx, fc, reqs, out)
		}
		return
	}
	script := s.scripts[lua.Acquire]
	fn, gen := s.fn.function(lua.Acquire), s.fn.gen.Load()
	// exec runs the calls whose error again is (nil: all of them): as a
	// function while fn is set, else as a script.
	first := fc != nil
	exec := func(again func(error) bool) {
		fixed := first
		first = false
		pipelineErr(s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			if fixed {
				s.queueFixed(ctx, p, fc) // (nothing when not bounded)
			}
			for i := range calls {
				c := &calls[i]
				if again != nil && !again(c.cmd.Err()) {
					continue
				}
				if fn != "" {
					c.argv[0], c.argv[1] = "fcall", fn
				} else {
					c.argv[0], c.argv[1] = "evalsha", script.Hash()
				}
				c.cmd = redis.NewCmd(ctx, c.argv...)
				_ = p.Process(ctx, once{c.cmd}) // a pipeline of one such is sent at most once
			}
			return nil
		}))
		if fixed && fc.sent {
			s.readFixed(fc)
		}
	}
	anyFailed := func(is func(error) bool) bool {
		return slices.ContainsFunc(calls, func(c batchCall) bool { return is(c.cmd.Err()) })
	}
	exec(nil)
	if fc != nil {
		s.finishFixed(ctx, fc, reqs, out)
	}
	// Recover what a node could not run, then run it again: a node without
	// the library or the script (load it), a server without functions
	// (scripts from now on). A few rounds cover one of each.
	fnFailed := func(err error) bool { return fnUnsupported(err) || fnMissing(err) }
retry:
	for range 4 {
		switch {
		case fn != "" && anyFailed(fnUnsupported):
			s.fn.off.Store(true)
			fn = ""
			exec(fnFailed)
		case fn != "" && anyFailed(fnMissing):
			err := s.loadFunctions(ctx, gen)
			gen = s.fn.gen.Load()
			if fnUnsupported(err) {
				s.fn.off.Store(true)
				fn = ""
			} else if err != nil {
				break retry
			}
			exec(fnMissing)
		case fn == "" && anyFailed(isNoScript):
			if err := script.Load(ctx, s.rdb).Err(); err != nil {
				break retry
			}
			exec(isNoScript)
		default:
			break retry
		}
	}
	for i := range calls {
		c := &calls[i]
		v, err := c.cmd.Result()
		if err != nil {
			sc.fail(c, out, wrapErr(err))
			continue
		}
		u := s.answerUnpacker(v)
		for _, g := range sc.groups[c.from:c.to] {
			r := g.first
			decodeAnswer(g.name, &u, g.m, func(_ int, o Outcome) {
				i := r
				r = sc.next[i]
				out[i] = o.withPermits(reqs[i].Permits)
			})
			if o := out[g.last]; o.Err == nil && u.err == nil {
				s.floors.see(g.name, o.Now, o.Position)
			}
		}
		if err := u.done("answer"); err != nil {
			sc.fail(c, out, fmt.Errorf("store: acquire: %w", err))
		}
	}
}

// batchCallSize bounds the requests one call of a batch decides, so that no
// call holds Redis for long.
const batchCallSize = 128

// batchGroup is the requests of one batch for one limiter: m of them, the
// first at first, each next one at next[i] (-1: none).
type batchGroup struct {
	name        string
	tpl         *compiledTemplate
	first, last int
	m           int
}

// batchCall is one call of acquire.lua: the requests of groups[from:to].
// argv is the command (its first two set when it runs).
type batchCall struct {
	from, to int
	argv     []any
	cmd      *redis.Cmd
}

// batchScratch is the memory of a batch, kept from one batch to the next.
type batchScratch struct {
	groups []batchGroup
	byName map[string]int // a group's place in groups
	failed map[string]error
	next   []int // the next request of the same limiter, -1: none
	calls  []batchCall
	argv   []any  // every call's argv, one after the other
	floors []byte // a call's floors (appendFloor), before they become its argument
}

// fail records err for every request of c that has no error yet.
func (sc *batchScratch) fail(c *batchCall, out []Outcome, err error) {
	for _, g := range sc.groups[c.from:c.to] {
		for i := g.first; i >= 0; i = sc.next[i] {
			if out[i].Err == nil {
				out[i] = Outcome{Err: err}
			}
		}
	}
}

// batchCalls groups reqs by limiter and the groups into calls (sc.calls),
// recording in out the requests that fail before any call.
func (s *Store) batchCalls(ctx context.Context, reqs []Request, out []Outcome, sc *batchScratch) {
	if sc.byName == nil {
		sc.byName = make(map[string]int, len(reqs))
	}
	clear(sc.byName)
	clear(sc.failed)
	sc.groups, sc.calls = sc.groups[:0], sc.calls[:0]
	sc.next = slices.Grow(sc.next[:0], len(reqs))[:len(reqs)]
	for i, r := range reqs {
		sc.next[i] = -1
		if r.Fixed != nil { // countFixed's
			continue
		}
		if err := r.check(); err != nil {
			out[i].Err = err
			continue
		}
		if err := sc.failed[r.Name]; err != nil {
			out[i].Err = err
			continue
		}
		k, seen := sc.byName[r.Name]
		if !seen {
			tpl, err := s.match(ctx, r.Name)
			if err != nil {
				if sc.failed == nil {
					sc.failed = make(map[string]error)
				}
				sc.failed[r.Name] = err
				out[i].Err = err
				continue
			}
			k = len(sc.groups)
			sc.byName[r.Name] = k
			sc.groups = append(sc.groups, batchGroup{name: r.Name, tpl: tpl, first: i, last: i})
		} else {
			sc.next[sc.groups[k].last] = i
			sc.groups[k].last = i
		}
		sc.groups[k].m++
	}
	// Only a single server takes keys of different slots in one call; a
	// cluster or ring node gets a call per limiter.
	_, single := s.rdb.(*redis.Client)
	argv := sc.argv[:0]
	for k := 0; k < len(sc.groups); {
		from, to, nkeys, size := k, k, 0, 0
		for ; to < len(sc.groups) && (to == from || single && size+sc.groups[to].m <= batchCallSize); to++ {
			size += sc.groups[to].m
			nkeys++
			if sc.groups[to].tpl != nil {
				nkeys++
			}
		}
		start := len(argv)
		argv = append(argv, nil, nil, nkeys)
		floors, some := s.floors.startFloors(sc.floors[:0]), false
		for _, g := range sc.groups[from:to] {
			argv = append(argv, s.stateKey(g.name))
			if g.tpl != nil { // acquire.lua takes an instance key only with a template
				argv = append(argv, s.instanceKey(g.name))
			}
			var ok bool
			floors, ok = s.floors.appendFloor(floors, g.name)
			some = some || ok
		}
		sc.floors = floors
		if some { // the floors of the call's limiters, one argument
			argv = append(argv, string(floors))
		} else {
			argv = append(argv, noFloors)
		}
		for _, g := range sc.groups[from:to] {
			argv = append(argv, g.tpl.acquireHead(g.m))
			for i := g.first; i >= 0; i = sc.next[i] {
				argv = append(argv, reqs[i].arg(), waitArg(reqs[i].MaxWait))
			}
		}
		sc.calls = append(sc.calls, batchCall{from: from, to: to, argv: argv[start:len(argv):len(argv)]})
		k = to
	}
	sc.argv = argv
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// AcquireMany decides many acquires, on any limiters, in one round trip per
// Redis node. The requests of one limiter are decided by one call, in order,
// at one Redis time; on a single Redis server one call decides up to
// batchCallSize requests of any limiters. Outcomes are in request order.
func (s *Store) AcquireMany(ctx context.Context, reqs []Request) []Outcome {
	out := s.acquireManyDirectUntil(ctx, reqs, time.Time{})
	s.askWithBounds(ctx, reqs, out, time.Time{})
	return out
}

// AcquireManyWithin is AcquireMany whose caller waits at most within (> 0;
// 0: as long as ctx allows) for Redis to answer, as AcquireWithin: with
// batching on, the requests go out in one batch with those of concurrent
// callers. A request that could not be decided has its Err.
func (s *Store) AcquireManyWithin(ctx context.Context, reqs []Request, within time.Duration) []Outcome {
	if len(reqs) == 0 {
		return nil
	}
	until := untilOf(within)
	var out []Outcome
	if s.batcher != nil {
		out = s.batcher.acquireMany(ctx, reqs, until)
	} else {
		out = s.acquireManyDirectUntil(ctx, reqs, until)
	}
	s.askWithBounds(ctx, reqs, out, until)
	return out
}

// askWithBounds asks again, by until, the requests of out that a calendar
// window could not decide without its bounds, once they are sent.
func (s *Store) askWithBounds(ctx context.Context, reqs []Request, out []Outcome, until time.Time) {
	var again []int
	sent := map[string]bool{} // name → bounds sent
	for i := range out {
		if _, ok := errors.AsType[*needBounds](out[i].Err); !ok {
			continue
		}
		name := reqs[i].Name
		ok, seen := sent[name]
		if !seen {
			ok = s.boundsSentUntil(ctx, name, until, &out[i].Err)
			sent[name] = ok
		}
		if ok {
			again = append(again, i)
		}
	}
	if len(again) == 0 {
		return
	}
	sub := make([]Request, len(again))
	for j, i := range again {
		sub[j] = reqs[i]
	}
	subOut := s.acquireManyDirectUntil(ctx, sub, until)
	for j, i := range again {
		out[i] = subOut[j]
	}
}

// acquireManyDirectUntil is AcquireMany ending by until, without asking
// again for calendar bounds.
func (s *Store) acquireManyDirectUntil(ctx context.Context, reqs []Request, until time.Time) []Outcome {
	ctx, cancel := withUntil(ctx, until)
	defer cancel()
	out := make([]Outcome, len(reqs))
	s.acquireMany(ctx, reqs, out, new(batchScratch))
	return out
}
