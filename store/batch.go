package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd/lua"
)

// Request is one acquire of a batch.
type Request struct {
	Name    string
	Permits int64
	MaxWait time.Duration // Forever: no bound
}

// Outcome is the answer to one Request of a batch.
type Outcome struct {
	Decision
	Err error
}

// AcquireMany decides many acquires, on any limiters, in one round trip per
// Redis node. The requests of one limiter are decided by one call, in order,
// at one Redis time, reading and writing the limiter once; on a single Redis
// server (not a cluster or ring) one call decides up to batchCallSize
// requests of any limiters, and more calls go out in the same pipeline.
// Outcomes are in request order.
func (s *Store) AcquireMany(ctx context.Context, reqs []Request) []Outcome {
	out := make([]Outcome, len(reqs))
	calls := s.batchCalls(ctx, reqs, out)
	if len(calls) == 0 {
		return out
	}
	script := s.scripts[lua.Acquire]
	fn, gen := s.fn.function(lua.Acquire), s.fn.gen.Load()
	// exec runs call i if again(i): as a function while fn is set, else as
	// a script.
	exec := func(again func(i int) bool) {
		_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, c := range calls {
				if !again(i) {
					continue
				}
				if fn != "" {
					c.cmd = p.FCall(ctx, fn, c.keys, c.args...)
				} else {
					c.cmd = script.EvalSha(ctx, p, c.keys, c.args...)
				}
			}
			return nil
		})
	}
	failed := func(is func(error) bool) func(i int) bool {
		return func(i int) bool { return is(calls[i].cmd.Err()) }
	}
	anyFailed := func(is func(error) bool) bool {
		return slices.ContainsFunc(calls, func(c *batchCall) bool { return is(c.cmd.Err()) })
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
	for _, c := range calls {
		// One limiter's answer comes alone, more in an array.
		v, err := c.cmd.Result()
		answers, ok := v.([]any)
		if len(c.groups) == 1 {
			answers = []any{v}
		} else if err == nil && (!ok || len(answers) != len(c.groups)) {
			err = fmt.Errorf("store: acquire: %v for %d limiters", v, len(c.groups))
		}
		for j, g := range c.groups {
			if err != nil {
				for _, i := range g.idx {
					out[i].Err = wrapErr(err)
				}
				continue
			}
			decodeAcquired(g.name, answers[j], g.permits, out, g.idx)
		}
	}
	return out
}

// batchCallSize bounds the requests one call of a batch decides on a single
// Redis server, so that no call holds Redis for long.
const batchCallSize = 128

// batchGroup is the requests of one batch for one limiter.
type batchGroup struct {
	name    string
	keys    []string
	tpl     *compiledTemplate
	idx     []int   // the requests' places in the batch
	permits []int64 // their permits
}

// batchCall is one call of acquire.lua: one or more limiters' requests.
type batchCall struct {
	groups []*batchGroup
	keys   []string
	args   []any
	cmd    *redis.Cmd
}

// batchCalls groups reqs by limiter and the groups into calls, recording in
// out the requests that fail before any call.
func (s *Store) batchCalls(ctx context.Context, reqs []Request, out []Outcome) []*batchCall {
	var groups []*batchGroup
	byName := make(map[string]*batchGroup)
	failed := make(map[string]error)
	for i, r := range reqs {
		if r.Permits < 1 {
			out[i].Err = permitsErr(r.Permits)
			continue
		}
		g := byName[r.Name]
		if g == nil {
			if err := failed[r.Name]; err != nil {
				out[i].Err = err
				continue
			}
			keys, tpl, err := s.target(ctx, r.Name)
			if err != nil {
				failed[r.Name] = err
				out[i].Err = err
				continue
			}
			g = &batchGroup{name: r.Name, keys: keys, tpl: tpl}
			byName[r.Name] = g
			groups = append(groups, g)
		}
		g.idx = append(g.idx, i)
		g.permits = append(g.permits, r.Permits)
	}
	// Only a single server takes keys of different slots in one call; a
	// cluster or ring node gets a call per limiter.
	_, single := s.rdb.(*redis.Client)
	var calls []*batchCall
	var c *batchCall
	size := 0
	for _, g := range groups {
		if c == nil || !single || size+len(g.idx) > batchCallSize {
			c = &batchCall{}
			calls = append(calls, c)
			size = 0
		}
		size += len(g.idx)
		c.groups = append(c.groups, g)
		c.keys = append(c.keys, g.keys...)
		c.args = g.tpl.acquireArgs(len(g.idx), c.args)
		for _, i := range g.idx {
			c.args = append(c.args, reqs[i].Permits, waitArg(reqs[i].MaxWait))
		}
	}
	return calls
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// WithBatching makes Acquire batch concurrent callers automatically: calls
// that arrive while a pipeline is in flight go out together in the next one,
// up to maxBatch each. It pays when many goroutines share one store; a lone
// caller sees no extra delay. The store's Close stops the batcher.
func WithBatching(maxBatch int) Option {
	return func(s *Store) {
		if maxBatch < 1 {
			maxBatch = 64
		}
		s.batcher = &batcher{s: s, max: maxBatch, in: make(chan *call, maxBatch), done: make(chan struct{})}
		s.batcher.start(2) // two pipelines in flight keep the connection busy
	}
}

type call struct {
	ctx context.Context
	req Request
	out chan Outcome
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

var callPool = sync.Pool{New: func() any { return &call{out: make(chan Outcome, 1)} }}

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
	for {
		select {
		case <-b.done:
			return
		case c := <-b.in:
			batch = append(batch[:0], c)
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
		for _, c := range batch {
			if err := c.ctx.Err(); err != nil {
				c.out <- Outcome{Err: wrapErr(err)}
				continue
			}
			live = append(live, c)
		}
		if batch = live; len(batch) == 0 {
			continue
		}
		reqs = reqs[:0]
		for _, c := range batch {
			reqs = append(reqs, c.req)
		}
		// The batch runs on its own deadline: one caller giving up must not
		// fail the others. Callers stop waiting on their own contexts.
		ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
		b.inflight.Add(1)
		outs := b.s.AcquireMany(ctx, reqs)
		b.inflight.Add(-1)
		cancel()
		for i, c := range batch {
			c.out <- outs[i]
		}
	}
}

const batchTimeout = 2 * time.Second

// acquire submits one call and waits for its outcome. A caller that finds
// nothing in flight goes straight to Redis: batching only pays when calls
// overlap, and a lone caller must not pay the hand-offs.
func (b *batcher) acquire(ctx context.Context, req Request) (Decision, error) {
	// A closed batcher must refuse at once: the select below could still
	// pick the send, as b.in has room, and nobody would ever answer.
	select {
	case <-b.done:
		return Decision{}, ErrClosed
	default:
	}
	if b.inflight.CompareAndSwap(0, 1) {
		d, err := b.s.acquireDirect(ctx, req.Name, req.Permits, req.MaxWait)
		b.inflight.Add(-1)
		return d, err
	}
	c := callPool.Get().(*call)
	c.ctx, c.req = ctx, req
	select {
	case b.in <- c:
	case <-ctx.Done():
		callPool.Put(c)
		return Decision{}, wrapErr(ctx.Err())
	case <-b.done:
		callPool.Put(c)
		return Decision{}, ErrClosed
	}
	select {
	case o := <-c.out:
		callPool.Put(c)
		return o.Decision, o.Err
	case <-ctx.Done():
		// The outcome will still arrive on c.out; c is not reused.
		return Decision{}, wrapErr(ctx.Err())
	case <-b.done:
		// Closed while c was queued or in flight: once the workers are gone,
		// c has its outcome or never will.
		b.wg.Wait()
		select {
		case o := <-c.out:
			callPool.Put(c)
			return o.Decision, o.Err
		default:
			return Decision{}, ErrClosed // c stays in b.in: not reused
		}
	}
}
