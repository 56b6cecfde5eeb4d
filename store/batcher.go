package store

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd"
)

// WithBatching makes Acquire batch concurrent callers automatically: calls
// that overlap go out together, up to maxBatch requests a batch (< 1: 64),
// decided by one call of the script; a lone caller sees no extra delay. New
// starts the batcher and Close stops it.
func WithBatching(maxBatch int) Option {
	return func(s *Store) {
		if maxBatch < 1 {
			maxBatch = 64
		}
		s.batchMax = maxBatch
	}
}

// How the batcher sends. A caller that finds no round trip under way and no
// batch open goes straight to Redis: a lone caller pays no hand-off. Any
// other joins the open batch, which leaves, on a connection of its own, at
// the first of these:
//
//   - it holds maxBatch requests;
//   - it holds the calls it waits for: a round trip that comes back having
//     answered k calls makes the open batch (opening one) wait for k more
//     calls than it holds, as on a near, busy Redis those callers come back
//     at once. So the callers in flight go out in one large batch rather
//     than in cohorts that take turns: a round trip's read, write and
//     wake-up are most of what Redis spends per acquire (docs/performance.md);
//   - it has been open maxLinger, or, while it waits for no calls, as long
//     as a round trip has lasted lately if that is shorter: on a far Redis a
//     call is sent within maxLinger of its arrival, and a batch opened for
//     callers that do not come back is dropped, or leaves with whoever came.
//
// At most limit round trips are under way, the client's pool size, since
// each holds a connection; past it, the open batch keeps gathering, full ones
// queue, and a round trip that ends takes the oldest.
//
// Every call carries its bound (AcquireWithin's within, or its context's
// deadline if earlier), which its batch keeps (docs/reliability.md, "Every
// acquire within its bound"): no caller waits past it, and a caller that has
// given up takes no permits.
const maxLinger = time.Millisecond

// batchTimeout bounds a batch whose calls have no bound.
const batchTimeout = 2 * time.Second

// newBatcher returns s's batcher, or nil without WithBatching.
func newBatcher(s *Store) *batcher {
	if s.batchMax == 0 {
		return nil
	}
	limit := max(2, poolSize(s.rdb))
	b := &batcher{s: s, max: s.batchMax, limit: limit, maxLinger: maxLinger, ready: make(chan *batch, limit), done: make(chan struct{})}
	b.linger = time.AfterFunc(time.Hour, b.lingered)
	b.linger.Stop()
	return b
}

// poolSize is how many connections rdb keeps to one node at most.
func poolSize(rdb redis.UniversalClient) int {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().PoolSize
	case *redis.ClusterClient:
		return c.Options().PoolSize
	case *redis.Ring:
		return c.Options().PoolSize
	}
	return 10 * runtime.GOMAXPROCS(0) // go-redis' default
}

type batcher struct {
	s     *Store
	max   int // requests a batch gathers at most
	limit int // round trips under way at most

	mu        sync.Mutex
	closed    bool
	inflight  int       // round trips under way: direct calls and running batches
	open      *batch    // gathering calls; nil: none
	lingerAt  time.Time // when open has lingered long enough
	queue     []*batch  // full, waiting for a round trip to end
	free      []*batch
	running   int           // batches handed to workers and not finished
	workers   int           // workers started
	rtt       time.Duration // round trips lately (a moving average): the linger
	maxLinger time.Duration // the constant; tests change it

	linger *time.Timer // lingered, at lingerAt
	ready  chan *batch // batches for the workers
	done   chan struct{}
	wg     sync.WaitGroup
}

// call is one caller's requests, decided in one batch.
type call struct {
	ctx   context.Context
	reqs  []Request
	res   []Outcome // the outcomes, in order, once done is signalled
	until time.Time // when the caller stops waiting (zero: when ctx ends)
	// state is the call's generation times 2, plus 1 once answered (claim,
	// by a worker or a batch's timer): a call reused under the next
	// generation cannot be claimed by a batch that held it before.
	state atomic.Uint64
	done  chan struct{}
	one   [1]Request
	oneR  [1]Outcome
}

var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

// reuse puts c back in the pool once its caller has read its answer.
func (c *call) reuse() {
	c.ctx = nil
	c.state.Add(1) // answered → the next generation, waiting
	callPool.Put(c)
}

// waiting is a call as a batch holds it: the generation it joined under, and
// its number of requests.
type waiting struct {
	c   *call
	gen uint64
	n   int
}

func (w waiting) pending() bool { return w.c.state.Load() == w.gen<<1 }
func (w waiting) claim() bool   { return w.c.state.CompareAndSwap(w.gen<<1, w.gen<<1|1) }

// live reports whether w still waits for an answer at now, answering it if
// its caller gave up or its bound has passed; earliest moves to its bound.
func (w waiting) live(now time.Time, earliest *time.Time) bool {
	if !w.pending() {
		return false
	}
	err := w.c.ctx.Err()
	if u := w.c.until; err == nil && !u.IsZero() {
		if !now.Before(u) {
			err = context.DeadlineExceeded
		} else if earliest.IsZero() || u.Before(*earliest) {
			*earliest = u
		}
	}
	if err != nil {
		w.fail(wrapErr(err))
		return false
	}
	return true
}

// fail answers w with err, unless it has its answer.
func (w waiting) fail(err error) {
	if w.claim() {
		for i := range w.c.res {
			w.c.res[i] = Outcome{Err: err}
		}
		w.c.done <- struct{}{}
	}
}

type batchState uint8

const (
	batchFree    batchState = iota // in the free list
	batchWaiting                   // gathering calls, or queued
	batchRunning                   // with a worker
)

type batch struct {
	state    batchState
	calls    []waiting
	n        int         // the requests of calls
	want     int         // calls at which it leaves (0: none set)
	opened   time.Time   // when it opened: it leaves by maxLinger after
	earliest time.Time   // the earliest bound of calls; zero: none
	bound    *time.Timer // expire, at earliest
}

// callBound is when a caller with ctx and until stops waiting (zero: never).
func callBound(ctx context.Context, until time.Time) time.Time {
	if dl, ok := ctx.Deadline(); ok && (until.IsZero() || dl.Before(until)) {
		return dl
	}
	return until
}

// acquire decides req, waiting until until at most (zero: as ctx allows).
func (b *batcher) acquire(ctx context.Context, req Request, until time.Time) (limitd.Decision, error) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return limitd.Decision{}, ErrClosed
	}
	if b.inflight == 0 && b.open == nil {
		b.inflight++
		b.mu.Unlock()
		start := time.Now()
		d, err := b.s.acquireDirect(ctx, req, until)
		b.directDone(time.Since(start))
		return d, err
	}
	c := callPool.Get().(*call)
	c.one[0] = req
	c.ctx, c.reqs, c.res, c.until = ctx, c.one[:], c.oneR[:], callBound(ctx, until)
	b.add(c)
	b.mu.Unlock()
	if err := b.wait(ctx, c); err != nil {
		return limitd.Decision{}, err // c is not reused: its answer may still come
	}
	o := c.oneR[0]
	c.reuse()
	return o.Decision, o.Err
}

// acquireMany decides reqs in one batch, waiting until until at most.
func (b *batcher) acquireMany(ctx context.Context, reqs []Request, until time.Time) []Outcome {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return failAll(len(reqs), ErrClosed)
	}
	if b.inflight == 0 && b.open == nil {
		b.inflight++
		b.mu.Unlock()
		start := time.Now()
		out := b.s.acquireManyDirectUntil(ctx, reqs, until)
		b.directDone(time.Since(start))
		return out
	}
	c := &call{done: make(chan struct{}, 1), reqs: reqs, res: make([]Outcome, len(reqs))}
	c.ctx, c.until = ctx, callBound(ctx, until)
	b.add(c)
	b.mu.Unlock()
	if err := b.wait(ctx, c); err != nil {
		return failAll(len(reqs), err)
	}
	return c.res
}

// wait waits for c's answer (nil: c.res holds it) or the end of ctx.
func (b *batcher) wait(ctx context.Context, c *call) error {
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		return wrapErr(ctx.Err())
	}
}

// add puts c in the open batch, opening one if need be. Called with b.mu.
func (b *batcher) add(c *call) {
	w := waiting{c: c, gen: c.state.Load() >> 1, n: len(c.reqs)}
	bt := b.open
	if bt != nil && bt.n+w.n > b.max {
		b.seal()
		bt = nil
	}
	if bt == nil {
		bt = b.openBatch()
	}
	bt.calls = append(bt.calls, w)
	bt.n += w.n
	if u := c.until; !u.IsZero() && (bt.earliest.IsZero() || u.Before(bt.earliest)) {
		bt.earliest = u
		bt.bound.Reset(time.Until(u))
	}
	if bt.n >= b.max || bt.want > 0 && len(bt.calls) >= bt.want {
		b.seal()
	}
}

// openBatch opens a batch that lingers as long as a round trip lately, at
// most maxLinger. Called with b.mu, no batch open.
func (b *batcher) openBatch() *batch {
	bt := b.newBatch()
	bt.state = batchWaiting
	bt.opened = time.Now()
	b.open = bt
	d := min(b.rtt, b.maxLinger)
	b.lingerAt = bt.opened.Add(d)
	b.linger.Reset(d)
	return bt
}

// seal ends the open batch's gathering: it leaves, or queues if limit round
// trips are under way. Called with b.mu.
func (b *batcher) seal() {
	bt := b.open
	b.open = nil
	// A linger left to fire after its batch has gone wakes an idle
	// processor for nothing, which costs more per acquire than the stop.
	b.linger.Stop()
	if b.inflight < b.limit {
		b.start(bt)
		return
	}
	bt.state = batchWaiting
	b.queue = append(b.queue, bt)
}

// start hands bt to a worker, starting one if every worker is busy. Called
// with b.mu, fewer than limit round trips under way.
func (b *batcher) start(bt *batch) {
	bt.state = batchRunning
	b.inflight++
	b.running++
	if b.running > b.workers {
		b.workers++
		b.wg.Add(1)
		go b.work()
	}
	b.ready <- bt // room: at most limit batches run
}

// lingered sends the open batch once it has lingered, if fewer than limit
// round trips are under way.
func (b *batcher) lingered() {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.closed || b.open == nil || time.Now().Before(b.lingerAt):
	case len(b.open.calls) == 0: // opened for callers that did not come
		b.recycle(b.open)
		b.open = nil
	case b.inflight < b.limit:
		b.seal()
	}
}

// directDone ends a direct call's round trip and starts what may start.
func (b *batcher) directDone(took time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sample(took)
	b.inflight--
	if b.closed {
		return
	}
	for len(b.queue) > 0 && b.inflight < b.limit {
		bt := b.queue[0]
		b.queue[0] = nil
		b.queue = b.queue[1:]
		b.start(bt)
	}
	if b.open != nil { // (a lone caller goes straight to Redis again)
		b.expect(1)
	}
}

// expect makes the open batch (opening one) wait for answered more calls,
// the callers of a round trip that came back, until maxLinger after it
// opened. Called with b.mu, before those callers are answered.
func (b *batcher) expect(answered int) {
	if answered == 0 {
		return
	}
	bt := b.open
	if bt == nil {
		bt = b.openBatch()
	}
	bt.want = max(bt.want, len(bt.calls)) + answered
	b.lingerAt = bt.opened.Add(b.maxLinger)
	switch d := time.Until(b.lingerAt); {
	case d > 0:
		b.linger.Reset(d)
	case len(bt.calls) == 0:
		b.recycle(bt)
		b.open = nil
	case b.inflight < b.limit:
		b.seal()
	}
}

// sample adds a round trip's time to the moving average. Called with b.mu.
func (b *batcher) sample(took time.Duration) {
	if b.rtt == 0 {
		b.rtt = took
		return
	}
	b.rtt += (took - b.rtt) / 8
}

// workerMem is a worker's memory, kept from one batch to the next.
type workerMem struct {
	calls []waiting
	reqs  []Request
	outs  []Outcome
	sc    batchScratch
}

func (b *batcher) work() {
	defer b.wg.Done()
	var m workerMem
	for {
		select {
		case bt := <-b.ready:
			for bt != nil {
				bt = b.run(bt, &m)
			}
		case <-b.done:
			return
		}
	}
}

// run decides bt in one round trip and returns the batch to run next.
func (b *batcher) run(bt *batch, m *workerMem) *batch {
	// The calls to send: a caller that gave up, or whose bound passed, must
	// not take permits that nobody will use.
	b.mu.Lock()
	now := time.Now()
	m.calls, m.reqs = m.calls[:0], m.reqs[:0]
	var earliest time.Time
	for _, w := range bt.calls {
		if !w.live(now, &earliest) {
			continue
		}
		m.calls = append(m.calls, w)
		m.reqs = append(m.reqs, w.c.reqs...)
	}
	if !earliest.Equal(bt.earliest) {
		bt.earliest = earliest
		bt.bound.Stop()
		if !earliest.IsZero() {
			bt.bound.Reset(earliest.Sub(now))
		}
	}
	b.mu.Unlock()

	var took time.Duration
	if len(m.reqs) > 0 {
		// The batch runs on its own deadline, the earliest bound of its
		// calls: one caller giving up must not fail the others.
		end := now.Add(batchTimeout)
		if !earliest.IsZero() && earliest.Before(end) {
			end = earliest
		}
		ctx, cancel := context.WithDeadline(context.Background(), end)
		m.outs = slices.Grow(m.outs[:0], len(m.reqs))[:len(m.reqs)]
		clear(m.outs)
		start := time.Now()
		b.s.acquireMany(ctx, m.reqs, m.outs, &m.sc)
		took = time.Since(start)
		cancel()
		// Told before they are answered: none can have joined it yet.
		b.mu.Lock()
		b.sample(took)
		if !b.closed {
			b.expect(len(m.calls))
		}
		b.mu.Unlock()
		i := 0
		for _, w := range m.calls {
			if w.claim() {
				copy(w.c.res, m.outs[i:i+w.n])
				w.c.done <- struct{}{}
			}
			i += w.n
		}
		clear(m.calls) // no call kept past its batch
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	b.recycle(bt)
	var next *batch
	switch {
	case b.closed:
	case len(b.queue) > 0:
		next = b.queue[0]
		b.queue[0] = nil
		b.queue = b.queue[1:]
	case b.open != nil && len(b.open.calls) > 0 && (b.open.want == 0 || !time.Now().Before(b.lingerAt)):
		next, b.open = b.open, nil // waiting for nobody, or no longer
		b.linger.Stop()
	}
	if next == nil {
		b.running--
		b.inflight--
		return nil
	}
	next.state = batchRunning
	return next
}

// expire answers, at a batch's earliest bound, the calls whose bound has
// passed: all of a running batch (its round trip ends then too), those of
// a waiting one, which is dropped when none is left.
func (b *batcher) expire(bt *batch) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	if bt.state == batchFree || bt.earliest.IsZero() || now.Before(bt.earliest) {
		return // reused, or moved later since the timer fired
	}
	if bt.state == batchRunning {
		for _, w := range bt.calls {
			w.fail(wrapErr(context.DeadlineExceeded))
		}
		return
	}
	live, n := bt.calls[:0], 0
	var next time.Time
	for _, w := range bt.calls {
		if w.live(now, &next) {
			live = append(live, w)
			n += w.n
		}
	}
	clear(bt.calls[len(live):])
	bt.calls, bt.n, bt.earliest = live, n, next
	if !next.IsZero() {
		bt.bound.Reset(next.Sub(now))
	}
	if len(live) > 0 {
		return
	}
	if b.open == bt {
		b.open = nil
	} else if i := slices.Index(b.queue, bt); i >= 0 {
		b.queue = slices.Delete(b.queue, i, i+1)
	}
	b.recycle(bt)
}

// newBatch returns a free batch. Called with b.mu.
func (b *batcher) newBatch() *batch {
	if n := len(b.free); n > 0 {
		bt := b.free[n-1]
		b.free = b.free[:n-1]
		return bt
	}
	bt := &batch{}
	bt.bound = time.AfterFunc(time.Hour, func() { b.expire(bt) })
	bt.bound.Stop()
	return bt
}

// recycle returns bt to the free list. Called with b.mu.
func (b *batcher) recycle(bt *batch) {
	bt.bound.Stop()
	clear(bt.calls)
	bt.calls, bt.n, bt.earliest, bt.state, bt.want = bt.calls[:0], 0, time.Time{}, batchFree, 0
	b.free = append(b.free, bt)
}

// stop answers every call waiting to leave with ErrClosed and waits for the
// round trips under way.
func (b *batcher) stop() {
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		b.linger.Stop()
		waiting := b.queue
		if b.open != nil {
			waiting = append(waiting, b.open)
		}
		b.open, b.queue = nil, nil
		for _, bt := range waiting {
			b.closeBatch(bt)
		}
		close(b.done)
	}
	b.mu.Unlock()
	b.wg.Wait()
	b.mu.Lock()
	defer b.mu.Unlock()
	for { // a batch handed to a worker that saw done first
		select {
		case bt := <-b.ready:
			b.closeBatch(bt)
		default:
			return
		}
	}
}

// closeBatch answers bt's calls with ErrClosed and frees it. Called with b.mu.
func (b *batcher) closeBatch(bt *batch) {
	for _, w := range bt.calls {
		w.fail(ErrClosed)
	}
	b.recycle(bt)
}

func failAll(n int, err error) []Outcome {
	out := make([]Outcome, n)
	for i := range out {
		out[i].Err = err
	}
	return out
}
