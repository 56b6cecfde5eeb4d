package limiter

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// Engine-level tests of the schedule engine (DESIGN §3.1). Helpers shared by the
// engine test files (schedule, smooth, precision) live here; their names start
// with "eng" so they cannot clash with the local limiter's tests.

const (
	engMs  = int64(time.Millisecond)
	engSec = int64(time.Second)
)

// engCompile compiles c or fails the test.
func engCompile(t testing.TB, c Config) Params {
	t.Helper()
	p, err := Compile(c)
	if err != nil {
		t.Fatalf("Compile(%+v): %v", c, err)
	}
	return p
}

// engAcquire acquires n permits or fails the test on an argument error.
func engAcquire(t testing.TB, p *Params, s *State, now, n, maxWait int64) Result {
	t.Helper()
	r, err := p.Acquire(s, now, n, maxWait)
	if err != nil {
		t.Fatalf("Acquire(now=%d, n=%d, maxWait=%d): %v", now, n, maxWait, err)
	}
	return r
}

// engSliceRat is the exact rational value of a slice, in ns.
func engSliceRat(sl Slice) *big.Rat {
	num := new(big.Int).Mul(big.NewInt(sl.Whole), big.NewInt(sl.Den))
	num.Add(num, big.NewInt(sl.Frac))
	return new(big.Rat).SetFrac(num, big.NewInt(sl.Den))
}

// engFloorDiv is ⌊c/b⌋ computed exactly (b finite, ≥ 1).
func engFloorDiv(c int64, b float64) int64 {
	q := new(big.Rat).Quo(new(big.Rat).SetInt64(c), new(big.Rat).SetFloat64(b))
	return new(big.Int).Quo(q.Num(), q.Denom()).Int64()
}

// engForfeited is what a denied schedule acquire may leave behind: the state
// unchanged except for the forfeiture of backlog beyond max_backlog, which Peek
// shows (DESIGN §3.1: "otherwise a denied request changes nothing").
func engForfeited(p *Params, s State, now int64) State {
	v := p.Peek(s, now)
	s.Idle = v.Idle
	s.Next = s.Origin + s.Allocated + s.Idle
	return s
}

// engCheckScheduleInvariant checks Next = Origin + Allocated + Idle and
// now − origin = allocated + idle + backlog − debt (DESIGN §3.1).
func engCheckScheduleInvariant(p *Params, s State, now int64) error {
	if !s.Started {
		return nil
	}
	if s.Next != s.Origin+s.Allocated+s.Idle {
		return fmt.Errorf("Next %d != Origin %d + Allocated %d + Idle %d (off by %d)",
			s.Next, s.Origin, s.Allocated, s.Idle, s.Next-(s.Origin+s.Allocated+s.Idle))
	}
	v := p.Peek(s, now)
	a := s.Origin + v.Allocated + v.Idle // the schedule pointer after forfeiture
	debt := max(0, a-now)
	if now-s.Origin != v.Allocated+v.Idle+v.Wait-debt {
		return fmt.Errorf("now−origin %d != allocated %d + idle %d + backlog %d − debt %d",
			now-s.Origin, v.Allocated, v.Idle, v.Wait, debt)
	}
	if v.Wait > p.MaxBacklog {
		return fmt.Errorf("backlog %d > max_backlog %d", v.Wait, p.MaxBacklog)
	}
	return nil
}

// --- nosqlbench catch-up (DESIGN §3.1, §8) ---

type engGrant struct {
	now, start, wait int64
}

// engStall runs the nosqlbench scenario on a schedule limiter: an infinitely
// fast caller (it asks again at the start of its previous grant) runs for 2000
// permits, then stalls until it is exactly 1 s behind its schedule (the next
// call comes at Next + 1 s), then runs infinitely fast again until its starts
// pass stall+span. It returns the stall instant T, the grants from T on, and the
// view just before the first call after the stall and just before the stall.
func engStall(t *testing.T, c Config, span int64) (p Params, T int64, gs []engGrant, atT, beforeT View) {
	t.Helper()
	p = engCompile(t, c)
	var s State
	now := int64(1_700_000_000) * engSec // an ordinary Unix time
	var prev int64
	for i := range 2000 {
		r := engAcquire(t, &p, &s, now, 1, Forever)
		if !r.Granted {
			t.Fatalf("continuous phase: grant %d denied: %+v", i, r)
		}
		want := p.Slice.Whole
		if i == 1 { // the second starts as early as the schedule lets it (burst inf: early)
			want -= min(p.early(), want)
		}
		if i > 0 && r.Start-prev != want {
			t.Fatalf("continuous phase: gap %d at grant %d, want %d", r.Start-prev, i, want)
		}
		prev, now = r.Start, r.Start
	}
	beforeT = p.Peek(s, now)
	T = s.Next + engSec
	atT = p.Peek(s, T)
	now = T
	for now < T+span {
		r := engAcquire(t, &p, &s, now, 1, Forever)
		if !r.Granted {
			t.Fatalf("after the stall: denied: %+v", r)
		}
		gs = append(gs, engGrant{now: now, start: r.Start, wait: r.Wait})
		now = r.Start
	}
	return p, T, gs, atT, beforeT
}

func engCountStarts(gs []engGrant, from, to int64) int {
	n := 0
	for _, g := range gs {
		if g.start >= from && g.start < to {
			n++
		}
	}
	return n
}

// engFirstAt is the index of the first grant made at or after time x.
func engFirstAt(t *testing.T, gs []engGrant, x int64) int {
	t.Helper()
	for i, g := range gs {
		if g.now >= x {
			return i
		}
	}
	t.Fatalf("no grant at or after %d", x)
	return -1
}

func engWithin(got, want, rel float64) bool { return math.Abs(got-want) <= rel*math.Abs(want) }

func TestScheduleCatchUpAfterStall(t *testing.T) {
	p, T, gs, atT, _ := engStall(t, Config{Spec: "1000,1.1"}, 15*engSec)
	if atT.Wait != engSec {
		t.Fatalf("backlog at the stall = %d, want 1 s", atT.Wait)
	}
	if gs[0].start != T || gs[0].wait != engSec-engMs {
		t.Fatalf("first grant after the stall: start %d (want T=%d), wait %d (want 999ms)", gs[0].start, T, gs[0].wait)
	}
	// Behind: starts 1100/s and the backlog falls 0.1 s per second, both within
	// 0.1%, second by second.
	for k := range int64(9) {
		if n := engCountStarts(gs, T+k*engSec, T+(k+1)*engSec); !engWithin(float64(n), 1100, 0.001) {
			t.Errorf("second %d after the stall: %d starts, want 1100 ± 0.1%%", k, n)
		}
		// (+1: the two grants made at T itself are not a rate.)
		a, b := gs[engFirstAt(t, gs, T+k*engSec+1)], gs[engFirstAt(t, gs, T+(k+1)*engSec+1)]
		slope := float64(a.wait-b.wait) / float64(b.now-a.now)
		if !engWithin(slope, 0.1, 0.001) {
			t.Errorf("second %d after the stall: backlog falls %.6f s/s, want 0.1 ± 0.1%%", k, slope)
		}
	}
	// Caught up after backlog/0.1 = 10 s (less the permit granted at T).
	caught := -1
	for i, g := range gs {
		if g.wait == 0 {
			caught = i
			break
		}
	}
	if caught < 0 {
		t.Fatal("never caught up")
	}
	if at := gs[caught].now - T; at < 9_900*engMs || at > 10_100*engMs {
		t.Errorf("caught up %v after the stall, want ≈ 10 s", time.Duration(at))
	}
	// The pace lets go gradually: when the backlog is gone the pace may still lie
	// up to two slices past the schedule, which gains 1/11 slice a grant on it.
	// From 25 grants after catching up on, starts are exactly one slice apart.
	for i := caught + 25; i < len(gs); i++ {
		if gap := gs[i].start - gs[i-1].start; gap != p.Slice.Whole {
			t.Fatalf("caught up: gap %d at grant %d, want one slice (1000/s)", gap, i)
		}
	}
	tc := gs[caught].start
	if n := engCountStarts(gs, tc+engSec/2, tc+engSec/2+3*engSec); !engWithin(float64(n), 3000, 0.001) {
		t.Errorf("caught up: %d starts in 3 s, want 3000 ± 0.1%%", n)
	}
}

func TestScheduleStrictNeverCatchesUp(t *testing.T) {
	p, T, gs, _, _ := engStall(t, Config{Spec: "1000,1"}, 15*engSec)
	// The caller asks at its previous start, one slice before its own: the
	// backlog it sees stays 998ms (999ms at its start) and is never recovered.
	for i, g := range gs {
		if i > 0 && g.start-gs[i-1].start != p.Slice.Whole {
			t.Fatalf("burst 1: gap %d at grant %d, want exactly one slice", g.start-gs[i-1].start, i)
		}
		if i > 0 && g.wait != engSec-2*engMs {
			t.Fatalf("burst 1: backlog %d at grant %d (t=T+%v), want it kept at 998ms", g.wait, i, time.Duration(g.now-T))
		}
	}
	if n := engCountStarts(gs, T, T+10*engSec); n != 10000 {
		t.Errorf("burst 1: %d starts in 10 s after the stall, want 10000", n)
	}
}

func TestScheduleAverageCatchesUpAtOnce(t *testing.T) {
	p, T, gs, _, _ := engStall(t, Config{Spec: "1000,inf"}, 3*engSec)
	// The permits due in [T−1s, T] all start at T: 1001 of them, and one more
	// due within AtOnce (1 ms: one slice) after T; the backlog is gone without
	// any time passing.
	i := 0
	for ; i < len(gs) && gs[i].start == T; i++ {
	}
	if want := 1001 + int(AtOnce/p.Slice.Whole); i != want {
		t.Errorf("burst inf: %d starts at the stall instant, want %d", i, want)
	}
	if gs[i-1].wait != 0 || gs[i-2].wait != 0 || gs[i-3].wait != 0 || gs[i-4].wait != engMs {
		t.Errorf("burst inf: backlog did not reach 0 at the stall instant: %v", gs[i-3:i])
	}
	for j := i; j < len(gs); j++ {
		if gs[j].start-gs[j-1].start != p.Slice.Whole {
			t.Fatalf("burst inf, caught up: gap %d at grant %d, want one slice", gs[j].start-gs[j-1].start, j)
		}
	}
}

func TestScheduleMaxBacklog(t *testing.T) {
	_, T, gs, atT, before := engStall(t, Config{Spec: "1000,1.1", MaxBacklog: D(250 * time.Millisecond)}, 5*engSec)
	if atT.Wait != 250*engMs {
		t.Errorf("backlog after a 1 s stall = %v, want max_backlog 250ms", time.Duration(atT.Wait))
	}
	if grew := atT.Idle - before.Idle; grew != 750*engMs {
		t.Errorf("idle grew by %v, want 750ms", time.Duration(grew))
	}
	for i, g := range gs {
		if g.wait > 250*engMs {
			t.Fatalf("grant %d: backlog %v > max_backlog", i, time.Duration(g.wait))
		}
	}
	if n := engCountStarts(gs, T, T+2*engSec); !engWithin(float64(n), 2200, 0.001) {
		t.Errorf("catching up: %d starts in 2 s, want 2200 ± 0.1%%", n)
	}
	caught := -1
	for i, g := range gs {
		if g.wait == 0 {
			caught = i
			break
		}
	}
	if caught < 0 {
		t.Fatal("never caught up")
	}
	if at := gs[caught].now - T; at < 2_400*engMs || at > 2_600*engMs {
		t.Errorf("caught up %v after the stall, want ≈ 2.5 s", time.Duration(at))
	}
	if n := engCountStarts(gs, T+3*engSec, T+4*engSec); n != 1000 {
		t.Errorf("caught up: %d starts in 1 s, want 1000", n)
	}
}

func TestScheduleZeroBacklogStrictForfeitsEveryLateGap(t *testing.T) {
	p := engCompile(t, Config{Rate: 1000, Burst: B(1), MaxBacklog: D(0)})
	var s State
	engAcquire(t, &p, &s, 5*engSec, 1, 0)
	for i, late := range []int64{0, 1, 300_000, engMs, 7 * engSec, 0, 12345} {
		now := s.Next + late
		idle := s.Idle
		r := engAcquire(t, &p, &s, now, 1, 0)
		if !r.Granted || r.Start != now || r.Lateness != 0 || r.Wait != 0 {
			t.Fatalf("step %d: %+v, want an on-time grant with no backlog", i, r)
		}
		if s.Idle-idle != late {
			t.Fatalf("step %d: idle grew %d, want the late gap %d", i, s.Idle-idle, late)
		}
	}
}

// --- Results, arguments and the Undo / Reset / Reconfigure operations ---

func TestScheduleResultFields(t *testing.T) {
	p := engCompile(t, Config{Rate: 10, Burst: B(2)}) // slice 100ms, pace 50ms while behind
	var s State
	t0 := int64(1000 * engSec)
	r := engAcquire(t, &p, &s, t0, 3, 0)
	want := Result{Granted: true, Permits: 3, Scheduled: t0, Start: t0}
	if r != want {
		t.Fatalf("first grant %+v, want %+v", r, want)
	}
	// The caller pays later: the next request waits for the 300ms of debt.
	r = engAcquire(t, &p, &s, t0+100*engMs, 1, 150*engMs)
	if r.Granted || r.Delay != 200*engMs || r.RetryAfter != 50*engMs {
		t.Fatalf("denied request: %+v, want delay 200ms, retry after 50ms", r)
	}
	r = engAcquire(t, &p, &s, t0+150*engMs, 1, 150*engMs)
	if !r.Granted || r.Scheduled != t0+300*engMs || r.Start != t0+300*engMs || r.Delay != 150*engMs || r.Lateness != 0 {
		t.Fatalf("retry: %+v", r)
	}
	// 1 s later the caller is 600ms behind: it starts at once, then is paced at
	// slice/burst = 50ms while behind.
	now := t0 + 1000*engMs
	r = engAcquire(t, &p, &s, now, 1, 0)
	if !r.Granted || r.Scheduled != t0+400*engMs || r.Start != now || r.Lateness != 600*engMs || r.Wait != 500*engMs {
		t.Fatalf("behind: %+v", r)
	}
	r = engAcquire(t, &p, &s, now, 1, Forever)
	if !r.Granted || r.Start != now+50*engMs || r.Delay != 50*engMs || r.Lateness != 550*engMs || r.Wait != 400*engMs {
		t.Fatalf("paced: %+v", r)
	}
	if s.Permits != 6 || s.Lateness != 600*engMs+550*engMs {
		t.Fatalf("totals: permits %d lateness %d", s.Permits, s.Lateness)
	}
}

func TestEnginePermitsArgument(t *testing.T) {
	for _, c := range []Config{{Rate: 3}, {Rate: 1e9}, {Rate: 1e-6}, {Kind: KindSmooth, Rate: 5}} {
		p := engCompile(t, c)
		var s State
		for _, n := range []int64{0, -1, math.MinInt64, p.MaxPermits + 1, math.MaxInt64} {
			before := s
			_, err := p.Acquire(&s, 1, n, Forever)
			var fe *FieldError
			if !errors.Is(err, ErrInvalid) || !errors.As(err, &fe) || fe.Field != "permits" {
				t.Errorf("%+v: Acquire(n=%d) error %v, want a FieldError on permits", c, n, err)
			}
			if s != before {
				t.Errorf("%+v: a rejected request changed the state", c)
			}
		}
		if err := p.CheckPermits(p.MaxPermits); err != nil {
			t.Errorf("%+v: MaxPermits %d rejected: %v", c, p.MaxPermits, err)
		}
		if r := engAcquire(t, &p, &s, 1, p.MaxPermits, Forever); !r.Granted {
			t.Errorf("%+v: MaxPermits not granted: %+v", c, r)
		}
	}
}

func TestScheduleExtremeMaxWait(t *testing.T) {
	p := engCompile(t, Config{Rate: 5, Burst: B(1), MaxReserve: D(time.Duration(Horizon))})
	var s State
	now := int64(math.MaxInt64 / 2)
	if r := engAcquire(t, &p, &s, now, 1, math.MinInt64); !r.Granted {
		t.Fatalf("first request with max_wait MinInt64: %+v", r)
	}
	if r := engAcquire(t, &p, &s, now, 1, math.MinInt64); r.Granted || r.RetryAfter != 200*engMs {
		t.Fatalf("negative max_wait must count as 0: %+v", r)
	}
	if r := engAcquire(t, &p, &s, now, 1, -1); r.Granted || r.RetryAfter != 200*engMs {
		t.Fatalf("max_wait -1 must count as 0: %+v", r)
	}
	for _, mw := range []int64{math.MaxInt64, Forever, math.MaxInt64 - 1} {
		r := engAcquire(t, &p, &s, now, 1, mw)
		if !r.Granted || r.Delay <= 0 || r.Start < now {
			t.Fatalf("max_wait %d: %+v (overflow?)", mw, r)
		}
	}
	// Forever is capped at Horizon: a request that would wait longer is denied,
	// with a sane retry time.
	r := engAcquire(t, &p, &s, now, p.MaxPermits, Forever)
	if !r.Granted {
		t.Fatalf("MaxPermits: %+v", r)
	}
	r = engAcquire(t, &p, &s, now, 1, Forever)
	if r.Granted || r.RetryAfter <= 0 || r.Delay-r.RetryAfter != Horizon {
		t.Fatalf("beyond Horizon: %+v, want denied with retry_after = delay − Horizon", r)
	}
}

func TestScheduleUndo(t *testing.T) {
	p := engCompile(t, Config{Rate: 3})
	var s State
	now := int64(42 * engSec)
	engAcquire(t, &p, &s, now, 1, 0)
	before := s
	r := engAcquire(t, &p, &s, now, 2, Forever)
	after := s
	p.Undo(&s, before, after, r)
	if s != before {
		t.Fatalf("undo with nothing in between: %+v, want %+v", s, before)
	}
	// Something happened in between: the permits are lost to everyone.
	before = s
	r = engAcquire(t, &p, &s, now, 2, Forever)
	after = s
	engAcquire(t, &p, &s, now, 1, Forever)
	cur := s
	p.Undo(&s, before, after, r)
	cost := after.Allocated - before.Allocated
	want := cur
	want.Allocated, want.Idle, want.Permits, want.Lateness = cur.Allocated-cost, cur.Idle+cost, cur.Permits-2, cur.Lateness-r.Lateness
	if s != want {
		t.Fatalf("undo after another grant:\n got %+v\nwant %+v", s, want)
	}
	if err := engCheckScheduleInvariant(&p, s, now); err != nil {
		t.Fatal(err)
	}
	// A denied result undoes nothing.
	den := engAcquire(t, &p, &s, now, 1, 0)
	cur = s
	p.Undo(&s, before, after, den)
	if den.Granted || s != cur {
		t.Fatal("undo of a denied result changed the state")
	}
}

func TestScheduleResetAndReconfigure(t *testing.T) {
	p := engCompile(t, Config{Rate: 1000, Burst: B(1.1)})
	var s State
	t0 := int64(10 * engSec)
	engAcquire(t, &p, &s, t0, 1, 0)
	now := t0 + 500*engMs // 499ms behind
	tot := s
	p.Reset(&s, now)
	if v := p.Peek(s, now); v.Wait != 0 || v.Delay != 0 || v.Permits != tot.Permits || v.Allocated != tot.Allocated {
		t.Fatalf("after reset: %+v, want no backlog and the totals kept", v)
	}
	if s.Idle != 499*engMs {
		t.Fatalf("reset forfeited %d, want the 499ms backlog", s.Idle)
	}
	r := engAcquire(t, &p, &s, now, 1, 0)
	if r.Scheduled != now || r.Lateness != 0 {
		t.Fatalf("first grant after reset: %+v", r)
	}
	// Reset with debt (permits granted ahead) keeps them granted.
	engAcquire(t, &p, &s, now, 100, Forever)
	next := s.Next
	p.Reset(&s, now)
	if s.Next != next {
		t.Fatalf("reset moved the schedule of granted permits: %d → %d", next, s.Next)
	}

	// Reconfigure keeps A, pace and backlog; new slices apply to later permits.
	var u State
	engAcquire(t, &p, &u, t0, 1, 0)
	now = t0 + 300*engMs
	vOld := p.Peek(u, now)
	np := engCompile(t, Config{Rate: 2000, Burst: B(2)})
	Reconfigure(&u, now, &p, &np)
	if v := np.Peek(u, now); v.Wait != vOld.Wait || v.Delay != vOld.Delay {
		t.Fatalf("reconfigure lost the backlog: %+v → %+v", vOld, v)
	}
	a := u.Next
	r1 := engAcquire(t, &np, &u, now, 1, 0)
	r2 := engAcquire(t, &np, &u, now, 1, Forever)
	if r1.Scheduled != a || r2.Scheduled != a+500_000 || r2.Start != now+250_000 {
		t.Fatalf("after reconfigure: %+v %+v, want slices of 500µs paced at 250µs", r1, r2)
	}
	// A reset on a limiter that never started does nothing.
	var z State
	p.Reset(&z, now)
	Reconfigure(&z, now, &p, &np)
	if z != (State{}) {
		t.Fatalf("reset/reconfigure started a limiter: %+v", z)
	}
}

// --- Property tests ---

var engSeeds = []uint64{1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, 610, 987, 1597}

// engRandRate draws a rate: mostly everyday rates, sometimes extreme ones.
func engRandRate(rng *rand.Rand) float64 {
	switch rng.IntN(10) {
	case 0:
		return MinRate * math.Pow(10, 15*rng.Float64()) // the whole range
	case 1:
		return []float64{MinRate, MaxRate, 3, 7, 1100.5, 1e6, 123456.789}[rng.IntN(7)]
	default:
		return math.Round(math.Pow(10, 6*rng.Float64())*100) / 100
	}
}

func engRandScheduleConfig(rng *rand.Rand) Config {
	c := Config{Rate: engRandRate(rng)}
	switch rng.IntN(6) {
	case 0:
		c.Burst = B(1)
	case 1:
		c.Burst = B(Inf)
	case 2:
		c.Burst = B(1 + 9*rng.Float64())
	case 3:
		c.Burst = B([]float64{1.1, 1.5, 2, MaxBurst}[rng.IntN(4)])
	} // else default 1.1
	switch rng.IntN(4) {
	case 0:
		c.MaxBacklog = D(0)
	case 1:
		c.MaxBacklog = D(time.Duration(rng.Int64N(10 * engSec)))
	case 2:
		c.MaxBacklog = D(time.Duration(rng.Int64N(Horizon)))
	}
	return c
}

// engRandStep draws a time step relative to the slice: zero steps, fractions
// and multiples of a slice, large gaps, and (if back) backward steps.
func engRandStep(rng *rand.Rand, slice float64, back bool) int64 {
	slice = min(slice, float64(Horizon/256)) // keep long runs of huge slices far from overflow
	switch k := rng.IntN(20); {
	case k < 4:
		return 0
	case k < 12:
		return int64(slice * rng.Float64() * 2)
	case k < 15:
		return int64(slice * float64(rng.IntN(50)))
	case k < 17:
		return rng.Int64N(engSec) + 1
	case k < 18:
		return rng.Int64N(Horizon / 64) // up to ~4.9 hours
	case k < 19 && back:
		return -rng.Int64N(2*engSec) - 1
	default:
		return 1
	}
}

func engRandPermits(rng *rand.Rand, maxPermits int64) int64 {
	switch k := rng.IntN(40); {
	case k < 28:
		return 1
	case k < 38:
		return min(maxPermits, 1+rng.Int64N(100))
	case k < 39:
		return 1 + rng.Int64N(maxPermits)
	default:
		return maxPermits
	}
}

func engRandMaxWait(rng *rand.Rand, slice float64) int64 {
	switch rng.IntN(8) {
	case 0, 1:
		return 0
	case 2:
		return Forever
	case 3:
		return -rng.Int64N(engSec) - 1
	case 4:
		return math.MinInt64
	default:
		return int64(slice * 3 * rng.Float64())
	}
}

// engTrace keeps the last operations of a random run for the failure message.
// It formats them only when a test fails: formatting every step would dominate
// the run time under the race detector.
type engTrace struct {
	ops  [12]engOp
	next int
}

type engOp struct {
	format string
	args   []any
}

func (tr *engTrace) add(format string, args ...any) {
	tr.ops[tr.next%len(tr.ops)] = engOp{format, args}
	tr.next++
}

func (tr *engTrace) String() string {
	var b strings.Builder
	b.WriteString("\n  last ops:")
	for i := max(0, tr.next-len(tr.ops)); i < tr.next; i++ {
		op := tr.ops[i%len(tr.ops)]
		b.WriteString("\n    " + fmt.Sprintf(op.format, op.args...))
	}
	return b.String()
}

// TestSchedulePropertyRandomOps drives the schedule engine with random call
// sequences (acquire with random n and max_wait, random time steps with large
// gaps, zero and backward steps, peek, reset, reconfigure to random rates,
// bursts and max_backlog, undo, a client pool's hand-back of unused permits)
// and checks after every operation:
//
//	(a) Next = Origin + Allocated + Idle and now − origin = allocated + idle +
//	    backlog − debt;
//	(b) consecutive granted starts are at least ⌊cost/b⌋ apart, cost and b being
//	    the earlier grant's (the engine rounds the pace up, so the exact bound
//	    cost/b holds to within 1 ns of float rounding; we check the floor);
//	(d) a denied request changes nothing but forfeiture (compared with a
//	    Peek-forfeited copy), reports retry_after exactly (the same request is
//	    granted retry_after later, and denied 1 ns earlier), and Peek's delay is
//	    the delay the next request gets.
//
// A hand-back released at once rewinds the schedule to exactly the state a
// grant of the used permits alone would have left; released later, it moves
// its time from allocated to idle unless nothing was granted since.
func TestSchedulePropertyRandomOps(t *testing.T) {
	for _, seed := range engSeeds {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) { engScheduleRandomRun(t, seed, 2500) })
	}
}

func engScheduleRandomRun(t *testing.T, seed uint64, ops int) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	cfg := engRandScheduleConfig(rng)
	p := engCompile(t, cfg)
	var s State
	now := rng.Int64N(1 << 61)
	tr := &engTrace{}
	tr.add("config %+v burst %v max_backlog %d now %d", cfg, p.Burst, p.MaxBacklog, now)
	fail := func(i int, format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d, op %d: %s%s", seed, i, fmt.Sprintf(format, args...), tr)
	}
	type grant struct {
		start, cost int64
		burst       float64
	}
	var last *grant                 // the previous grant, for (b)
	var pending *Handback           // a hand-back not yet released
	var pendingVersion, version int // version counts reconfigurations
	var undoable struct {
		ok            bool
		before, after State
		r             Result
		last          *grant
	}
	for i := range ops {
		now += engRandStep(rng, p.Slice.Float(), false)
		now = max(now, 0)
		switch k := rng.IntN(100); {
		case k < 75:
			n, mw := engRandPermits(rng, p.MaxPermits), engRandMaxWait(rng, p.Slice.Float())
			before, view := s, p.Peek(s, now)
			r := engAcquire(t, &p, &s, now, n, mw)
			tr.add("acquire(now=%d, n=%d, maxWait=%d) → %+v", now, n, mw, r)
			clamped := min(max(mw, 0), Horizon)
			if before.Started && r.Delay != view.Delay {
				fail(i, "acquire delay %d != Peek delay %d", r.Delay, view.Delay)
			}
			if r.Granted != (r.Delay <= clamped) {
				fail(i, "granted=%v with delay %d and max_wait %d", r.Granted, r.Delay, clamped)
			}
			if !r.Granted {
				if want := engForfeited(&p, before, now); s != want {
					fail(i, "denied request changed the state:\n got %+v\nwant %+v", s, want)
				}
				if r.RetryAfter != r.Delay-clamped || r.RetryAfter <= 0 {
					fail(i, "retry_after %d, want delay %d − max_wait %d", r.RetryAfter, r.Delay, clamped)
				}
				u := s
				if r2 := engAcquire(t, &p, &u, now+r.RetryAfter, n, mw); !r2.Granted {
					fail(i, "retry after %d denied: %+v", r.RetryAfter, r2)
				}
				u = s
				if r2 := engAcquire(t, &p, &u, now+r.RetryAfter-1, n, mw); r2.Granted {
					fail(i, "retry 1ns before retry_after granted: %+v", r2)
				}
				break
			}
			cost, rem := p.Slice.Cost(n, before.Rem)
			if !before.Started {
				cost, rem = p.Slice.Cost(n, 0)
			}
			switch {
			case r.Start != now+r.Delay || r.Start < now || r.Start < r.Scheduled-p.early() || r.Lateness != max(0, r.Start-r.Scheduled):
				fail(i, "inconsistent result %+v", r)
			case s.Allocated-before.Allocated != cost || s.Rem != rem || s.Permits-before.Permits != n:
				fail(i, "allocated +%d rem %d permits +%d, want cost %d rem %d permits %d",
					s.Allocated-before.Allocated, s.Rem, s.Permits-before.Permits, cost, rem, n)
			case r.Wait != max(0, now-s.Next):
				fail(i, "wait %d, want max(0, now − A) = %d", r.Wait, max(0, now-s.Next))
			}
			if last != nil {
				gap := r.Start - last.start
				if gap < 0 {
					fail(i, "start %d before the previous start %d", r.Start, last.start)
				}
				if !math.IsInf(last.burst, 1) && gap < engFloorDiv(last.cost, last.burst) {
					fail(i, "start gap %d < ⌊cost %d / burst %v⌋", gap, last.cost, last.burst)
				}
			}
			undoable.ok, undoable.before, undoable.after, undoable.r, undoable.last = true, before, s, r, last
			last = &grant{start: r.Start, cost: cost, burst: p.Burst}
			if n >= 2 && rng.IntN(4) == 0 {
				// A client pool hands back the unused tail of its grant.
				m := 1 + rng.Int64N(n-1)
				h := p.HandbackOf(r, before.Rem, s.Next, n, m)
				undoable.ok = false // a grant is taken back once, by Undo or by Release
				if rng.IntN(2) == 0 {
					pending, pendingVersion = &h, version
					break
				}
				// At once: the schedule is rewound to what a grant of n−m would have left.
				alt := before
				altR := engAcquire(t, &p, &alt, now, n-m, mw)
				rewound := p.Release(&s, h, true)
				tr.add("release(%d of %d at once) → rewound %v", m, n, rewound)
				if !rewound || s != alt || !altR.Granted {
					fail(i, "hand-back of %d of %d permits at once: rewound %v\n got %+v\nwant %+v", m, n, rewound, s, alt)
				}
				last.cost = alt.Allocated - before.Allocated
			}
		case k < 83:
			v := p.Peek(s, now)
			tr.add("peek(now=%d) → %+v", now, v)
			if v.Delay < 0 || v.Wait < 0 || (s.Started && v.Idle < s.Idle) {
				fail(i, "bad view %+v", v)
			}
		case k < 88:
			before := s
			p.Reset(&s, now)
			tr.add("reset(now=%d)", now)
			if before.Started {
				if v := p.Peek(s, now); v.Wait != 0 || v.Permits != before.Permits || v.Allocated != before.Allocated {
					fail(i, "after reset: %+v", v)
				}
				if s.Next < before.Next || s.Pace < before.Pace {
					fail(i, "reset moved the schedule back")
				}
			}
		case k < 95:
			nc := engRandScheduleConfig(rng)
			np := engCompile(t, nc)
			before := s
			Reconfigure(&s, now, &p, &np)
			tr.add("reconfigure(now=%d, %+v burst %v max_backlog %d)", now, nc, np.Burst, np.MaxBacklog)
			version++
			if before.Started && (s.Pace != before.Pace || s.Permits != before.Permits || s.Allocated != before.Allocated) {
				fail(i, "reconfigure changed pace or totals: %+v → %+v", before, s)
			}
			p = np
		case k < 97:
			if pending == nil {
				break
			}
			h, current := *pending, pendingVersion == version && rng.IntN(4) > 0
			pending = nil
			before := s
			rewound := p.Release(&s, h, current)
			tr.add("release(%+v, current=%v) → rewound %v", h, current, rewound)
			unused := max(0, min(h.Unused, h.End-h.Sched))
			if s.Allocated != before.Allocated-unused || s.Permits != before.Permits-h.Permits ||
				rewound && (!current || before.Next != h.End || s.Next != h.End-unused || s.Pace != h.PaceUsed) ||
				!rewound && (s.Idle != before.Idle+unused || s.Next != before.Next) {
				fail(i, "release: rewound %v\n %+v →\n %+v", rewound, before, s)
			}
			if rewound && last != nil {
				last.cost -= unused
			}
			undoable.ok = false
		default:
			if !undoable.ok {
				break
			}
			rewind := s == undoable.after
			p.Undo(&s, undoable.before, undoable.after, undoable.r)
			tr.add("undo(rewind=%v)", rewind)
			if rewind {
				if s != undoable.before {
					fail(i, "undo did not rewind")
				}
				last = undoable.last
			}
			undoable.ok = false
		}
		if err := engCheckScheduleInvariant(&p, s, now); err != nil {
			fail(i, "%v", err)
		}
		if s.Rem < 0 || s.Rem >= p.Slice.Den {
			fail(i, "carry %d outside [0, Den=%d)", s.Rem, p.Slice.Den)
		}
	}
}

// TestSchedulePropertyWindow checks (c), how many permits may start in a window.
//
// The guarantee, for fixed parameters (rate r, slice σ = 1e9/r, burst b,
// max_backlog M): take the grants whose starts lie in [t, t+W], j the first
// and k the last, and let m be the permits of all of them but the last. Then
//
//	m·σ ≤ min(b·W, W + L_j) + 1 ns,   L_j = lateness of grant j ≤ M,
//
// so at most r·W·b + n_k permits start in any window, and once caught up (L_j
// = 0) at most r·W + n_k: the burst only helps while behind (DESIGN §3.1),
// and never by more than the backlog. Burst inf adds E = min(AtOnce, M), how
// early its starts may be: m·σ ≤ W + L_j + E + 1 ns.
//
// Why: every grant sets pace = start + ⌈cost/b⌉ and the next start is ≥ pace,
// so Σ_{j..k−1} cost ≤ b·(start_k − start_j) ≤ b·W. And A only grows (by cost,
// and by forfeiture), so Σ_{j..k−1} cost ≤ sched_k − sched_j ≤ start_k −
// (start_j − L_j) ≤ W + L_j (burst inf: sched_k ≤ start_k + E). The costs carry their sub-ns remainder, so m
// permits cost more than m·σ − 1 ns. L_j ≤ M holds because after forfeiture
// A ≥ now − M and pace − A ≤ M is kept by every operation.
func TestSchedulePropertyWindow(t *testing.T) {
	for _, seed := range engSeeds {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 0xc0ffee))
			cfg := engRandScheduleConfig(rng)
			cfg.Rate = math.Round(math.Pow(10, 1+5*rng.Float64())) // windows of many permits
			p := engCompile(t, cfg)
			sl := p.Slice.Float()
			var s State
			now := rng.Int64N(1 << 60)
			type grant struct{ start, n, late int64 }
			var gs []grant
			fast := 0 // an infinitely fast caller for this many more requests
			for range 6000 {
				var n, mw int64 = 1, Forever
				switch {
				case fast > 0:
					fast--
				case rng.IntN(30) == 0:
					now += int64(sl * float64(rng.IntN(2000))) // a stall
					fast = rng.IntN(3000)
				case rng.IntN(40) == 0:
					p.Reset(&s, now)
					continue
				default:
					now += engRandStep(rng, sl, false)
					n = engRandPermits(rng, min(p.MaxPermits, 20))
					mw = engRandMaxWait(rng, sl)
				}
				r := engAcquire(t, &p, &s, now, n, mw)
				if !r.Granted {
					continue
				}
				if r.Lateness > p.MaxBacklog {
					t.Fatalf("seed %d: lateness %d > max_backlog %d", seed, r.Lateness, p.MaxBacklog)
				}
				gs = append(gs, grant{r.Start, n, r.Lateness})
				if fast > 0 {
					now = r.Start
				}
			}
			sigma, _ := engSliceRat(p.Slice).Float64()
			for _, w := range []int64{p.Slice.Whole, 2 * p.Slice.Whole, 10 * p.Slice.Whole, 137 * p.Slice.Whole, engSec, 3 * engSec} {
				k, m := 0, int64(0) // grants j..k−1 are in the window; m their permits
				for j := range gs {
					if k < j {
						k, m = j, 0
					}
					for k+1 < len(gs) && gs[k+1].start <= gs[j].start+w {
						m += gs[k].n
						k++
					}
					bound := float64(w) + float64(gs[j].late) + float64(p.early())
					if !math.IsInf(p.Burst, 1) {
						bound = min(bound, p.Burst*float64(w))
					}
					if float64(m)*sigma > bound*(1+1e-12)+1 {
						t.Fatalf("seed %d (rate %v burst %v): %d permits (+%d) start in [%d, %d+%d], bound %.0f ns of schedule = %.1f permits",
							seed, cfg.Rate, p.Burst, m, gs[k].n, gs[j].start, gs[j].start, w, bound, bound/sigma)
					}
					if j < k {
						m -= gs[j].n
					}
				}
			}
		})
	}
}
