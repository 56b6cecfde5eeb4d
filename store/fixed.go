package store

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/internal/clockoffset"
	"github.com/limitd/limitd/lua"
)

// Fixed windows counted in plain Redis integers, without a script
// (Request.Fixed): their keys, the estimate of Redis' clock that picks a
// window and its bounds are told in docs/envoy.md, "Window counters in Redis".

// Fixed is a fixed window: Limit hits per Period (a whole number of ms),
// the windows aligned to the Unix epoch.
type Fixed struct {
	Limit  int64
	Period time.Duration
}

const (
	fixedMaxRTT = 50 * time.Millisecond // the longest round trip an estimate is trusted from
	fixedMaxAge = 10 * time.Second      // how long an estimate is trusted without a new sample
	// fixedSlack is how much longer than its period a count lives: past
	// its window's end in Redis' clock, whatever the estimate's error.
	fixedSlack = time.Second
	// fixedExpireDelay is how long a new count's PEXPIRE waits for a
	// pipeline to go with before it goes alone.
	fixedExpireDelay = 100 * time.Millisecond
	fixedMaxPending  = 1 << 16 // PEXPIREs kept while Redis does not answer
)

// fixedKey is the count of name's window starting at start (Unix ns): made
// in one allocation (every counter of every batch makes one).
func (s *Store) fixedKey(name string, start int64) string {
	var ms [20]byte
	return s.prefix + ":{" + name + "}:n:" + string(strconv.AppendInt(ms[:0], start/1e6, 10))
}

func (s *Store) fixedBase(name string) string { return s.prefix + ":{" + name + "}:n:" }

// fixedClock is the store's estimate of Redis' clock, and the PEXPIREs not
// sent yet.
type fixedClock struct {
	now            func() int64 // the local monotonic clock, ns (WithLocalClock)
	maxRTT, maxAge int64        // fixedMaxRTT, fixedMaxAge (tests change them)

	mu      sync.Mutex
	est     clockoffset.Estimator
	off     int64 // Redis ns − local ns
	rtt     int64 // the round trip of the last sample, which bounds off's error
	at      int64 // when it was taken (local)
	sampled bool
	pending []fixedExpire
	timer   *time.Timer
	closed  bool

	flushing sync.Mutex   // held while a flush is under way
	scripted atomic.Int64 // calls of fixedScript (tests)
}

type fixedExpire struct {
	key string
	ttl time.Duration
}

func (c *fixedClock) init() {
	c.maxRTT, c.maxAge = int64(fixedMaxRTT), int64(fixedMaxAge)
	if c.now == nil {
		base := time.Now()
		c.now = func() int64 { return int64(time.Since(base)) }
	}
}

// estimate is Redis' time at local time t, the bound of its error, and
// whether it is bounded. (A sample a concurrent pipeline took after t may be
// a little later than t; much later, the local clock went back.)
func (c *fixedClock) estimate(t int64) (now, bound int64, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ok = c.sampled && c.rtt <= c.maxRTT && t-c.at <= c.maxAge && c.at-t <= c.maxRTT
	return t + c.off, c.rtt, ok
}

// sample records a TIME answer, redisNow, of a round trip from t0 to t1.
func (c *fixedClock) sample(redisNow, t0, t1 int64) {
	if t1 < t0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.off = c.est.Sample(redisNow, t0, t1)
	c.rtt, c.at, c.sampled = t1-t0, t1, true
}

func (c *fixedClock) forget() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sampled = false
}

// expireLater queues PEXPIREs for the next pipeline, or fixedExpireDelay.
func (c *fixedClock) expireLater(s *Store, es []fixedExpire) {
	if len(es) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || len(c.pending) >= fixedMaxPending {
		return
	}
	c.pending = append(c.pending, es...)
	if c.timer == nil {
		c.timer = time.AfterFunc(fixedExpireDelay, func() { c.flush(s) })
	} else if len(c.pending) == len(es) {
		c.timer.Reset(fixedExpireDelay)
	}
}

// takeExpires takes the queued PEXPIREs, for a pipeline about to go.
func (c *fixedClock) takeExpires() []fixedExpire {
	c.mu.Lock()
	defer c.mu.Unlock()
	es := c.pending
	c.pending = nil
	if c.timer != nil {
		c.timer.Stop()
	}
	return es
}

// flush sends the queued PEXPIREs in a pipeline of their own, queueing
// them again when Redis does not take them.
func (c *fixedClock) flush(s *Store) {
	c.flushing.Lock()
	defer c.flushing.Unlock()
	es := c.takeExpires()
	if len(es) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, e := range es {
			p.PExpire(ctx, e.key, e.ttl)
		}
		return nil
	})
	if err != nil {
		c.expireLater(s, es)
	}
}

// close stops the timer and queueing, then sends what is queued, once (a
// flush the timer started waits, or finds nothing left).
func (c *fixedClock) close(s *Store) {
	c.mu.Lock()
	c.closed = true
	if c.timer != nil {
		c.timer.Stop()
	}
	c.mu.Unlock()
	c.flush(s)
}

// fixedGroup is the requests of a batch on one fixed counter.
type fixedGroup struct {
	name        string
	f           Fixed
	reqs        []int
	sum         int64 // their hits
	start       int64 // the window (Unix ns, Redis clock)
	now         int64 // the decision's Redis time
	count       int64 // the count after them
	err         error
	incr        *redis.IntCmd
	get         *redis.StringCmd
	againScript bool
}

// fixedCount is the fixed windows of a batch and the commands that count
// them (queueFixed's).
type fixedCount struct {
	gs         []fixedGroup
	t0         int64 // when the pipeline was made (the local clock)
	sent       bool  // queued: the estimate was bounded
	est, bound int64 // the estimate at t0 and its bound
	tc         *redis.TimeCmd
	es         []fixedExpire // the PEXPIREs it carries
	ecs        []*redis.BoolCmd
}

// fixedCountOf groups the requests of reqs that have Fixed by counter
// (errors in out); nil when there is none.
func (s *Store) fixedCountOf(reqs []Request, out []Outcome) *fixedCount {
	var gs []fixedGroup
	var by map[string]int
	for i := range reqs {
		r := &reqs[i]
		if r.Fixed == nil {
			continue
		}
		if err := r.check(); err != nil {
			out[i].Err = err
			continue
		}
		if err := checkFixed(r); err != nil {
			out[i].Err = err
			continue
		}
		if gs == nil { // sized once for a batch of as many counters
			gs, by = make([]fixedGroup, 0, len(reqs)-i), make(map[string]int, len(reqs)-i)
		}
		k, ok := by[r.Name]
		if !ok {
			k = len(gs)
			by[r.Name] = k
			gs = append(gs, fixedGroup{name: r.Name, f: *r.Fixed})
		}
		gs[k].reqs = append(gs[k].reqs, i)
		gs[k].sum += r.Permits
	}
	if len(gs) == 0 {
		return nil
	}
	return &fixedCount{gs: gs}
}

func (s *Store) countFixed(ctx context.Context, fc *fixedCount, reqs []Request, out []Outcome) {
	p := s.rdb.Pipeline()
	if s.queueFixed(ctx, p, fc) {
		pipelineErr(p.Exec(ctx))
		s.readFixed(fc)
	}
	s.finishFixed(ctx, fc, reqs, out)
}

// finishFixed counts by the script what fc's pipeline could not count, and
// writes the outcomes of fc's requests into out.
func (s *Store) finishFixed(ctx context.Context, fc *fixedCount, reqs []Request, out []Outcome) {
	gs := fc.gs
	if !fc.sent {
		s.fixedScript(ctx, gs)
	} else {
		var again []*fixedGroup
		for k := range gs {
			if gs[k].againScript {
				again = append(again, &gs[k])
			}
		}
		if len(again) > 0 {
			s.fixedAgain(ctx, again)
		}
	}
	for k := range gs {
		g := &gs[k]
		c := g.count - g.sum
		end := g.start + int64(g.f.Period)
		for _, i := range g.reqs {
			if g.err != nil {
				out[i] = Outcome{Err: g.err}
				continue
			}
			n := reqs[i].Permits
			c += n
			out[i] = Outcome{Decision: fixedDecision(g.f.Limit, c, n, g.now, end)}
		}
	}
}

func checkFixed(r *Request) error {
	switch f := r.Fixed; {
	case !r.Charge:
		return fmt.Errorf("store: %q: a fixed window counts charges only", r.Name)
	case f.Period < time.Millisecond || f.Period%time.Millisecond != 0:
		return fmt.Errorf("store: %q: a fixed window's period must be whole ms (got %v)", r.Name, f.Period)
	case f.Limit < 0:
		return fmt.Errorf("store: %q: a fixed window's limit must be ≥ 0 (got %d)", r.Name, f.Limit)
	}
	return nil
}

// fixedDecision is a charge of n that brought a window to count, as
// window.lua's window_rec answers it.
func fixedDecision(limit, count, n, now, end int64) limitd.Decision {
	left, delay := limit-count, int64(0)
	if left < 1 {
		delay, left = end-now, max(left, 0)
	}
	return limitd.Decision{Charged: true, Granted: count <= limit, Permits: n, Wait: left, Delay: delay, Count: count,
		Now: now, Scheduled: now, Start: now, Position: end, Window: true, Limit: limit, Instance: true}
}

// queueFixed queues on p an INCRBY (GET for a check) per group of fc in
// the window of the estimate now, a TIME and the queued PEXPIREs; false,
// having queued nothing, when the estimate is not bounded.
func (s *Store) queueFixed(ctx context.Context, p redis.Pipeliner, fc *fixedCount) bool {
	fc.t0 = s.fixed.now()
	est, bound, ok := s.fixed.estimate(fc.t0)
	if !ok {
		return false
	}
	fc.sent, fc.est, fc.bound = true, est, bound
	fc.es = s.fixed.takeExpires()
	fc.tc = p.Time(ctx)
	fc.ecs = make([]*redis.BoolCmd, len(fc.es))
	for i, e := range fc.es {
		fc.ecs[i] = p.PExpire(ctx, e.key, e.ttl)
	}
	for k := range fc.gs {
		g := &fc.gs[k]
		g.start, g.now = est-mod(est, int64(g.f.Period)), est
		if key := s.fixedKey(g.name, g.start); g.sum > 0 {
			g.incr = redis.NewIntCmd(ctx, "incrby", key, g.sum)
			_ = p.Process(ctx, once{g.incr}) // at most once: see once
		} else {
			g.get = p.Get(ctx, key)
		}
	}
	return true
}

// readFixed reads the answers of queueFixed's commands, just after their
// pipeline came back, marking againScript a group whose window the
// pipeline's TIME shows wrong.
func (s *Store) readFixed(fc *fixedCount) {
	t1 := s.fixed.now()
	est, bound, rtt := fc.est, fc.bound, t1-fc.t0
	tm, terr := fc.tc.Result()
	if terr == nil {
		s.fixed.sample(tm.UnixNano(), fc.t0, t1)
	} else {
		s.fixed.forget() // no TIME answer: the next call goes by the script
	}
	var later []fixedExpire // those Redis did not take, and the new counts'
	for i, c := range fc.ecs {
		if c.Err() != nil {
			later = append(later, fc.es[i])
		}
	}
	for k := range fc.gs {
		g := &fc.gs[k]
		var err error
		if g.incr != nil {
			g.count, err = g.incr.Result()
			if err == nil && g.count == g.sum {
				later = append(later, fixedExpire{s.fixedKey(g.name, g.start), g.f.Period + fixedSlack})
			}
		} else {
			g.count, err = g.get.Int64()
			if err == redis.Nil {
				g.count, err = 0, nil
			}
		}
		if err != nil {
			g.err = wrapErr(err)
			continue
		}
		// An estimate within its bound puts TIME in [est − bound, est + rtt
		// + bound]; beyond, the local clock jumped: the decision is at TIME,
		// and a count in another window than TIME's is counted again.
		if r := tm.UnixNano(); terr == nil && (r < est-bound || r > est+rtt+bound) {
			if g.start <= r && r < g.start+int64(g.f.Period) {
				g.now = r
			} else {
				g.againScript = true
			}
		}
	}
	s.fixed.expireLater(s, later)
}

// fixedAgain takes back gs' hits and counts them by the script.
func (s *Store) fixedAgain(ctx context.Context, gs []*fixedGroup) {
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, g := range gs {
			if g.sum > 0 {
				p.DecrBy(ctx, s.fixedKey(g.name, g.start), g.sum)
			}
		}
		return nil
	})
	redo := make([]fixedGroup, len(gs))
	for i, g := range gs {
		redo[i] = fixedGroup{name: g.name, f: g.f, sum: g.sum}
	}
	if err != nil {
		for _, g := range gs {
			g.err = wrapErr(err)
		}
		return
	}
	s.fixedScript(ctx, redo)
	for i, g := range gs {
		g.start, g.now, g.count, g.err = redo[i].start, redo[i].now, redo[i].count, redo[i].err
	}
}

// fixedScript counts gs by lua/fixed.lua at Redis' own TIME, which it
// samples: one call on a single server, one per counter elsewhere.
func (s *Store) fixedScript(ctx context.Context, gs []fixedGroup) {
	type call struct {
		gs     []fixedGroup
		keys   []string
		args   []any
		cmd    *redis.Cmd
		t0, t1 int64 // its round trip (the local clock)
	}
	var calls []*call
	_, single := s.rdb.(*redis.Client)
	for k := range gs {
		if k == 0 || !single {
			calls = append(calls, &call{})
		}
		c := calls[len(calls)-1]
		g := gs[k]
		c.gs = gs[k-len(c.keys) : k+1]
		c.keys = append(c.keys, s.fixedBase(g.name))
		c.args = append(c.args, int64(g.f.Period/time.Millisecond), int64((g.f.Period+fixedSlack)/time.Millisecond), g.sum)
	}
	s.fixed.scripted.Add(1)
	send := func(verb, fn string, cs []*call) {
		t0 := s.fixed.now()
		_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, c := range cs {
				c.cmd = onceCmd(ctx, verb, fn, c.keys, c.args)
				_ = p.Process(ctx, once{c.cmd}) // at most once: see once
			}
			return nil
		})
		t1 := s.fixed.now()
		for _, c := range cs {
			c.t0, c.t1 = t0, t1
		}
	}
	send("evalsha", s.scripts[lua.Fixed].Hash(), calls)
	var missing []*call // on nodes without the script, which ran nothing
	for _, c := range calls {
		if isNoScript(c.cmd.Err()) {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		send("eval", lua.Source(lua.Fixed), missing) // EVAL loads it for the next calls
	}
	for _, c := range calls {
		v, err := c.cmd.Int64Slice()
		if err == nil && len(v) != 2+2*len(c.keys) {
			err = fmt.Errorf("store: fixed window: %d values, want %d: %w", len(v), 2+2*len(c.keys), ErrBadReply)
		}
		if err != nil {
			for k := range c.gs {
				c.gs[k].err = wrapErr(err)
			}
			continue
		}
		now := v[0]*1e9 + v[1]*1e3
		s.fixed.sample(now, c.t0, c.t1)
		for k := range c.gs {
			g := &c.gs[k]
			g.now, g.start, g.count = now, v[2+2*k]*1e6, v[3+2*k]
		}
	}
}

// mod is a mod m in [0, m) (m > 0).
func mod(a, m int64) int64 {
	r := a % m
	if r < 0 {
		r += m
	}
	return r
}

// FixedWait reads name's fixed window of f that holds Redis' time now,
// counting nothing, as Wait reads a window limiter's state: Wait is the hits
// left, Delay the time until one is, Position the window's end, Limit
// f.Limit, and Started once the window has counted a hit. A fixed window
// keeps no totals.
func (s *Store) FixedWait(ctx context.Context, name string, f Fixed) (limitd.WaitInfo, error) {
	gs, err := s.fixedRead(ctx, []string{name}, f)
	if err != nil {
		return limitd.WaitInfo{}, err
	}
	g := gs[0]
	d := fixedDecision(f.Limit, g.count, 0, g.now, g.start+int64(f.Period))
	return limitd.WaitInfo{Wait: d.Wait, Delay: d.Delay, Now: d.Now, Started: g.count > 0, Instance: true,
		Position: d.Position, Window: true, Limit: f.Limit}, nil
}

// FixedCounts reads the counts of names' fixed windows of period that hold
// Redis' time now, counting nothing.
func (s *Store) FixedCounts(ctx context.Context, names []string, period time.Duration) ([]int64, error) {
	gs, err := s.fixedRead(ctx, names, Fixed{Period: period})
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(gs))
	for i, g := range gs {
		out[i] = g.count
	}
	return out, nil
}

func (s *Store) fixedRead(ctx context.Context, names []string, f Fixed) ([]fixedGroup, error) {
	gs := make([]fixedGroup, len(names))
	for i, n := range names {
		gs[i] = fixedGroup{name: n, f: f}
		if err := checkFixed(&Request{Name: n, Charge: true, Fixed: &f}); err != nil {
			return nil, err
		}
	}
	s.fixedScript(ctx, gs)
	for _, g := range gs {
		if g.err != nil {
			return nil, g.err
		}
	}
	return gs, nil
}

// FixedReset starts name's fixed windows of f afresh: the counts of the
// window now and of those before and after it (where a store's estimate of
// Redis' clock may count now) are deleted. It is idempotent.
func (s *Store) FixedReset(ctx context.Context, name string, f Fixed) error {
	if err := checkFixed(&Request{Name: name, Charge: true, Fixed: &f}); err != nil {
		return err
	}
	_, err := s.runAny(ctx, lua.FixedReset, []string{s.fixedBase(name)}, int64(f.Period/time.Millisecond))
	return err
}
