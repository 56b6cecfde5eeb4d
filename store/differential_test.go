package store_test

// The differential test (DESIGN §2): the Lua scripts in Redis and the Go model
// in limiter/ must give identical results, to the nanosecond, for the same
// sequence of calls at the same times.
//
// A diffRig drives one limiter through store.Store (miniredis or a real
// redis-server) and a limiter.State/limiter.Params model side by side. After
// every operation it compares the operation's result field by field, the
// limiter's live view (Store.Wait against Params.Peek), and the raw state the
// scripts keep in the limiter's hash (see lua/lib.lua, "Storage": the packed
// state st, ep, org, nx, pc, rem, sto and totals al, id, pm, lt, decoded by
// store.ReadStored) against the model's State, so a divergence
// is caught at the operation that causes it, not later.
//
// With miniredis the Redis clock is set by the test (SetTime, µs resolution;
// the model sees now_ns = µs·1000). A real redis-server has no settable clock:
// there the model is fed the Redis time each decision reports (Decision.Now,
// WaitInfo.Now); for Put and Reset, whose replies carry no time, the time the
// script saw is found among the µs between a TIME before and a TIME after the
// call as the one whose model state equals the state the script wrote.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/internal/testkit/redistest"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

const (
	diffHorizon = limiter.Horizon
	diffFar     = 1 << 52 // lua/lib.lua FAR
)

// diffGrant is a grant the rig may later hand a tail of back.
type diffGrant struct {
	g         limitd.Grant   // the store's grant
	r         limiter.Result // the model's result
	p         limiter.Params // the model's params at the grant
	remBefore int64          // the model's carry before the grant
	end       int64          // the model's Next after the grant
	ver       int64          // the limiter's version at the grant
}

// diffRig is one limiter driven through the store and through the model.
type diffRig struct {
	t    testing.TB
	ctx  context.Context
	mr   *miniredis.Miniredis // nil: a real redis-server, whose clock runs by itself
	rdb  *redis.Client
	st   *store.Store
	name string
	key  string // the limiter's hash (store's key layout: <prefix>:{name}:l)
	us   int64  // miniredis: the Redis clock, Unix µs

	// the model
	exists  bool
	cfg     limiter.Config // normalized
	cfgJSON string
	p       limiter.Params
	s       limiter.State
	ver     int64
	grants  []diffGrant

	// where we are, for messages
	label string
	op    int
	hist  []string
	ops   map[string]int

	lastEp float64 // the epoch last seen in the hash, to count rebases

	// floors: the floor the store sends with the call under way (taken
	// before it), applied to the model before its first request in range;
	// snap is a copy of the limiter's keys and the model, for a fault that
	// brings an older state back (a failover that lost writes)
	floor    *limiter.Floor
	snap     *diffSnap
	maxSched int64 // the latest scheduled start granted, to check floors
	faulted  bool  // a fault or a clock step back happened: floors may move the schedule

	// template mode: the rig drives an instance of a template (g.p, g.s, g.ver
	// are the instance as stored; tp, tver the template's latest version,
	// which the scripts move the instance to on its next saved use)
	tpl        bool
	tcfg       limiter.Config
	tcfgJSON   string
	tp         limiter.Params
	tver       int64
	instExists bool
	tplIdle    *limiter.Duration // the template's idle_ttl (nil: store's default)
}

func diffNewMini(t testing.TB, label string, startUS int64) *diffRig {
	m, rdb := redistest.Mini(t)
	g := &diffRig{t: t, ctx: context.Background(), mr: m, rdb: rdb, st: store.New(rdb),
		name: "diff", key: store.DefaultPrefix + ":{diff}:x", label: label, ops: map[string]int{}}
	g.setTime(startUS)
	return g
}

// diffNewTemplate drives an instance of template "diff-tpl" (pattern "t:*").
func diffNewTemplate(t testing.TB, label string, startUS int64) *diffRig {
	g := diffNewMini(t, label, startUS)
	g.tpl, g.name, g.key = true, "t:diff", store.DefaultPrefix+":{t:diff}:i"
	return g
}

// tplResolve is the instance as the scripts' resolve sees it at now: fresh
// from the template if it does not exist, moved to a newer template version
// (limiter.Reconfigure, which may change its kind) if there is one.
func (g *diffRig) tplResolve(now int64) (limiter.Params, limiter.State, int64) {
	if !g.instExists {
		return g.tp, limiter.State{}, g.tver
	}
	if g.tver > g.ver {
		s, old := g.s, g.p
		limiter.Reconfigure(&s, now, &old, &g.tp)
		return g.tp, s, g.tver
	}
	return g.p, g.s, g.ver
}

// tplUse makes the resolved instance the stored one (a call that saves).
func (g *diffRig) tplUse(now int64) {
	g.p, g.s, g.ver = g.tplResolve(now)
	g.instExists = true
}

// putTemplate is Store.PutTemplate against the model.
func (g *diffRig) putTemplate(c limiter.Config) {
	g.t.Helper()
	norm, _, err := c.Normalize()
	if err != nil {
		g.fatalf("test bug: config %+v: %v", c, err)
	}
	np, err := limiter.Compile(norm)
	if err != nil {
		g.fatalf("test bug: compile %+v: %v", norm, err)
	}
	g.note("put template %s", diffJSON(norm))
	g.ops["put-template"]++
	tp, err := g.st.PutTemplate(g.ctx, limitd.Template{ID: "diff-tpl", Pattern: "t:*", Limiter: c, IdleTTL: g.tplIdle})
	if err != nil {
		g.fatalf("PutTemplate: %v", err)
	}
	if js := diffJSON(norm); js != g.tcfgJSON {
		g.tcfg, g.tcfgJSON, g.tp, g.tver = norm, js, np, g.tver+1
		if g.tver == 1 { // the instance does not exist yet
			g.p, g.ver = np, 1
		}
	}
	if tp.Version != g.tver {
		g.fatalf("PutTemplate: version %d, model %d", tp.Version, g.tver)
	}
}

func diffNewReal(t testing.TB, label string, rdb *redis.Client, name string, opts ...store.Option) *diffRig {
	pfx := "difftest"
	return &diffRig{t: t, ctx: context.Background(), rdb: rdb, st: store.New(rdb, append([]store.Option{store.WithPrefix(pfx)}, opts...)...),
		name: name, key: pfx + ":{" + name + "}:x", label: label, ops: map[string]int{}}
}

// where names the run, the op index and the last operations, for a failure.
func (g *diffRig) where() string {
	from := max(0, len(g.hist)-8)
	return fmt.Sprintf("[%s op %d]\n  recent ops:\n    %s\n  model params: %+v\n  model state: %+v",
		g.label, g.op, strings.Join(g.hist[from:], "\n    "), g.p, g.s)
}

func (g *diffRig) fatalf(format string, args ...any) {
	g.t.Helper()
	g.t.Fatalf("%s: %s", g.where(), fmt.Sprintf(format, args...))
}

func (g *diffRig) note(format string, args ...any) {
	g.op++
	s := fmt.Sprintf("#%d t=%dµs ", g.op, g.us) + fmt.Sprintf(format, args...)
	g.hist = append(g.hist, s)
	if len(g.hist) > 64 {
		g.hist = g.hist[len(g.hist)-16:]
	}
}

// setTime sets the miniredis clock (checkTIME checks that TIME reports it).
func (g *diffRig) setTime(us int64) {
	g.t.Helper()
	g.us = us
	g.mr.SetTime(time.UnixMicro(us))
}

func (g *diffRig) advance(dus int64) {
	g.t.Helper()
	if dus < 0 {
		g.faulted = true
		g.ops["clock-step-back"]++
	}
	if g.mr == nil {
		if dus > 0 {
			time.Sleep(time.Duration(min(dus, 3000)) * time.Microsecond)
		}
		return
	}
	g.setTime(g.us + dus)
}

func (g *diffRig) checkTIME() {
	g.t.Helper()
	tm, err := g.rdb.Time(g.ctx).Result()
	if err != nil {
		g.fatalf("TIME: %v", err)
	}
	if got := tm.UnixMicro(); got != g.us {
		g.fatalf("miniredis TIME = %d µs, SetTime was %d µs", got, g.us)
	}
}

// redisTimeUS reads the real Redis clock.
func (g *diffRig) redisTimeUS() int64 {
	g.t.Helper()
	tm, err := g.rdb.Time(g.ctx).Result()
	if err != nil {
		g.fatalf("TIME: %v", err)
	}
	return tm.UnixMicro()
}

func diffJSON(c limiter.Config) string {
	b, err := json.Marshal(c)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// modelPut is what Store.Put does to the model at time now (ns): create,
// change nothing (an equal config without restart), reconfigure in place
// (same kind), or replace with a fresh limiter (another kind).
func (g *diffRig) modelPut(now int64, norm limiter.Config, np limiter.Params, restart bool) (created, changed bool) {
	js := diffJSON(norm)
	switch {
	case !g.exists:
		g.s, g.ver, created, changed = limiter.State{}, 1, true, true
		if np.StartsAtCreation() {
			np.Start(&g.s, now)
		}
	case g.p.Kind == np.Kind:
		if js == g.cfgJSON && !restart {
			return false, false
		}
		old := g.p
		limiter.Reconfigure(&g.s, now, &old, &np)
		if restart {
			np.Reset(&g.s, now)
		}
		g.ver++
		changed = true
	default:
		g.s = limiter.State{}
		if np.StartsAtCreation() {
			np.Start(&g.s, now)
		}
		g.ver++
		changed = true
	}
	g.exists, g.cfg, g.cfgJSON, g.p = true, norm, js, np
	return created, changed
}

// put applies a config through Store.Put and to the model.
func (g *diffRig) put(c limiter.Config) {
	g.t.Helper()
	norm, verb, err := c.Normalize()
	if err != nil {
		g.fatalf("test bug: config %+v: %v", c, err)
	}
	np, err := limiter.Compile(norm)
	if err != nil {
		g.fatalf("test bug: compile %+v: %v", norm, err)
	}
	if g.tpl {
		g.putTemplate(c)
		return
	}
	restart := verb == limiter.VerbRestart
	g.note("put %s restart=%v", diffJSON(norm), restart)
	g.ops["put"]++
	if g.mr != nil {
		info, created, err := g.st.Put(g.ctx, g.name, c)
		if err != nil {
			g.fatalf("Store.Put: %v", err)
		}
		wantCreated, _ := g.modelPut(g.us*1000, norm, np, restart)
		if created != wantCreated || info.Version != g.ver {
			g.fatalf("Put: created=%v version=%d, model created=%v version=%d", created, info.Version, wantCreated, g.ver)
		}
		return
	}
	wantCreated := !g.exists
	t1 := g.redisTimeUS()
	info, created, err := g.st.Put(g.ctx, g.name, c)
	if err != nil {
		g.fatalf("Store.Put: %v", err)
	}
	t2 := g.redisTimeUS()
	g.findTime(t1, t2, "put", func(m *diffRig, now int64) { m.modelPut(now, norm, np, restart) })
	if info.Version != g.ver || created != wantCreated {
		g.fatalf("Put: created=%v version=%d, model version=%d", created, info.Version, g.ver)
	}
}

// findTime (real Redis) applies op to the model at the one µs in [t1, t2] at
// which its state equals what the script wrote.
func (g *diffRig) findTime(t1, t2 int64, what string, op func(m *diffRig, now int64)) {
	g.t.Helper()
	raw := g.readRaw()
	var mism string
	for us := t1; us <= t2; us++ {
		m := *g
		op(&m, us*1000)
		if d := m.rawDiff(raw); d == "" {
			*g = m
			g.us = us
			return
		} else if mism == "" {
			mism = d
		}
	}
	g.fatalf("%s: no time in [%d, %d] µs gives the state the script wrote; at %d µs: %s", what, t1, t2, t1, mism)
}

// diffRaw is the state lua/lib.lua keeps in a limiter's hash.
type diffRaw struct {
	ok                                bool
	st, ep, org, nx, pc, rem, sto, ls float64
	al, id, pm, lt, ver               int64
}

func (g *diffRig) readRaw() diffRaw {
	g.t.Helper()
	st, ok, err := store.ReadStored(g.ctx, g.st, g.key)
	if err != nil {
		g.fatalf("reading %s: %v", g.key, err)
	}
	if !ok {
		return diffRaw{}
	}
	started := 0.0
	if st.Started {
		started = 1
	}
	return diffRaw{ok: true, st: started, ep: float64(st.Epoch), org: float64(st.Origin), nx: float64(st.Next),
		pc: float64(st.Pace), rem: float64(st.Rem), sto: float64(st.Stored), ls: float64(st.Last),
		al: st.Allocated, id: st.Idle, pm: st.Permits, lt: st.Lateness, ver: st.Version}
}

// rawDiff compares the raw state with the model's ("" when equal). Times in
// the hash are ns relative to ep (Unix µs). Two differences are by design
// (lua/lib.lua now_rel): a pace more than 2·Horizon in the past may be clamped
// (any pace before now is as good as another), and a schedule pointer more
// than 2^52 ns behind, after months without a call, is kept at −2^52 with the
// rest of the gap already counted as idle (every later use forfeits it).
func (g *diffRig) rawDiff(r diffRaw) string {
	if g.tpl && !g.instExists {
		if r.ok {
			return "the instance exists, the model has none"
		}
		return ""
	}
	if !r.ok {
		return "the limiter's hash is missing"
	}
	s := g.s
	var d []string
	cmp := func(name string, got float64, want int64) {
		// A window's end may lie up to a year ahead (past 2^53 ns), a whole
		// number of µs, which a double holds exactly (lua/window.lua).
		exact := math.Abs(float64(want)) < 1<<53 || g.p.Kind == limiter.KindWindow && want%1000 == 0 && int64(got) == want
		if got != float64(want) || !exact {
			d = append(d, fmt.Sprintf("%s=%.17g want %d", name, got, want))
		}
	}
	cmpi := func(name string, got, want int64) {
		if got != want {
			d = append(d, fmt.Sprintf("%s=%d want %d", name, got, want))
		}
	}
	ep := int64(r.ep) * 1000
	nx, idle := s.Next-ep, s.Idle
	if s.Started && nx < -diffFar {
		nx, idle = -diffFar, idle+(-diffFar-nx)
	}
	cmpi("al", r.al, s.Allocated)
	cmpi("id", r.id, idle)
	cmpi("pm", r.pm, s.Permits)
	cmpi("lt", r.lt, s.Lateness)
	cmpi("ver", r.ver, g.ver)
	if !s.Started {
		if r.st != 0 {
			d = append(d, fmt.Sprintf("st=%v want 0", r.st))
		}
	} else {
		cmp("st", r.st, 1)
		cmp("org", r.org, s.Origin/1000)
		cmp("nx", r.nx, nx)
		if pc := s.Pace - ep; !(pc < -2*diffHorizon && r.pc <= -2*float64(diffHorizon)) {
			cmp("pc", r.pc, pc)
		}
		cmp("rem", r.rem, s.Rem)
		cmp("sto", r.sto, s.Stored)
		if ls := s.Last - ep; !(ls < -2*diffHorizon && r.ls <= -2*float64(diffHorizon)) {
			cmp("ls", r.ls, ls)
		}
		if s.Origin%1000 != 0 {
			d = append(d, fmt.Sprintf("model origin %d is not whole µs", s.Origin))
		}
	}
	return strings.Join(d, ", ")
}

func (g *diffRig) checkRaw() {
	g.t.Helper()
	raw := g.readRaw()
	if d := g.rawDiff(raw); d != "" {
		g.fatalf("raw state in Redis differs from the model: %s", d)
	}
	if raw.ep != g.lastEp && g.lastEp != 0 && raw.st == 1 {
		g.ops["epoch-rebased"]++
	}
	g.lastEp = raw.ep
}

func (g *diffRig) kindName() string {
	switch {
	case g.p.Kind == limiter.KindSchedule:
		return "schedule"
	case g.p.Kind == limiter.KindWindow:
		return "window"
	case g.p.Warm:
		return "smooth-warmup"
	}
	return "smooth-bursty"
}

// peek compares Store.Wait with Params.Peek.
func (g *diffRig) peek() {
	g.t.Helper()
	w, err := g.st.Wait(g.ctx, g.name)
	if err != nil {
		g.fatalf("Store.Wait: %v", err)
	}
	now := g.us * 1000
	if g.mr == nil {
		now, g.us = w.Now, w.Now/1000
	} else if w.Now != now {
		g.fatalf("Wait.Now = %d, the Redis clock is %d", w.Now, now)
	}
	p, st, ver := g.p, g.s, g.ver
	if g.tpl {
		p, st, ver = g.tplResolve(now)
	}
	v := p.Peek(st, now)
	want := limitd.WaitInfo{Wait: v.Wait, Delay: v.Delay, Idle: v.Idle, Allocated: v.Allocated,
		Permits: v.Permits, Lateness: v.Lateness, Now: now, Version: ver, Started: st.Started, Instance: g.tpl}
	if st.Started {
		want.Position = v.Next
	}
	if p.Kind == limiter.KindWindow {
		want.Window, want.Limit = true, p.Limit
	}
	if w != want {
		g.fatalf("peek at %d:\n  store %+v\n  model %+v", now, w, want)
	}
}

// check compares the raw state and the live view after an operation.
func (g *diffRig) check() {
	g.t.Helper()
	g.checkRaw()
	g.peek()
}

func diffWaitArg(mw time.Duration) int64 {
	if mw == limitd.Forever {
		return limiter.Forever
	}
	return int64(mw)
}

func diffDecision(r limiter.Result, ver, now int64) limitd.Decision {
	return limitd.Decision{Granted: r.Granted, Permits: r.Permits, Scheduled: r.Scheduled, Start: r.Start,
		Delay: r.Delay, Lateness: r.Lateness, Wait: r.Wait, RetryAfter: r.RetryAfter, Version: ver, Now: now}
}

// acquire asks for n permits through Store.Acquire (grant=false) or
// Store.Grant (grant=true) and through the model.
func (g *diffRig) acquire(n int64, mw time.Duration, grant bool) {
	g.t.Helper()
	what := "acquire"
	if grant {
		what = "grant"
	}
	g.note("%s n=%d max_wait=%d", what, n, int64(mw))
	g.ops[what]++
	var (
		d   limitd.Decision
		gr  limitd.Grant
		err error
	)
	g.takeFloor()
	if grant {
		gr, err = g.st.Grant(g.ctx, g.name, n, mw)
		d = gr.Decision
	} else {
		d, err = g.st.Acquire(g.ctx, g.name, n, mw)
	}
	g.decided(what, n, mw, grant, d, gr, err)
}

// acquireMany acquires ns[i] permits with max wait mws[i] in one
// AcquireMany, which decides them in order at one Redis time: the model takes
// them one after the other at that time.
func (g *diffRig) acquireMany(ns []int64, mws []time.Duration) {
	g.t.Helper()
	g.decideMany(ns, mws, nil)
}

// decideMany is acquireMany where charges[i] (if any) makes the i-th
// request a charge: a batch that mixes acquires and charges.
func (g *diffRig) decideMany(ns []int64, mws []time.Duration, charges []bool) []store.Outcome {
	g.t.Helper()
	g.note("acquire-many n=%v max_wait=%v charge=%v", ns, mws, charges)
	g.ops["acquire-many"]++
	reqs := make([]store.Request, len(ns))
	for i := range ns {
		reqs[i] = store.Request{Name: g.name, Permits: ns[i], MaxWait: mws[i], Charge: i < len(charges) && charges[i]}
	}
	g.takeFloor()
	var pos []int64
	outs := g.st.AcquireMany(g.ctx, reqs)
	for i, o := range outs {
		if o.Err == nil { // every decision carries the position after them all
			pos = append(pos, o.Position)
			o.Position = 0
		}
		if reqs[i].Charge {
			g.ops["charge-in-batch"]++
			g.charged(ns[i], mws[i], o.Decision, o.Err)
			continue
		}
		g.decided("acquire", ns[i], mws[i], false, o.Decision, limitd.Grant{}, o.Err)
	}
	for _, p := range pos {
		if p != g.s.Next {
			g.fatalf("acquire-many: position %d, model %d", p, g.s.Next)
		}
	}
	return outs
}

// takeFloor notes the floor the store will send with the next call.
func (g *diffRig) takeFloor() {
	g.floor = nil
	if f, ok := store.FloorOf(g.st, g.name); ok {
		g.floor = &f
		g.ops["floor-sent"]++
	}
}

// prepare is what the scripts do to the limiter before a request at now
// that is in range (inRange, given the parameters it meets): a template
// instance is made or moved to the template's version, and the floor the
// call sent is applied. It returns the parameters the request meets.
func (g *diffRig) prepare(now int64, inRange func(p *limiter.Params) bool) limiter.Params {
	g.t.Helper()
	if g.tpl {
		if p, _, _ := g.tplResolve(now); inRange(&p) { // else nothing is saved
			g.tplUse(now)
		}
	}
	p := g.p
	if g.tpl {
		p, _, _ = g.tplResolve(now)
	}
	if g.floor != nil && inRange(&p) {
		settled := g.s
		settled.Observe(now)
		p.Start(&settled, now)
		p.ApplyFloor(&g.s, now, *g.floor)
		if g.s.Next != settled.Next {
			g.ops["floor-raised"]++
			if !g.faulted { // nothing was lost: a floor must change nothing
				g.fatalf("floor %+v moved the schedule from %d to %d without a fault", *g.floor, settled.Next, g.s.Next)
			}
		}
		g.floor = nil
	}
	return p
}

// decided checks the store's answer to an acquire or grant against the model,
// which it moves on.
func (g *diffRig) decided(what string, n int64, mw time.Duration, grant bool, d limitd.Decision, gr limitd.Grant, err error) {
	g.t.Helper()
	now := g.us * 1000
	if g.mr == nil && err == nil {
		now, g.us = d.Now, d.Now/1000
	}
	p := g.prepare(now, func(p *limiter.Params) bool { return p.CheckPermits(n) == nil })
	remBefore := g.s.Rem
	before := g.s
	r, merr := p.Acquire(&g.s, now, n, diffWaitArg(mw))
	if (err != nil) != (merr != nil) {
		g.fatalf("%s n=%d: store error %v, model error %v", what, n, err, merr)
	}
	if err != nil {
		if !errors.Is(err, limiter.ErrInvalid) {
			g.fatalf("%s n=%d: store error %v is not ErrInvalid", what, n, err)
		}
		if g.s != before {
			g.fatalf("model changed state on an error")
		}
		g.ops[what+"-err"]++
		return
	}
	want := diffDecision(r, g.ver, now)
	want.Instance = g.tpl
	if p.Kind == limiter.KindWindow {
		want.Window, want.Limit = true, p.Limit
	}
	if d.Position != 0 || what == "grant" {
		want.Position = g.s.Next
	}
	if d != want {
		g.fatalf("%s n=%d max_wait=%d at %d:\n  store %+v\n  model %+v", what, n, int64(mw), now, d, want)
	}
	if r.Granted {
		g.maxSched = max(g.maxSched, r.Scheduled)
		g.ops[what+"-granted"]++
		g.ops["granted-"+g.kindName()]++
		if r.Lateness > 0 {
			g.ops["granted-late"]++
		}
		if g.s.Stored < before.Stored && before.Started {
			g.ops["granted-from-stored"]++
		}
		if g.s.Idle > before.Idle {
			g.ops["forfeited"]++
		}
	}
	if !grant {
		return
	}
	wantBurst := g.p.Burst
	if g.p.Kind == limiter.KindSmooth {
		wantBurst = 0 // a smooth limiter has no burst: the store reads 0 as +Inf
	}
	if wantBurst == 0 || wantBurst > limiter.MaxBurst {
		wantBurst = math.Inf(1)
	}
	if gr.RemBefore != remBefore || gr.End != g.s.Next || gr.Slice != g.p.Slice || gr.Kind != g.p.Kind ||
		gr.Burst != wantBurst {
		g.fatalf("grant extras: store rem_before=%d end=%d slice=%+v kind=%s burst=%v; model rem_before=%d end=%d slice=%+v kind=%s burst=%v",
			gr.RemBefore, gr.End, gr.Slice, gr.Kind, gr.Burst, remBefore, g.s.Next, g.p.Slice, g.p.Kind, wantBurst)
	}
	if r.Granted {
		g.grants = append(g.grants, diffGrant{g: gr, r: r, p: g.p, remBefore: remBefore, end: g.s.Next, ver: g.ver})
		if len(g.grants) > 4 {
			g.grants = g.grants[1:]
		}
	}
}

// charge takes n permits whatever is left, through Store.Charge (max wait
// 0, which it asks with) or a charge alone in an AcquireMany, and through
// the model (Params.Charge).
func (g *diffRig) charge(n int64, mw time.Duration) {
	g.t.Helper()
	g.note("charge n=%d max_wait=%d", n, int64(mw))
	g.ops["charge"]++
	g.takeFloor()
	var d limitd.Decision
	var err error
	if mw == 0 {
		d, err = g.st.Charge(g.ctx, g.name, n)
	} else {
		o := g.st.AcquireMany(g.ctx, []store.Request{{Name: g.name, Permits: n, MaxWait: mw, Charge: true}})[0]
		d, err = o.Decision, o.Err
	}
	g.charged(n, mw, d, err)
}

// charged checks the store's answer to a charge against the model, which
// it moves on.
func (g *diffRig) charged(n int64, mw time.Duration, d limitd.Decision, err error) {
	g.t.Helper()
	now := g.us * 1000
	if g.mr == nil && err == nil {
		now, g.us = d.Now, d.Now/1000
	}
	p := g.prepare(now, func(p *limiter.Params) bool { return p.CheckCharge(n) == nil })
	if n == 0 && p.Calendar != 0 && p.NeedsBounds(g.s, now) {
		g.ops["bounds-on-check"]++ // the store sends them first (bounds.lua)
	}
	before := g.s
	r, merr := p.Charge(&g.s, now, n, diffWaitArg(mw))
	if (err != nil) != (merr != nil) {
		g.fatalf("charge n=%d: store error %v, model error %v", n, err, merr)
	}
	if err != nil {
		var fe, mfe *limiter.FieldError
		if !errors.As(err, &fe) || !errors.As(merr, &mfe) || fe.Field != "permits" || fe.Rule != mfe.Rule {
			g.fatalf("charge n=%d: store error %v, model %v", n, err, merr)
		}
		if g.s != before {
			g.fatalf("model changed state on an error")
		}
		g.ops["charge-err"]++
		return
	}
	want := diffDecision(r, g.ver, now)
	want.Charged, want.Instance = true, g.tpl
	if p.Kind == limiter.KindWindow {
		want.Window, want.Limit, want.Count = true, p.Limit, r.Count
	}
	if d.Position != 0 {
		want.Position = g.s.Next
	}
	if d != want {
		g.fatalf("charge n=%d max_wait=%d at %d:\n  store %+v\n  model %+v", n, int64(mw), now, d, want)
	}
	switch {
	case n == 0 && r.Granted:
		g.ops["check-within"]++
	case n == 0:
		g.ops["check-over"]++
	case r.Granted:
		g.ops["charged-within-"+g.kindName()]++
	default:
		g.ops["charged-over-"+g.kindName()]++
	}
	if g.s.Next-now >= limiter.MaxAhead && p.Kind != limiter.KindWindow {
		g.ops["charged-to-max-ahead"]++
	}
	if p.Kind == limiter.KindWindow && g.s.Stored > p.Limit {
		g.ops["window-past-limit"]++
	}
}

// chargeN is a random charge: some checks (0); for a window the sizes of
// windowN and some past its limit; for a schedule or smooth limiter mostly
// randN's, then on miniredis (whose clock the test moves) larger ones: up to
// ten acquires' most, a week of schedule or more, the most a charge may
// take, and past it (out of range).
func (g *diffRig) chargeN(r *rand.Rand) int64 {
	most := g.p.MaxCharge()
	if r.IntN(8) == 0 {
		return 0
	}
	if g.p.Kind == limiter.KindWindow {
		n := g.windowN(r)
		if r.IntN(4) == 0 {
			n += r.Int64N(2*g.p.Limit + 2)
		}
		return n
	}
	if g.mr == nil { // real time: as much schedule as an acquire takes
		return min(g.randN(r), most)
	}
	switch x := r.IntN(100); {
	case x < 70:
		return min(g.randN(r), most)
	case x < 85:
		return 1 + r.Int64N(min(most, 10*g.p.MaxPermits))
	case x < 93: // debts that take days to pay
		return min(most, int64(float64(7*86_400e9)/g.p.Slice.Float())+r.Int64N(most))
	case x < 97:
		return most
	default:
		return most + 1 + r.Int64N(3)
	}
}

// chargeWait is a charge's max wait: mostly 0 (Store.Charge's), else
// randWait's.
func (g *diffRig) chargeWait(r *rand.Rand) time.Duration {
	if r.IntN(2) == 0 {
		return 0
	}
	return g.randWait(r)
}

// mixedMany is a random batch on this limiter mixing acquires and charges.
func (g *diffRig) mixedMany(r *rand.Rand, acquireN func(*rand.Rand) int64) {
	g.t.Helper()
	k := 2 + r.IntN(5)
	ns, mws, charges := make([]int64, k), make([]time.Duration, k), make([]bool, k)
	for i := range k {
		if charges[i] = r.IntN(2) == 0; charges[i] {
			ns[i], mws[i] = g.chargeN(r), g.chargeWait(r)
		} else {
			ns[i], mws[i] = acquireN(r), g.randWait(r)
		}
	}
	g.decideMany(ns, mws, charges)
}

// release hands back the last m permits of the i-th kept grant.
func (g *diffRig) release(i int, m int64) {
	g.t.Helper()
	dg := g.grants[i]
	g.grants = append(g.grants[:i], g.grants[i+1:]...)
	if g.tpl { // the scripts save only a started instance
		if _, st, _ := g.tplResolve(g.us * 1000); st.Started {
			g.tplUse(g.us * 1000)
		}
	}
	current := dg.ver == g.ver
	g.note("release m=%d of k=%d (grant v%d, now v%d)", m, dg.r.Permits, dg.ver, g.ver)
	g.ops["release"]++
	got, err := g.st.Release(g.ctx, dg.g, m)
	if err != nil {
		g.fatalf("Store.Release: %v", err)
	}
	h := dg.p.HandbackOf(dg.r, dg.remBefore, dg.end, dg.r.Permits, m)
	want := g.p.Release(&g.s, h, current)
	if g.mr != nil { // the script then sees its time (a step back moves the state)
		g.s.Observe(g.us * 1000)
	}
	if got != want {
		g.fatalf("release m=%d of %d: store rewound=%v, model %v (handback %+v)", m, dg.r.Permits, got, want, h)
	}
	if got {
		g.ops["release-rewound"]++
	}
}

// reset is Store.Reset against Params.Reset.
func (g *diffRig) reset() {
	g.t.Helper()
	g.note("reset")
	g.ops["reset"]++
	if g.mr != nil {
		ver, err := g.st.Reset(g.ctx, g.name)
		if err != nil {
			g.fatalf("Store.Reset: %v", err)
		}
		wantVer := g.ver
		if g.tpl { // the scripts save only a started instance
			_, st, v := g.tplResolve(g.us * 1000)
			if wantVer = v; st.Started {
				g.tplUse(g.us * 1000)
			}
		}
		g.p.Reset(&g.s, g.us*1000)
		if ver != wantVer {
			g.fatalf("Reset: version %d, model %d", ver, wantVer)
		}
		return
	}
	t1 := g.redisTimeUS()
	ver, err := g.st.Reset(g.ctx, g.name)
	if err != nil {
		g.fatalf("Store.Reset: %v", err)
	}
	t2 := g.redisTimeUS()
	g.findTime(t1, t2, "reset", func(m *diffRig, now int64) { m.p.Reset(&m.s, now) })
	if ver != g.ver {
		g.fatalf("Reset: version %d, model %d", ver, g.ver)
	}
}

// ---- faults: state lost or rewound ----

// diffSnap is a copy of a limiter's keys in Redis and of the model.
type diffSnap struct {
	x                  string
	pttl               time.Duration
	hash               map[string]string
	exists, instExists bool
	cfg                limiter.Config
	cfgJSON            string
	p                  limiter.Params
	s                  limiter.State
	ver                int64
}

// hashKey is a named limiter's hash (kind, ver, cfg) beside its state key.
func (g *diffRig) hashKey() string { return strings.TrimSuffix(g.key, "x") + "l" }

// snapshot copies the limiter's keys and the model, for rewind.
func (g *diffRig) snapshot() {
	g.t.Helper()
	g.note("snapshot")
	g.ops["snapshot"]++
	x, err := g.rdb.Get(g.ctx, g.key).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		g.fatalf("GET: %v", err)
	}
	sn := &diffSnap{x: x, exists: g.exists, instExists: g.instExists, cfg: g.cfg, cfgJSON: g.cfgJSON,
		p: g.p, s: g.s, ver: g.ver}
	if g.tpl {
		sn.pttl = g.rdb.PTTL(g.ctx, g.key).Val()
	} else if sn.hash, err = g.rdb.HGetAll(g.ctx, g.hashKey()).Result(); err != nil {
		g.fatalf("HGETALL: %v", err)
	}
	g.snap = sn
}

// fault is a random storage fault: a snapshot taken (the first time, and
// now and then), or the state lost (wipe) or come back older (rewind).
func (g *diffRig) fault(r *rand.Rand) {
	switch {
	case g.snap == nil || r.IntN(3) == 0:
		g.snapshot()
	case r.IntN(3) == 0:
		g.wipe()
	default:
		g.rewind()
	}
}

// rewind brings back the snapshot: a failover to a replica that lost the
// writes since. The store keeps the floors it saw meanwhile.
func (g *diffRig) rewind() {
	g.t.Helper()
	sn := g.snap
	g.note("rewind to the snapshot")
	g.ops["rewind"]++
	g.faulted = true
	g.rdb.Del(g.ctx, g.key)
	if sn.x != "" {
		ttl := time.Duration(0)
		if g.tpl && sn.pttl > 0 {
			ttl = sn.pttl
		}
		g.rdb.Set(g.ctx, g.key, sn.x, ttl)
	}
	if !g.tpl {
		g.rdb.Del(g.ctx, g.hashKey())
		if len(sn.hash) > 0 {
			g.rdb.HSet(g.ctx, g.hashKey(), sn.hash)
		}
	}
	g.exists, g.instExists, g.cfg, g.cfgJSON, g.p, g.s, g.ver = sn.exists, sn.instExists, sn.cfg, sn.cfgJSON, sn.p, sn.s, sn.ver
	g.grants = nil
}

// wipe loses the limiter's state: a restart without persistence. A named
// limiter is put again at once (the boot file's keeper); a template instance
// starts fresh on its next use.
func (g *diffRig) wipe() {
	g.t.Helper()
	g.note("wipe")
	g.ops["wipe"]++
	g.faulted = true
	g.rdb.Del(g.ctx, g.key)
	g.grants = nil
	if g.tpl {
		g.instExists, g.s = false, limiter.State{}
		return
	}
	g.rdb.Del(g.ctx, g.hashKey())
	g.exists = false
	g.put(g.cfg)
}

// ---- random sequences ----

var diffRates = []float64{1, 3, 7, 10, 100, 1000, 1100.5, 123456.789, 5000.0 / 60, 1.0 / 3600, 0.7,
	2.5e6, 1e9, 333333.3, 999999937, 1e-6, 12000, 523}

func diffRate(r *rand.Rand) float64 {
	if r.IntN(4) == 0 { // any rate, log-uniform over 1e-3 … 1e8
		return math.Pow(10, -3+11*r.Float64())
	}
	return diffRates[r.IntN(len(diffRates))]
}

func diffDur(r *rand.Rand, choices ...time.Duration) *limiter.Duration {
	return limiter.D(choices[r.IntN(len(choices))])
}

func diffScheduleConfig(r *rand.Rand, rate func(*rand.Rand) float64) limiter.Config {
	c := limiter.Config{Kind: limiter.KindSchedule, Rate: rate(r)}
	bursts := []float64{1, 1.1, 1.1, 1.5, 2, 3.7, 10, limiter.Inf, limiter.MaxBurst}
	if x := r.IntN(10); x > 0 { // else the default
		c.Burst = limiter.B(bursts[r.IntN(len(bursts))])
	}
	switch r.IntN(5) {
	case 0: // unlimited (Horizon)
	case 1:
		c.MaxBacklog = limiter.D(0)
	case 2:
		c.MaxBacklog = diffDur(r, time.Microsecond, time.Millisecond, 250*time.Millisecond, time.Second, time.Minute, time.Hour)
	case 3:
		c.MaxBacklog = limiter.D(time.Duration(r.Int64N(int64(10 * time.Second))))
	case 4:
		c.MaxBacklog = limiter.D(time.Duration(diffHorizon - r.Int64N(1000)))
	}
	if r.IntN(8) == 0 { // the same through a rate spec with the restart verb
		b := limiter.DefaultBurst
		if c.Burst != nil {
			b = float64(*c.Burst)
		}
		c.Spec = limiter.Spec{Rate: c.Rate, Burst: b, Verb: limiter.VerbRestart}.String()
		c.Rate, c.Burst = 0, nil
	}
	return c
}

func diffSmoothConfig(r *rand.Rand, rate func(*rand.Rand) float64) limiter.Config {
	c := limiter.Config{Kind: limiter.KindSmooth, Rate: rate(r)}
	f := func(v float64) *float64 { return &v }
	if r.IntN(3) == 0 { // warm-up
		c.Warmup = diffDur(r, time.Microsecond, time.Millisecond, 250*time.Millisecond, 4*time.Second, time.Minute, time.Hour)
		if r.IntN(4) == 0 {
			c.Warmup = limiter.D(time.Duration(1 + r.Int64N(int64(10*time.Second))))
		}
		colds := []float64{1, 2, 2.5, 3, 10, 1000, 1e6}
		if r.IntN(4) > 0 {
			c.ColdFactor = f(colds[r.IntN(len(colds))])
		}
	} else {
		bursts := []float64{0, 0.001, 0.5, 1, 1, 2.5, 60, 3600, 1e6}
		if r.IntN(5) > 0 {
			c.MaxBurstSeconds = f(bursts[r.IntN(len(bursts))])
		}
	}
	if r.IntN(3) == 0 {
		inits := []float64{0, 1, 2.5, 100, 1e9}
		c.InitialPermits = f(inits[r.IntN(len(inits))])
	}
	return c
}

// config is a random config of kind k; against a real Redis, whose clock the
// test cannot move, with rates at which µs and ms matter.
func (g *diffRig) config(r *rand.Rand, k limiter.Kind) limiter.Config {
	rate := diffRate
	if g.mr == nil {
		rate = diffFastRate
	}
	if k == limiter.KindSmooth {
		return diffSmoothConfig(r, rate)
	}
	return diffScheduleConfig(r, rate)
}

var diffFastRates = []float64{1000, 3000, 7000, 1100.5, 123456.789, 1e5, 5e5, 1e6, 33333.3, 12000}

func diffFastRate(r *rand.Rand) float64 {
	if r.IntN(4) == 0 {
		return math.Pow(10, 3+3*r.Float64())
	}
	return diffFastRates[r.IntN(len(diffFastRates))]
}

func (g *diffRig) randN(r *rand.Rand) int64 {
	maxN := g.p.MaxPermits
	if g.mr == nil { // real time: at most ~20 ms of schedule, or one too many
		ms := max(1, min(maxN, int64(20e6/g.p.Slice.Float())))
		switch x := r.IntN(100); {
		case x < 50:
			return 1
		case x < 75:
			return min(maxN, 1+r.Int64N(10))
		case x < 98:
			return 1 + r.Int64N(ms)
		default:
			return maxN + 1
		}
	}
	minute := max(1, min(maxN, int64(60e9/g.p.Slice.Float())))
	switch x := r.IntN(1000); {
	case x < 500:
		return 1
	case x < 750:
		return min(maxN, 1+r.Int64N(10))
	case x < 870:
		return 1 + r.Int64N(min(maxN, 1000))
	case x < 950: // up to a minute of schedule
		return 1 + r.Int64N(minute)
	case x < 975: // up to the bound (13 days of schedule)
		return 1 + r.Int64N(maxN)
	case x < 985:
		return maxN
	default:
		return maxN + 1 + r.Int64N(3) // refused by both
	}
}

// now is the Redis clock in ns: the one set (miniredis) or a fresh TIME.
func (g *diffRig) now() int64 {
	if g.mr == nil {
		return g.redisTimeUS() * 1000
	}
	return g.us * 1000
}

func (g *diffRig) randWait(r *rand.Rand) time.Duration {
	sl := g.p.Slice.Whole + 1
	switch x := r.IntN(100); {
	case x < 20:
		return 0
	case x < 23:
		return -time.Duration(1 + r.Int64N(1e9))
	case x < 45:
		return time.Duration(r.Int64N(min(5*sl, diffHorizon)))
	case x < 70:
		return limitd.Forever
	case x < 80:
		return time.Duration(r.Int64N(diffHorizon))
	case x < 82:
		return time.Duration(diffHorizon + r.Int64N(1<<60))
	default: // right at the boundary: the delay a caller would see now, ±1
		return time.Duration(max(0, g.p.Peek(g.s, g.now()).Delay+r.Int64N(3)-1))
	}
}

// stepUS is a random time step in µs: often none, mostly small or about a
// slice, sometimes exactly until the schedule lets the next caller through,
// with occasional gaps of minutes, hours and days.
func (g *diffRig) stepUS(r *rand.Rand) int64 {
	switch x := r.IntN(1000); {
	case x < 4 && g.mr != nil: // Redis time steps back: up to a slice, a second, two minutes
		return -[]int64{1 + r.Int64N(g.p.Slice.Whole/1000+1), 1 + r.Int64N(1_000_000), 1 + r.Int64N(120_000_000)}[r.IntN(3)]
	case x < 200:
		return 0
	case x < 400:
		return 1 + r.Int64N(1000)
	case x < 600: // up to two slices
		return r.Int64N(min(2*g.p.Slice.Whole/1000, 3_600_000_000) + 1)
	case x < 750: // until the next caller would get through, ±1 µs
		d := g.p.Peek(g.s, g.now()).Delay
		return max(0, (d+999)/1000+r.Int64N(3)-1)
	case x < 900:
		return 1 + r.Int64N(1_000_000)
	case x < 970:
		return 1 + r.Int64N(60_000_000)
	case x < 995:
		return r.Int64N(3_600_000_000)
	case x < 999:
		return r.Int64N(3 * 86_400_000_000)
	default: // past 2^53 ns ≈ 104 days now and then
		return r.Int64N(400 * 86_400_000_000)
	}
}

// step runs one random operation.
func (g *diffRig) step(r *rand.Rand, kindChange bool) {
	g.t.Helper()
	peek := false
	switch x := r.IntN(1000); {
	case x < 300:
		g.acquire(g.randN(r), g.randWait(r), false)
	case x < 350: // a batch on this limiter
		k := 2 + r.IntN(5)
		ns, mws := make([]int64, k), make([]time.Duration, k)
		for i := range k {
			ns[i], mws[i] = g.randN(r), g.randWait(r)
		}
		g.acquireMany(ns, mws)
	case x < 650:
		g.acquire(g.randN(r), g.randWait(r), true)
		if n := len(g.grants); n > 0 && g.grants[n-1].ver == g.ver && g.grants[n-1].end == g.s.Next && r.IntN(3) == 0 {
			g.checkRaw() // hand back a tail at once: the schedule rewinds
			k := g.grants[n-1].r.Permits
			g.release(n-1, 1+r.Int64N(k))
		}
	case x < 770:
		if len(g.grants) == 0 {
			g.acquire(min(g.p.MaxPermits, 1+r.Int64N(100)), limitd.Forever, true)
			break
		}
		i := len(g.grants) - 1
		if r.IntN(4) == 0 {
			i = r.IntN(len(g.grants))
		}
		k := g.grants[i].r.Permits
		m := k
		if r.IntN(3) > 0 {
			m = 1 + r.Int64N(k)
		}
		g.release(i, m)
	case x < 820:
		g.put(g.config(r, g.p.Kind))
		peek = r.IntN(2) == 0
	case x < 830: // the same config again: changes nothing
		if g.tpl {
			g.put(g.tcfg)
			break
		}
		g.put(g.cfg)
	case x < 850:
		g.reset()
		peek = r.IntN(2) == 0
	case x < 851 && kindChange:
		k := limiter.KindSmooth
		if g.p.Kind == k {
			k = limiter.KindSchedule
		}
		g.note("kind change")
		g.ops["kind-change"]++
		g.put(g.config(r, k))
		peek = true
	case x < 857:
		g.fault(r)
	case x < 900:
		g.charge(g.chargeN(r), g.chargeWait(r))
		peek = r.IntN(4) == 0
	case x < 920:
		g.mixedMany(r, g.randN)
	default:
		g.note("peek")
		g.ops["peek"]++
		peek = true
	}
	g.checkRaw()
	if peek {
		g.peek()
	}
}

// diffRun runs ops random operations on a fresh limiter of kind k. startUS is
// the Redis clock at the start (Unix µs); step, if not nil, replaces the
// random time steps.
func diffRun(t *testing.T, label string, seed uint64, k limiter.Kind, startUS int64, ops int, step func(*diffRig, *rand.Rand) int64) *diffRig {
	r := rand.New(rand.NewPCG(seed, 0x6c696d697464))
	g := diffNewMini(t, fmt.Sprintf("%s seed %d kind %s", label, seed, k), startUS)
	g.checkTIME()
	g.put(g.config(r, k))
	g.check()
	if step == nil {
		step = (*diffRig).stepUS
	}
	for range ops {
		g.advance(step(g, r))
		if g.op%97 == 0 {
			g.checkTIME()
		}
		g.step(r, true)
	}
	g.peek()
	return g
}

func (g *diffRig) summary() string {
	return fmt.Sprintf("%d ops: %v", g.op, g.ops)
}

var diffStart2025 = time.Date(2025, 3, 14, 15, 9, 26, 535897000, time.UTC).UnixMicro()

// diffOps is the length of a differential run: full, or short with -short.
// Under the race detector too (CI's race run is short), a quarter of short:
// the detector slows every step several times over, and what it checks is
// that each path runs without a race, not how often; the plain run takes
// every step and holds every result to the model.
func diffOps(full, short int) int {
	switch {
	case !testing.Short():
		return full
	case store.RaceDetector:
		return short / 4
	}
	return short
}

// TestDiffRandom runs 5,000 random operations a seed, enough for each of
// the rare ones (a wipe, a kind change: about one in a thousand) to come
// several times.
func TestDiffRandom(t *testing.T) {
	t.Parallel()
	ops := diffOps(5000, 800)
	for i, seed := range []uint64{1, 2} {
		k := []limiter.Kind{limiter.KindSchedule, limiter.KindSmooth}[i%2]
		t.Run(fmt.Sprintf("seed=%d/%s", seed, k), func(t *testing.T) {
			t.Parallel()
			g := diffRun(t, "random", seed, k, diffStart2025+int64(seed)*7919, ops, nil)
			t.Logf("seed %d %s: %s", seed, k, g.summary())
			// The rare operations happened (the sequence is the seed's: this
			// fails only when a change of the steps drops one of them).
			for _, op := range []string{"kind-change", "snapshot", "rewind", "wipe", "release-rewound"} {
				if !testing.Short() && g.ops[op] == 0 {
					t.Errorf("no %s in %d operations", op, ops)
				}
			}
		})
	}
}

// TestDiffYear2200 runs random sequences with the Redis clock in year 2200:
// Unix ns ~7.3e18, far beyond 2^53, where only epoch-relative times are exact.
func TestDiffYear2200(t *testing.T) {
	t.Parallel()
	ops := diffOps(1200, 400)
	start := time.Date(2200, 7, 4, 23, 59, 58, 987654000, time.UTC).UnixMicro() + 321
	for i, k := range []limiter.Kind{limiter.KindSchedule, limiter.KindSmooth} {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			g := diffRun(t, "year 2200", uint64(2200+i), k, start, ops, nil)
			t.Logf("%s", g.summary())
		})
	}
}

// TestDiffUptime400Days keeps one limiter in use for 400 simulated days with
// gaps of up to a day between calls (and runs of quick calls), so that the
// scripts' epoch is rebased hundreds of times; every result stays exact.
func TestDiffUptime400Days(t *testing.T) {
	t.Parallel()
	days := int64(400)
	if testing.Short() {
		days = 60
	}
	for i, k := range []limiter.Kind{limiter.KindSchedule, limiter.KindSmooth} {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(uint64(400+i), 0x75707469))
			g := diffNewMini(t, fmt.Sprintf("uptime seed %d kind %s", 400+i, k), diffStart2025)
			g.put(g.config(r, k))
			g.check()
			end := g.us + days*86_400_000_000
			for g.us < end {
				if r.IntN(2) == 0 {
					g.advance(r.Int64N(24 * 3_600_000_000))
				} else {
					g.advance(min(g.stepUS(r), 3_600_000_000))
				}
				g.step(r, true)
			}
			g.checkTIME()
			g.peek()
			if g.ops["epoch-rebased"] < int(days) { // about two a day are seen
				t.Errorf("only %d epoch rebases in %d days", g.ops["epoch-rebased"], days)
			}
			t.Logf("%d days: %s", days, g.summary())
		})
	}
}

// TestDiffLongGap leaves a limiter untouched for a long time (30 days, and
// gaps past 2^53 ns ≈ 104 days, where now−epoch in ns is no longer an exact
// double) and then uses it: a peek, a hand-back of a grant taken before the
// gap, an acquire, a reset, a reconfiguration.
func TestDiffLongGap(t *testing.T) {
	t.Parallel()
	day := int64(86_400_000_000)
	gaps := []struct {
		name string
		us   int64
	}{
		{"30d", 30 * day},
		{"30d+1us", 30*day + 1},
		{"100d", 100 * day},
		{"200d", 200*day + 12345},
		{"3y", 3*365*day + 777},
		{"5y", 5*365*day + 999},
	}
	configs := []limiter.Config{
		{Rate: 3, Burst: limiter.B(1.1)},
		{Rate: 1100.5, Burst: limiter.B(1)},
		{Rate: 123456.789, Burst: limiter.B(limiter.Inf), MaxBacklog: limiter.D(time.Hour)},
		{Rate: 5000.0 / 60, Burst: limiter.B(2), MaxBacklog: limiter.D(0)},
		{Kind: limiter.KindSmooth, Rate: 7},
		{Kind: limiter.KindSmooth, Rate: 1e-6, MaxBurstSeconds: diffF(1e6)},
		{Kind: limiter.KindSmooth, Rate: 1100.5, Warmup: limiter.D(4 * time.Second), ColdFactor: diffF(3)},
	}
	for _, gap := range gaps {
		for ci, c := range configs {
			t.Run(fmt.Sprintf("%s/%d-%s", gap.name, ci, c.Kind), func(t *testing.T) {
				t.Parallel()
				r := rand.New(rand.NewPCG(uint64(ci), uint64(gap.us)))
				g := diffNewMini(t, fmt.Sprintf("gap %s config %d", gap.name, ci), diffStart2025)
				g.put(c)
				// some history: debt, stored permits or backlog, and a grant kept
				for range 20 {
					g.advance(r.Int64N(2 * g.p.Slice.Whole / 1000))
					g.acquire(1+r.Int64N(min(g.p.MaxPermits, 5)), limitd.Forever, r.IntN(2) == 0)
					g.checkRaw()
				}
				// two grants kept over the gap: the last one is handed back
				// first (nothing happened since: a schedule rewinds), the other
				// once the epoch has moved past the gap (its times, shifted to
				// the new epoch, exceed 2^53)
				g.acquire(min(g.p.MaxPermits, 3), limitd.Forever, true)
				g.acquire(min(g.p.MaxPermits, 2), limitd.Forever, true)
				g.check()
				if len(g.grants) < 2 {
					t.Fatalf("test bug: %d grants kept", len(g.grants))
				}
				old := g.grants[len(g.grants)-2]
				for _, op := range []string{"peek", "release", "acquire", "release-old", "grant", "reset", "put", "acquire"} {
					if op == "peek" || op == "release" {
						g.advance(gap.us)
					} else {
						g.advance(r.Int64N(1000))
					}
					switch op {
					case "peek":
						g.note("peek")
					case "release":
						g.release(len(g.grants)-1, 1)
					case "release-old":
						for i, dg := range g.grants {
							if dg.g == old.g {
								g.release(i, 1)
							}
						}
					case "acquire", "grant":
						g.acquire(1, limitd.Forever, op == "grant")
					case "reset":
						g.reset()
					case "put":
						c2 := c
						c2.Rate *= 2
						g.put(c2)
					}
					g.check()
				}
			})
		}
	}
}

func diffF(v float64) *float64 { return &v }

// TestDiffRealRedis runs the differential against a real redis-server (its
// Lua 5.1, not miniredis's gopher-lua). Its clock cannot be set: the model is
// fed the time each script saw (Decision.Now, WaitInfo.Now; for Put and Reset
// the µs between a TIME before and after at which the model's state is the
// state the script wrote).
func TestDiffRealRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Server(t)
	ops := diffOps(2500, 500)
	// Functions (FCALL) and scripts (EVALSHA, as on Redis < 7) run the same
	// code; both are checked.
	for i, k := range []limiter.Kind{limiter.KindSchedule, limiter.KindSmooth, limiter.KindSchedule, limiter.KindSmooth} {
		mode, opts := "functions", []store.Option(nil)
		if i >= 2 {
			mode, opts = "scripts", []store.Option{store.WithScriptsOnly()}
		}
		t.Run(mode+"/"+string(k), func(t *testing.T) {
			t.Parallel()
			seed := uint64(7000 + i)
			r := rand.New(rand.NewPCG(seed, 0x7265616c))
			g := diffNewReal(t, fmt.Sprintf("real redis (%s) seed %d kind %s", mode, seed, k), srv.Client(), "diff-"+mode+"-"+string(k), opts...)
			g.put(g.config(r, k))
			g.check()
			for range ops {
				g.advance(g.stepUS(r))
				g.step(r, true)
			}
			g.peek()
			t.Logf("seed %d %s: %s", seed, k, g.summary())
		})
	}
}

// TestDiffTemplate runs random sequences on a template instance: created on
// first use, moved to each new template version (of either kind) in place on
// its next use, whichever call that is.
func TestDiffTemplate(t *testing.T) {
	t.Parallel()
	ops := diffOps(1500, 200)
	for i, k := range []limiter.Kind{limiter.KindSchedule, limiter.KindSmooth} {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			seed := uint64(900 + i)
			r := rand.New(rand.NewPCG(seed, 0x74706c))
			g := diffNewTemplate(t, fmt.Sprintf("template seed %d kind %s", seed, k), diffStart2025)
			g.put(g.config(r, k))
			g.check()
			for range ops {
				g.advance(g.stepUS(r))
				g.step(r, true)
			}
			g.peek()
			t.Logf("seed %d %s: %s", seed, k, g.summary())
		})
	}
}

// TestDiffAtOnce: a schedule of burst inf starts calls at once while it
// runs at most limiter.AtOnce ahead (limiter/schedule.go), on a named
// limiter and on a fresh template instance: a batch of 1,200 requests at one
// Redis time on a fresh 1e6/s schedule, acquires that cannot wait and
// charges mixed, fits its first 1,001 (the first at its slot, then 1 ms of
// slots early) and refuses the rest, the scripts and the model alike; 2 ms
// later a batch fits again. With a finite burst the second waits for the
// pace: refused.
func TestDiffAtOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		tpl   bool
		burst limiter.Burst
		fit   int
	}{
		{"named", false, limiter.Burst(limiter.Inf), 1 + int(limiter.AtOnce/1000)},
		{"instance", true, limiter.Burst(limiter.Inf), 1 + int(limiter.AtOnce/1000)},
		{"burst-1000", false, 1000, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var g *diffRig
			if tc.tpl {
				g = diffNewTemplate(t, "at once "+tc.name, diffStart2025)
			} else {
				g = diffNewMini(t, "at once "+tc.name, diffStart2025)
			}
			g.put(limiter.Config{Rate: 1e6, Burst: limiter.B(float64(tc.burst))})
			batch := func(k int) (fit int) {
				ns, mws, charges := make([]int64, k), make([]time.Duration, k), make([]bool, k)
				for i := range ns {
					ns[i], charges[i] = 1, i%2 == 1
				}
				outs := g.decideMany(ns, mws, charges)
				for i, o := range outs {
					if o.Err != nil {
						t.Fatalf("request %d: %v", i, o.Err)
					}
					if o.Granted {
						if fit != i {
							t.Fatalf("request %d fits after one that did not", i)
						}
						fit++
					}
				}
				return fit
			}
			if n := batch(1200); n != tc.fit {
				t.Errorf("a fresh schedule's batch of 1200 at one time: %d fit, want %d", n, tc.fit)
			}
			g.advance(2000)
			if n := batch(100); n == 0 {
				t.Errorf("2 ms later: none of 100 fit")
			}
			g.peek()
		})
	}
}

// TestDiffBigIdle checks lua/lib.lua's exact arithmetic for the idle time of
// a limiter left alone for months (big_gap: d·1000 − c past 2^53) and for the
// totals (totals, carry: int64s as hi·2^32 + lo, 0 ≤ lo < 2^51, packed in x),
// against math/big, in gopher-lua (miniredis, the text form) and in Redis's
// Lua 5.1 (struct, the binary form), and that store reads the packed totals
// back. The differential tests reach it only through miniredis's settable
// clock.
func TestDiffBigIdle(t *testing.T) {
	t.Parallel()
	lib := store.LuaLib(t)
	// Per case: the gap {lo, hi}, then an idle total of tot (given as lo, hi)
	// plus the gap plus x, as totals returns it and as packed, and packed
	// params for store to decode the totals with.
	script := lib + `
local out = {}
for i = 1, #ARGV, 5 do
  local d, c, x = tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  local L = {xidle = big_gap(d, c), d_allocated = 0, d_idle = x, d_permits = 0, d_lateness = 0,
    allocated = 0, allocated_hi = 0, idle = tonumber(ARGV[i + 3]), idle_hi = tonumber(ARGV[i + 4]),
    permits = 0, permits_hi = 0, lateness = 0, lateness_hi = 0,
    kind = 'schedule', version = 1, whole = 1, frac = 0, den = 1, max_permits = 1, burst = 0, max_backlog = 0,
    started = 0, epoch = 0, origin = 0, next = 0, pace = 0, rem = 0, stored = 0, last = 0, expires = 0}
  out[#out + 1] = L.xidle[1]
  out[#out + 1] = L.xidle[2]
  local _, _, id, idh = totals(L)
  out[#out + 1] = id
  out[#out + 1] = idh
  out[#out + 1] = pack(L)
end
return out`
	r := rand.New(rand.NewPCG(53, 53))
	var args []any
	var want []*big.Int // per case: the gap, the idle total after
	for i := range 400 {
		// d: µs since the epoch (months to ~285 years); c = nx + FAR, the part
		// of the gap kept; x: idle this call adds besides, up to what one
		// call can (totals in lib.lua); tot: the idle total so far, given as
		// lo, hi with any low part below 2^51.
		d := int64(1)<<42 + r.Int64N(1<<53-1<<42)
		c := r.Int64N(1<<53) - 1<<51
		x := r.Int64N(1<<52+1<<41) - r.Int64N(1<<52)
		tot := r.Int64N(1 << 62)
		lo := tot&(1<<32-1) + r.Int64N(1<<19)<<32
		switch i {
		case 0:
			d, c, x, tot, lo = 1<<53-1, -(1<<53 - 1), 1<<52+1<<41-1, 1<<51-1, 1<<51-1
		case 1:
			d, c, x = 4503599627371, 4503599627370000, 0 // d·1000 − c = 1000
		case 2:
			d, c, x, tot, lo = 1_000_000, 999_999_999, 1, 1<<51-1, 1<<51-1 // lo carries into hi
		case 3:
			d, c, x, tot, lo = 1<<32, 1<<32*1000-5, -(1<<52 - 1), 1<<40, 0 // negative x borrows from hi
		}
		if lo > tot {
			lo = tot & (1<<32 - 1)
		}
		if d*1000 <= c {
			continue
		}
		gap := new(big.Int).Sub(new(big.Int).Mul(big.NewInt(d), big.NewInt(1000)), big.NewInt(c))
		after := new(big.Int).Add(new(big.Int).Add(gap, big.NewInt(x)), big.NewInt(tot))
		if !after.IsInt64() {
			continue
		}
		args = append(args, d, c, x, lo, (tot-lo)>>32)
		want = append(want, gap, after)
	}
	run := func(t *testing.T, rdb *redis.Client) {
		v, err := rdb.Eval(context.Background(), script, nil, args...).Slice()
		if err != nil {
			t.Fatal(err)
		}
		if len(v) != len(want)/2*5 {
			t.Fatalf("%d results, want %d", len(v), len(want)/2*5)
		}
		hilo := func(lo, hi any, below int64) *big.Int {
			l, h := lo.(int64), hi.(int64)
			if l < 0 || l >= below {
				t.Errorf("low part %d out of [0, %d)", l, below)
			}
			return new(big.Int).Add(new(big.Int).Lsh(big.NewInt(h), 32), big.NewInt(l))
		}
		for i := 0; i < len(v); i += 5 {
			k := i / 5
			a := args[k*5 : k*5+5]
			if got := hilo(v[i], v[i+1], 1<<32); got.Cmp(want[2*k]) != 0 {
				t.Errorf("case %d (d=%v c=%v): gap %s, want %s", k, a[0], a[1], got, want[2*k])
			}
			if got := hilo(v[i+2], v[i+3], 1<<51); got.Cmp(want[2*k+1]) != 0 {
				t.Errorf("case %d (%v): idle %s, want %s", k, a, got, want[2*k+1])
			}
			packed, _ := v[i+4].(string)
			st, ok, err := store.DecodeStored(packed)
			if err != nil || !ok || st.Idle != want[2*k+1].Int64() || st.Allocated != 0 || st.Permits != 0 || st.Lateness != 0 {
				t.Errorf("case %d: packed totals %q read as %+v (ok %v, err %v), want idle %s", k, packed, st, ok, err, want[2*k+1])
			}
		}
	}
	t.Run("miniredis", func(t *testing.T) {
		_, rdb := redistest.Mini(t)
		run(t, rdb)
	})
	t.Run("redis-server", func(t *testing.T) {
		run(t, redistest.Server(t).Client())
	})
}

// TestDiffRealRedisInstance runs acquires on a template instance against a
// real redis-server, where one acquire on an instance of a schedule template
// takes the fast path of a named limiter (acquire_one), or when the instance
// does not exist creates it there (create_one), and new template versions
// (of either kind) move it to the general path and back. The state
// Redis keeps is checked to the byte against the model, and so is the TTL the
// fast path gives the instance.
func TestDiffRealRedisInstance(t *testing.T) {
	t.Parallel()
	srv := redistest.Server(t)
	ops := diffOps(1500, 400)
	for i, mode := range []string{"functions", "scripts"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			var opts []store.Option
			if mode == "scripts" {
				opts = []store.Option{store.WithScriptsOnly()}
			}
			pfx := "diffinst-" + mode
			rdb := srv.Client()
			// The model does not expire instances: an idle TTL of an hour
			// keeps them while the test runs, however slow the machine
			// (TestInstanceTTL checks the TTLs the fast paths set).
			g := &diffRig{t: t, ctx: context.Background(), rdb: rdb, st: store.New(rdb, append([]store.Option{store.WithPrefix(pfx)}, opts...)...),
				name: "t:diff", key: pfx + ":{t:diff}:i", label: "real redis instance (" + mode + ")", ops: map[string]int{}, tpl: true,
				tplIdle: limiter.D(time.Hour)}
			r := rand.New(rand.NewPCG(uint64(7100+i), 0x696e7374))
			g.put(g.config(r, limiter.KindSchedule))
			fresh := 0
			for op := range ops {
				switch x := r.IntN(100); {
				case x < 2:
					k := limiter.KindSchedule
					if r.IntN(3) == 0 {
						k = limiter.KindSmooth
					}
					g.put(g.config(r, k))
				case x < 8: // an instance of a name never used: created by this acquire
					fresh++
					name := fmt.Sprintf("t:fresh%d", fresh)
					f := *g
					f.name, f.key, f.instExists, f.s, f.ver, f.p, f.grants = name, pfx+":{"+name+"}:i", false, limiter.State{}, g.tver, g.tp, nil
					f.hist = nil
					if r.IntN(4) == 0 {
						f.charge(f.chargeN(r), f.chargeWait(r))
					} else {
						f.acquire(g.randN(r), g.randWait(r), false)
					}
					if f.instExists {
						f.checkRaw()
						if ttl := rdb.PTTL(g.ctx, f.key).Val(); ttl == -1 || ttl > limitd.DefaultIdleTTL+time.Duration(limiter.MaxAhead) {
							f.fatalf("op %d: new instance PTTL %v", op, ttl)
						}
					}
					continue
				case x < 18:
					g.charge(g.chargeN(r), g.chargeWait(r))
				case x < 22:
					g.mixedMany(r, g.randN)
				default:
					g.acquire(g.randN(r), g.randWait(r), false)
				}
				if !g.instExists {
					continue
				}
				g.checkRaw()
				ttl := rdb.PTTL(g.ctx, g.key).Val()
				// an instance has a TTL (-1: none; it may be gone already,
				// -2, when it settles within a ms), which the default idle
				// TTL (limitd.DefaultIdleTTL) bounds after the debt; the debt
				// is at most MaxAhead (a charge's) ahead of now
				if ttl == -1 || ttl > limitd.DefaultIdleTTL+time.Duration(limiter.MaxAhead) {
					g.fatalf("op %d: instance PTTL %v", op, ttl)
				}
			}
			t.Logf("%s: %s", mode, g.summary())
		})
	}
}

// TestInstanceTTL: the TTL the fast paths give an instance, created
// (create_one) and used (acquire_one), on a real redis-server: without an
// idle_ttl its debt and then the time until it settles, at most
// limitd.DefaultIdleTTL (its backlog of an hour would take longer); with one,
// that idle_ttl, renewed by every use; an eighth more, set again only when
// a use needs more (lua/lib.lua, Instance TTLs). Read right after the
// acquire: a machine stalled for 10 s between the two would fail it.
func TestInstanceTTL(t *testing.T) {
	t.Parallel()
	rdb := redistest.Server(t).Client()
	ctx := context.Background()
	s := store.New(rdb, store.WithPrefix("ttl"))
	cfg := limiter.Config{Rate: 1000, Burst: limiter.B(1), MaxBacklog: limiter.D(time.Hour)}
	for _, c := range []struct {
		id   string
		idle *limiter.Duration
		want time.Duration
	}{{"bounded", nil, limitd.DefaultIdleTTL}, {"idle", limiter.D(30 * time.Minute), 30 * time.Minute}} {
		if _, err := s.PutTemplate(ctx, limitd.Template{ID: c.id, Pattern: c.id + ":*", Limiter: cfg, IdleTTL: c.idle}); err != nil {
			t.Fatal(err)
		}
		for i, what := range []string{"created", "used", "used again"} {
			if d, err := s.Acquire(ctx, c.id+":a", 1, time.Second); err != nil || !d.Granted || !d.Instance {
				t.Fatalf("%s, %s: %+v, %v", c.id, what, d, err)
			}
			ttl := rdb.PTTL(ctx, "ttl:{"+c.id+":a}:i").Val()
			// the debt is what is scheduled ahead of now: at most i+1 ms;
			// the fast paths set an eighth more, and none again while
			// that covers the need (lua/lib.lua, Instance TTLs)
			if most := c.want + c.want/8 + time.Duration(i+2)*time.Millisecond; ttl > most || ttl < c.want-10*time.Second {
				t.Errorf("%s, %s: PTTL %v, want between %v and %v", c.id, what, ttl, c.want, most)
			}
		}
		// A debt beyond the TTL set: the fast path sets one anew, which
		// covers the debt (40 minutes of schedule at 1000/s, a minute at a
		// time: the limiter's max_reserve).
		for range 40 {
			if d, err := s.Acquire(ctx, c.id+":a", 60_000, limitd.Forever); err != nil || !d.Granted {
				t.Fatalf("%s, in debt: %+v, %v", c.id, d, err)
			}
		}
		if ttl := rdb.PTTL(ctx, "ttl:{"+c.id+":a}:i").Val(); ttl < 40*time.Minute-10*time.Second || ttl > (40*time.Minute+c.want)*9/8 {
			t.Errorf("%s, in debt: PTTL %v, want at least the debt, 40m", c.id, ttl)
		}
	}
}

// TestInstanceTTLOfEachTemplate: a new instance's TTL is its own template's
// even when another template has the same parameters and version (two
// prefixes on one Redis): create_one keeps a permit's TTL with the
// template's parameters, for their idle_ttl alone.
func TestInstanceTTLOfEachTemplate(t *testing.T) {
	t.Parallel()
	rdb := redistest.Server(t).Client()
	ctx := context.Background()
	cfg := limiter.Config{Rate: 1000, Burst: limiter.B(1)}
	idle := map[string]time.Duration{"p1": time.Hour, "p2": 10 * time.Minute}
	for round := range 2 {
		for _, prefix := range []string{"p1", "p2"} {
			s := store.New(rdb, store.WithPrefix(prefix))
			if round == 0 {
				if _, err := s.PutTemplate(ctx, limitd.Template{ID: "t", Pattern: "u:*", Limiter: cfg, IdleTTL: limiter.D(idle[prefix])}); err != nil {
					t.Fatal(err)
				}
			}
			name := fmt.Sprint("u:", round)
			if d, err := s.Acquire(ctx, name, 1, 0); err != nil || !d.Granted || !d.Instance {
				t.Fatalf("%s %s: %+v, %v", prefix, name, d, err)
			}
			ttl := rdb.PTTL(ctx, prefix+":{"+name+"}:i").Val()
			if want := idle[prefix]; ttl < want-10*time.Second || ttl > want+want/8 {
				t.Errorf("%s %s: PTTL %v, want %v and up to an eighth more", prefix, name, ttl, want)
			}
		}
	}
}
