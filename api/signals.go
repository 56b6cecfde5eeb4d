package api

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/wire"
)

// Settings of the signals sampler. Fixed, as the event hub's.
const (
	// signalStep is how often every named limiter is sampled.
	signalStep = time.Second
	// historyLen is how many samples a limiter's history keeps: 15 minutes
	// at one a second. A sample costs 40 bytes (TestSampleSize), so a
	// limiter's history at most 36 KiB, and maxSignalLimiters' about 35 MiB.
	historyLen = 900
	// maxSignalLimiters bounds the limiters sampled: the first ones in name
	// order. A round reads their live states in pipelines of sampleBatch
	// (the rate limiters' in one pipeline each, a lease limiter's holders
	// one round trip each), their configs only after a change.
	maxSignalLimiters = 1000
	// utilizationSpan is the span a rate limiter's utilization is measured
	// over, in samples: its granted permits/s over the last 10 s.
	utilizationSpan = 10
	// relistRounds is how often the named limiters are listed again besides
	// after a published change (a change missed while Redis was away).
	relistRounds = 30
	// saturatedUtilization is the utilization from which a limiter counts
	// as saturated even with no caller refused or waiting.
	saturatedUtilization = 0.95
)

// sample is one limiter's signals as kept in its history: wire.Signals in
// 40 bytes rather than 64.
type sample struct {
	t, wait                    int64
	granted, grantedCalls      float32
	refused, refusedCalls, use float32
	saturated                  bool
}

func (s sample) wire() wire.Signals {
	return wire.Signals{T: s.t, GrantedPerS: wide(s.granted), GrantedCallsPerS: wide(s.grantedCalls),
		RefusedPerS: wide(s.refused), RefusedCallsPerS: wide(s.refusedCalls),
		Utilization: wide(s.use), Wait: s.wait, Saturated: s.saturated}
}

// wide is f as the float64 of its shortest decimal: 0.4, not
// 0.4000000059604645.
func wide(f float32) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(float64(f), 'g', -1, 32), 64)
	return v
}

// totalsOf is l's decision totals, counted in Redis by every limitd
// sharing it (core.Ledger). While they have counted nothing for this series
// (no ledger, or none decided on it yet), a rate limiter's state still
// tells the permits it granted; once they have, they alone count, so that
// totals that expire after a long idle read as going back, not as the
// state's whole count granted in one second.
func (s *series) totalsOf(l core.Limiter) core.Totals {
	var t core.Totals
	if l.Totals != nil {
		t = *l.Totals
	}
	if t != (core.Totals{}) {
		s.counted = true
	}
	if !s.counted && l.State != nil && !l.State.Window {
		t.GrantedPermits = l.State.Permits
	}
	return t
}

// point is a limiter's totals at a Redis time.
type point struct {
	now int64
	core.Totals
}

// series is one limiter's history: its last utilizationSpan+1 points and
// its last historyLen samples, both rings.
type series struct {
	kind    limiter.Kind
	points  [utilizationSpan + 1]point
	npoints int // points kept, up to len(points); the newest at (npoints-1)%len
	samples []sample
	next    int  // where the next sample goes once samples is full
	counted bool // its totals in Redis counted something: they alone count
}

// add keeps p, forgetting what came before when the totals went back (the
// limiter was created again, or Redis lost it): rates are measured from p.
func (s *series) add(p point) {
	if s.npoints > 0 {
		last := s.point(0)
		if p.now <= last.now || p.GrantedPermits < last.GrantedPermits || p.GrantedCalls < last.GrantedCalls ||
			p.RefusedPermits < last.RefusedPermits || p.RefusedCalls < last.RefusedCalls {
			s.npoints = 0
		}
	}
	s.points[s.npoints%len(s.points)] = p
	s.npoints++
}

// point is the point back samples before the newest (0: the newest); ok is
// false when there is none that old, and then it is the oldest.
func (s *series) point(back int) point {
	back = min(back, s.npoints-1, len(s.points)-1)
	return s.points[(s.npoints-1-back)%len(s.points)]
}

// keep appends sm to the history, the oldest dropped past historyLen.
func (s *series) keep(sm sample) {
	if len(s.samples) < historyLen {
		s.samples = append(s.samples, sm)
		return
	}
	s.samples[s.next] = sm
	s.next = (s.next + 1) % historyLen
}

// last is the newest sample; ok is false before the first.
func (s *series) last() (sample, bool) {
	switch {
	case len(s.samples) == 0:
		return sample{}, false
	case len(s.samples) < historyLen:
		return s.samples[len(s.samples)-1], true
	}
	return s.samples[(s.next+historyLen-1)%historyLen], true
}

// history is the samples oldest first.
func (s *series) history() []wire.Signals {
	out := make([]wire.Signals, 0, len(s.samples))
	for i := range s.samples {
		out = append(out, s.samples[(s.next+i)%len(s.samples)].wire())
	}
	return out
}

// perSecond is a count's rate between two points.
func perSecond(d, ns int64) float64 {
	if ns <= 0 || d <= 0 {
		return 0
	}
	return float64(d) * float64(time.Second) / float64(ns)
}

// signal is l's sample, its totals added to s first.
func (s *series) signal(l core.Limiter, now int64) sample {
	s.add(point{now: now, Totals: s.totalsOf(l)})
	cur := s.point(0)
	var sm sample
	sm.t = now
	if s.npoints > 1 {
		prev := s.point(1)
		dt := cur.now - prev.now
		sm.granted = float32(perSecond(cur.GrantedPermits-prev.GrantedPermits, dt))
		sm.grantedCalls = float32(perSecond(cur.GrantedCalls-prev.GrantedCalls, dt))
		sm.refused = float32(perSecond(cur.RefusedPermits-prev.RefusedPermits, dt))
		sm.refusedCalls = float32(perSecond(cur.RefusedCalls-prev.RefusedCalls, dt))
	}
	use, wait := utilization(l, s), waitOf(l)
	sm.use, sm.wait = float32(use), wait
	sm.saturated = sm.refused > 0 || sm.refusedCalls > 0 || queued(l, wait) || use >= saturatedUtilization
	return sm
}

// queued reports whether a new caller's wait says callers queue: a full
// window or concurrency limiter (any wait), a rate limiter whose next permit
// is further away than the pace of two permits. A rate limiter used well
// below its rate still has its next permit up to one interval ahead right
// after a grant; that is pacing, not a queue.
func queued(l core.Limiter, wait int64) bool {
	if wait <= 0 {
		return false
	}
	if l.State != nil && !l.State.Window && l.Config.Rate > 0 {
		return float64(wait) > 2*float64(time.Second)/l.Config.Rate
	}
	return true
}

// utilization is how much of l's capacity is used, by kind: a rate
// limiter's granted permits/s over the last utilizationSpan samples over its
// rate; a window's permits taken over its limit; a share limiter's capacity
// held over its capacity; a concurrency limiter's slots in use over its
// limit.
func utilization(l core.Limiter, s *series) float64 {
	c := l.Config
	switch {
	case l.State != nil && l.State.Window:
		if l.State.Limit <= 0 {
			return 0
		}
		remaining := l.State.Wait
		if !l.State.Started {
			remaining = l.State.Limit
		}
		return float64(l.State.Limit-remaining) / float64(l.State.Limit)
	case l.State != nil:
		if c.Rate <= 0 || s.npoints < 2 {
			return 0
		}
		cur, back := s.point(0), s.point(utilizationSpan)
		return perSecond(cur.GrantedPermits-back.GrantedPermits, cur.now-back.now) / c.Rate
	case l.Holders != nil && l.Holders.Kind == limiter.KindShare:
		if c.Capacity == nil || *c.Capacity <= 0 {
			return 0
		}
		return l.Holders.Held / *c.Capacity
	case l.Holders != nil && l.Holders.Kind == limiter.KindConcurrency:
		if c.Limit == nil || *c.Limit <= 0 {
			return 0
		}
		return float64(len(l.Holders.Slots)) / float64(*c.Limit)
	}
	return 0
}

// waitOf is how long a new caller asking 1 permit would wait now: a rate
// limiter's delay; a full window's time until it resets; a full
// concurrency limiter's time until its first lease expires. A share lease
// is never waited for.
func waitOf(l core.Limiter) int64 {
	switch {
	case l.State != nil && l.State.Window:
		if l.State.Started && l.State.Wait <= 0 {
			return max(0, l.State.Position-l.State.Now)
		}
		return 0
	case l.State != nil:
		return max(0, l.State.Delay)
	case l.Holders != nil && l.Holders.Kind == limiter.KindConcurrency:
		if lim := l.Config.Limit; lim != nil && int64(len(l.Holders.Slots)) >= int64(*lim) && len(l.Holders.Slots) > 0 {
			return max(0, l.Holders.Slots[0].Expires-l.Holders.Now)
		}
	}
	return 0
}

// signals samples every named limiter (the first maxSignalLimiters in name
// order) once every signalStep while Run runs, whether or not anyone
// watches: so that a page opened now shows the last 15 minutes (GET
// /v1/history), every event stream the same signals, and /metrics each
// limiter's utilization and wait. Its samples are computed from what Redis
// holds (states and decision totals), so every limitd sharing the Redis
// shows the same. It also keeps the status event streams send.
type signals struct {
	svc       *core.Service
	timeout   time.Duration
	newTicker func(time.Duration) ticker
	// status is told every status that differs from the one before.
	status   func(wire.StreamStatus)
	embedded bool // Options.EmbeddedRedis

	mu     sync.Mutex
	series map[string]*series
	last   wire.StreamStatus
	known  bool   // last was set
	count  int    // limiters listed in the last round
	rounds uint64 // rounds done
}

func newSignals(s *server) *signals {
	return &signals{svc: s.core, timeout: s.timeout, newTicker: newTimeTicker, series: map[string]*series{}, embedded: s.embedded}
}

// of is name's newest signals, nil before its first sample or when it is
// not sampled.
func (g *signals) of(name string) *wire.Signals {
	g.mu.Lock()
	defer g.mu.Unlock()
	s, ok := g.series[name]
	if !ok {
		return nil
	}
	sm, ok := s.last()
	if !ok {
		return nil
	}
	w := sm.wire()
	return &w
}

// history is each of names' samples, oldest first (empty for a limiter not
// sampled).
func (g *signals) history(names []string) map[string][]wire.Signals {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[string][]wire.Signals, len(names))
	for _, n := range names {
		out[n] = []wire.Signals{}
		if s, ok := g.series[n]; ok {
			out[n] = s.history()
		}
	}
	return out
}

// lasts calls f with each sampled limiter's newest sample.
func (g *signals) lasts(f func(name string, sm sample)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for n, s := range g.series {
		if sm, ok := s.last(); ok {
			f(n, sm)
		}
	}
}

// run samples every signalStep until ctx ends, the first round at once.
func (g *signals) run(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	changes := g.svc.Changes(ctx)
	r := &signalRounds{g: g, sampler: g.svc.Sampler()}
	tick := g.newTicker(signalStep)
	defer tick.Stop()
	r.round(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case ch, open := <-changes:
			if open {
				r.sampler.Changed(ch.Limiter)
				r.relist = true
			}
		case <-tick.C():
			r.round(ctx)
		}
	}
}

// signalRounds is the state of run, its goroutine's alone.
type signalRounds struct {
	g       *signals
	sampler *core.Sampler
	names   []string
	relist  bool
	rounds  uint64
}

// round samples every listed limiter once and tells the status.
func (r *signalRounds) round(ctx context.Context) {
	g := r.g
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	r.rounds++
	var failed error
	// With no limiter listed, the list is what tells Redis is there.
	if len(r.names) == 0 || r.relist || r.rounds%relistRounds == 0 {
		page, err := g.svc.List(ctx, "", maxSignalLimiters)
		if err == nil {
			r.names, r.relist = r.names[:0], false
			for _, info := range page.Limiters {
				r.names = append(r.names, info.Name)
			}
		} else {
			failed = err
		}
	}
	type read struct {
		name string
		l    core.Limiter
	}
	var reads []read
	gone := map[string]bool{}
	if failed == nil {
		for batch := range slices.Chunk(r.names, sampleBatch) {
			ls, errs := r.sampler.GetAll(ctx, batch)
			for i, n := range batch {
				switch err := errs[i]; {
				case err == nil:
					reads = append(reads, read{n, ls[i]})
				case errors.Is(err, core.ErrNotFound):
					gone[n] = true
				case unknownLayout(err):
					// its state only a newer limitd reads: not sampled here
				default:
					failed = err
				}
			}
		}
	}
	if ctx.Err() != nil && failed == nil {
		failed = ctx.Err()
	}
	if len(gone) > 0 {
		r.names = slices.DeleteFunc(r.names, func(n string) bool { return gone[n] })
	}

	g.mu.Lock()
	listed := make(map[string]bool, len(r.names))
	for _, n := range r.names {
		listed[n] = true
	}
	for n := range g.series {
		if !listed[n] {
			delete(g.series, n) // deleted, or past the cap now
		}
	}
	for _, rd := range reads {
		var now int64
		switch {
		case rd.l.State != nil:
			now = rd.l.State.Now
		case rd.l.Holders != nil:
			now = rd.l.Holders.Now
		default:
			continue
		}
		s := g.series[rd.name]
		if s == nil || s.kind != rd.l.Config.Kind {
			s = &series{kind: rd.l.Config.Kind}
			g.series[rd.name] = s
		}
		s.keep(s.signal(rd.l, now))
	}
	g.count = len(r.names)
	g.mu.Unlock()
	g.tell(failed)
	g.mu.Lock()
	g.rounds++ // after the status: a round is done once told
	g.mu.Unlock()
}

// tell works out the status after a round (failed: why Redis could not
// serve it) and hands it to status when it changed.
func (g *signals) tell(failed error) {
	st := wire.StreamStatus{Redis: redisUp(g.embedded)}
	if failed != nil && errors.Is(failed, core.ErrUnavailable) || errors.Is(failed, context.DeadlineExceeded) {
		st.Redis, st.RedisDetail = redisDown(g.svc, failed)
	}
	at, pending, _ := g.svc.DataLoss()
	st.DataLost, st.Ready = at, wire.RedisServing(st.Redis) && !pending
	g.mu.Lock()
	st.Limiters = g.count
	changed := !g.known || st != g.last
	g.last, g.known = st, true
	g.mu.Unlock()
	if changed && g.status != nil {
		g.status(st)
	}
}

// probe works out a status without a round (none ran yet): whether Redis
// can serve, and how many limiters it names.
func (g *signals) probe(ctx context.Context) wire.StreamStatus {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	st := wire.StreamStatus{Redis: redisUp(g.embedded)}
	err := g.svc.Ready(ctx)
	at, pending, _ := g.svc.DataLoss()
	switch {
	case err == nil:
		st.Ready = true
	case errors.Is(err, core.ErrDataLost):
	default:
		st.Redis, st.RedisDetail = redisDown(g.svc, err)
	}
	st.DataLost, st.Ready = at, st.Ready && !pending
	if wire.RedisServing(st.Redis) {
		if page, err := g.svc.List(ctx, "", maxSignalLimiters); err == nil {
			st.Limiters = len(page.Limiters)
		}
	}
	return st
}
