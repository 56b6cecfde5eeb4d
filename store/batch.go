package store

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd/lua"
)

// Request is one acquire of a batch, or one charge.
type Request struct {
	Name    string
	Permits int64
	MaxWait time.Duration // Forever: no bound
	// Charge takes Permits (≥ 0; 0 is a check) whatever is left, and
	// Decision.Granted then says whether they fitted within MaxWait (see
	// Store.Charge).
	Charge bool
}

// Outcome is the answer to one Request of a batch.
type Outcome struct {
	Decision
	Err error
}

// acquireMany is AcquireMany writing to out, with sc's memory (the batcher
// keeps one for all its batches).
func (s *Store) acquireMany(ctx context.Context, reqs []Request, out []Outcome, sc *batchScratch) {
	s.batchCalls(ctx, reqs, out, sc)
	calls := sc.calls
	if len(calls) == 0 {
		return
	}
	script := s.scripts[lua.Acquire]
	fn, gen := s.fn.function(lua.Acquire), s.fn.gen.Load()
	// exec runs call i if again(i): as a function while fn is set, else as
	// a script.
	exec := func(again func(i int) bool) {
		_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := range calls {
				c := &calls[i]
				if !again(i) {
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
		})
	}
	failed := func(is func(error) bool) func(i int) bool {
		return func(i int) bool { return is(calls[i].cmd.Err()) }
	}
	anyFailed := func(is func(error) bool) bool {
		return slices.ContainsFunc(calls, func(c batchCall) bool { return is(c.cmd.Err()) })
	}
	exec(func(int) bool { return true })
	// Recover what a node could not run, then run it again: a node without
	// the library (load it everywhere), a server without functions (scripts
	// from now on), a node without the script (restart, SCRIPT FLUSH: load it
	// everywhere). A few rounds cover one of each.
	fnFailed := func(err error) bool { return fnUnsupported(err) || fnMissing(err) }
retry:
	for range 4 {
		switch {
		case fn != "" && anyFailed(fnUnsupported):
			s.fn.off.Store(true)
			fn = ""
			exec(failed(fnFailed))
		case fn != "" && anyFailed(fnMissing):
			err := s.loadFunctions(ctx, gen)
			gen = s.fn.gen.Load()
			if fnUnsupported(err) {
				s.fn.off.Store(true)
				fn = ""
			} else if err != nil {
				break retry
			}
			exec(failed(fnMissing))
		case fn == "" && anyFailed(isNoScript):
			if err := script.Load(ctx, s.rdb).Err(); err != nil {
				break retry
			}
			exec(failed(isNoScript))
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
		u := answerUnpacker(v)
		if !u.isText && u.err == nil {
			s.floors.useBinary()
		}
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

// batchCallSize bounds the requests one call of a batch decides on a single
// Redis server, so that no call holds Redis for long.
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
// argv is the command: its name and the function or script (set when it
// runs), the count of keys, the keys, then the arguments.
type batchCall struct {
	from, to int
	argv     []any
	cmd      *redis.Cmd
}

// batchScratch is the memory of a batch: its groups, its calls and their
// commands, kept from one batch to the next.
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
	// cluster or ring node gets a call per limiter. A call's argv holds its
	// keys, then its arguments: a head per limiter and a pair per request.
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

// WithBatching makes Acquire batch concurrent callers automatically: calls
// that arrive while a pipeline is in flight go out together in the next one,
// up to maxBatch each (< 1: 64). It pays when many goroutines share one
// store; a lone caller sees no extra delay. The option only configures: New
// starts the batcher (once, whatever the options) and Close stops it.
func WithBatching(maxBatch int) Option {
	return func(s *Store) {
		if maxBatch < 1 {
			maxBatch = 64
		}
		s.batchMax = maxBatch
	}
}

// newBatcher returns s's batcher, started, or nil without WithBatching.
func newBatcher(s *Store) *batcher {
	if s.batchMax == 0 {
		return nil
	}
	b := &batcher{s: s, max: s.batchMax, in: make(chan *call, s.batchMax), done: make(chan struct{})}
	b.start(2) // two pipelines in flight keep the connection busy
	return b
}

type call struct {
	ctx context.Context
	// reqs are the call's requests (one: one[:1]), decided in one batch;
	// res gets their outcomes, in order, before done is signalled.
	reqs []Request
	res  []Outcome
	done chan struct{}
	one  [1]Request
	oneR [1]Outcome
	// until is when the caller stops waiting (AcquireWithin; zero: when
	// ctx ends).
	until time.Time
}

// answer gives every request of c outcome o (before a batch).
func (c *call) answer(o Outcome) {
	for i := range c.res {
		c.res[i] = o
	}
	c.done <- struct{}{}
}

type batcher struct {
	s        *Store
	inflight atomic.Int64 // round trips under way: direct calls and batches
	max      int
	in       chan *call
	done     chan struct{}
	wg       sync.WaitGroup
	once     sync.Once
}

var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

func (b *batcher) start(workers int) {
	for range workers {
		b.wg.Add(1)
		go b.loop()
	}
}

func (b *batcher) stop() {
	b.once.Do(func() { close(b.done) })
	b.wg.Wait()
}

func (b *batcher) loop() {
	defer b.wg.Done()
	batch := make([]*call, 0, b.max)
	reqs := make([]Request, 0, b.max)
	outs := make([]Outcome, 0, b.max)
	var sc batchScratch
	for {
		select {
		case <-b.done:
			return
		case c := <-b.in:
			batch = append(batch[:0], c)
		}
		// While another round trip is under way the connection is busy
		// anyway: yield a moment so that the callers its answer just woke
		// can queue again and go out in this batch, rather than this
		// worker sending one or two of them at once and the rest after
		// another round trip. (Batches of about 9 became about 14 at 32
		// goroutines, BenchmarkAcquire's srv-us/call over srv-us/op: a
		// fifth to a quarter more decisions per second, each costing less
		// of both processes' CPU.) A lone caller goes direct and never
		// waits here.
		if b.inflight.Load() > 0 {
			for range lingerYields {
				runtime.Gosched()
			}
		}
	drain:
		for len(batch) < b.max {
			select {
			case c := <-b.in:
				batch = append(batch, c)
			default:
				break drain
			}
		}
		// A caller that gave up while queued must not take permits that
		// nobody will use.
		live := batch[:0]
		var now time.Time // read once, if a call has a bound
		for _, c := range batch {
			err := c.ctx.Err()
			if err == nil && !c.until.IsZero() {
				if now.IsZero() {
					now = time.Now()
				}
				if !now.Before(c.until) {
					err = context.DeadlineExceeded
				}
			}
			if err != nil {
				c.answer(Outcome{Err: wrapErr(err)})
				continue
			}
			live = append(live, c)
		}
		if batch = live; len(batch) == 0 {
			continue
		}
		reqs = reqs[:0]
		for _, c := range batch {
			reqs = append(reqs, c.reqs...)
		}
		// The batch runs on its own deadline: one caller giving up must not
		// fail the others. Callers stop waiting on their own contexts; a
		// batch of bounded callers (AcquireWithin) ends at the latest of
		// their bounds, which a client that honours context deadlines
		// keeps (NewClient's do).
		end := time.Now().Add(batchTimeout)
		if latest := latestBound(batch); !latest.IsZero() && latest.Before(end) {
			end = latest
		}
		ctx, cancel := context.WithDeadline(context.Background(), end)
		b.inflight.Add(1)
		outs = append(outs[:0], make([]Outcome, len(reqs))...)
		b.s.acquireMany(ctx, reqs, outs, &sc)
		b.inflight.Add(-1)
		cancel()
		i := 0
		for _, c := range batch {
			i += copy(c.res, outs[i:])
			c.done <- struct{}{}
		}
	}
}

const batchTimeout = 2 * time.Second

// latestBound is the latest bound of calls, or zero if one has none.
func latestBound(calls []*call) time.Time {
	var latest time.Time
	for _, c := range calls {
		if c.until.IsZero() {
			return time.Time{}
		}
		if c.until.After(latest) {
			latest = c.until
		}
	}
	return latest
}

// lingerYields is how often a worker yields before it takes what is queued,
// while another round trip is in flight (loop).
const lingerYields = 2

// acquire submits one call and waits for its outcome, at most within (> 0;
// 0: as long as ctx allows). A caller that finds nothing in flight goes
// straight to Redis: batching only pays when calls overlap, and a lone caller
// must not pay the hand-offs.
func (b *batcher) acquire(ctx context.Context, req Request, within time.Duration) (Decision, error) {
	// A closed batcher must refuse at once: the select below could still
	// pick the send, as b.in has room, and nobody would ever answer.
	select {
	case <-b.done:
		return Decision{}, ErrClosed
	default:
	}
	if b.inflight.CompareAndSwap(0, 1) {
		d, err := b.s.acquireDirectWithin(ctx, req, within)
		b.inflight.Add(-1)
		return d, err
	}
	c := callPool.Get().(*call)
	c.one[0] = req
	c.reqs, c.res = c.one[:], c.oneR[:]
	if err := b.submit(ctx, c, within); err != nil {
		return Decision{}, err
	}
	o := c.oneR[0]
	callPool.Put(c)
	return o.Decision, o.Err
}

// acquireMany submits reqs as one call (they go out in one batch) and
// returns their outcomes, in order, waiting at most within (> 0; 0: as
// long as ctx allows). As acquire, a caller that finds nothing in flight
// goes straight to Redis.
func (b *batcher) acquireMany(ctx context.Context, reqs []Request, within time.Duration) []Outcome {
	select {
	case <-b.done:
		return failAll(len(reqs), ErrClosed)
	default:
	}
	if b.inflight.CompareAndSwap(0, 1) {
		out := b.s.acquireManyDirectWithin(ctx, reqs, within)
		b.inflight.Add(-1)
		return out
	}
	c := &call{done: make(chan struct{}, 1), reqs: reqs, res: make([]Outcome, len(reqs))}
	if err := b.submit(ctx, c, within); err != nil {
		return failAll(len(reqs), err)
	}
	return c.res
}

// submit queues c and waits until a worker has answered it (nil: c.res
// holds the outcomes), or returns why it could not: the context ended, or
// the batcher closed. A call it returns an error for must not be reused:
// a worker may still answer it.
func (b *batcher) submit(ctx context.Context, c *call, within time.Duration) error {
	c.ctx, c.until = ctx, time.Time{}
	if within > 0 {
		c.until = time.Now().Add(within)
	}
	select {
	case b.in <- c:
	case <-ctx.Done():
		return wrapErr(ctx.Err())
	case <-b.done:
		return ErrClosed
	}
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		// The outcome will still arrive; c is not reused.
		return wrapErr(ctx.Err())
	case <-b.done:
		// Closed while c was queued or in flight: once the workers are gone,
		// c has its outcome or never will.
		b.wg.Wait()
		select {
		case <-c.done:
			return nil
		default:
			return ErrClosed // c stays in b.in: not reused
		}
	}
}

// failAll is n outcomes of err.
func failAll(n int, err error) []Outcome {
	out := make([]Outcome, n)
	for i := range out {
		out[i].Err = err
	}
	return out
}
