package limiter

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"
)

// Engine-level tests of the smooth engine (DESIGN §3.2): Guava's tryAcquire
// vectors, the Guava bugs limitd must not have, and property tests.

// engTry is Guava's tryAcquire(n, timeout) on a clock the test owns: acquire
// with max_wait = timeout and, if granted, sleep the returned delay as Guava's
// tryAcquire does.
func engTry(t *testing.T, p *Params, s *State, now *int64, n, timeout int64) bool {
	t.Helper()
	r := engAcquire(t, p, s, *now, n, timeout)
	if r.Granted {
		*now += r.Delay
	}
	return r.Granted
}

// TestEngineTryAcquireGuava replays Guava's RateLimiterTest tryAcquire cases
// (DESIGN §8) on the smooth engine, and on schedules at the same rate, which
// must agree.
func TestEngineTryAcquireGuava(t *testing.T) {
	type step struct {
		sleep      time.Duration
		n, timeout int64
		want       bool
	}
	ms := engMs
	cases := []struct {
		name  string
		steps []step
	}{
		{"no wait allowed", []step{{0, 1, 0, true}, {0, 1, 0, false}, {0, 1, 0, false}, {100 * time.Millisecond, 1, 0, false}}},
		{"some wait allowed", []step{{0, 1, 0, true}, {0, 1, 200 * ms, true}, {0, 1, 100 * ms, false}, {100 * time.Millisecond, 1, 100 * ms, true}}},
		{"overflow", []step{{0, 1, 0, true}, {100 * time.Millisecond, 1, math.MaxInt64, true}}},
		{"negative", []step{{0, 5, 0, true}, {900 * time.Millisecond, 1, math.MinInt64, false}, {100 * time.Millisecond, 1, -1, true}}},
	}
	for _, c := range []Config{smooth(5), {Rate: 5, Burst: B(1)}, {Rate: 5}} {
		for _, tc := range cases {
			t.Run(fmt.Sprintf("%s/%s burst %v", tc.name, c.Kind, c.Burst), func(t *testing.T) {
				p := engCompile(t, c)
				var s State
				now := int64(1_000_000_000)
				if p.StartsAtCreation() {
					p.Start(&s, now)
				}
				for i, st := range tc.steps {
					now += int64(st.sleep)
					if got := engTry(t, &p, &s, &now, st.n, st.timeout); got != st.want {
						t.Fatalf("step %d: tryAcquire(%d, %v) after sleeping %v = %v, want %v",
							i, st.n, time.Duration(st.timeout), st.sleep, got, st.want)
					}
				}
			})
		}
	}
}

// Guava #2730: a warm-up of 0 disabled limiting. In limitd it is a bursting
// limiter that stores nothing: a metronome.
func TestSmoothWarmupZeroStillLimits(t *testing.T) {
	c := Config{Kind: KindSmooth, Rate: 5, Warmup: D(0)}
	if got, want := guavaRun(t, c, "A1 A1 A1 A1 U10 A1 A1 A2 A1"),
		"R0.00 R0.20 R0.20 R0.20 U10 R0.00 R0.20 R0.20 R0.40"; got != want {
		t.Errorf("warm-up 0:\n got %s\nwant %s", got, want)
	}
	p := engCompile(t, c)
	if p.Warm || p.Cap != 0 || p.Slice != SliceOf(5) {
		t.Errorf("warm-up 0 compiled to %+v, want a bursting limiter with no stored permits", p)
	}
}

// Guava #5290: microsecond truncation let 120k/s run at 125k/s and disabled
// limiting at 2M/s. limitd counts in nanoseconds with exact slices.
func TestEngineHighRatesLimited(t *testing.T) {
	for _, c := range []Config{smooth(2e6), {Rate: 2e6}, smooth(120_000), {Rate: 120_000}, {Rate: 120_000, Burst: B(1)}} {
		t.Run(fmt.Sprintf("%s %v", c.Kind, c.Rate), func(t *testing.T) {
			p := engCompile(t, c)
			var s State
			t0 := int64(1_000_000_000)
			if p.StartsAtCreation() {
				p.Start(&s, t0)
			}
			// An infinitely fast caller: it asks again at its previous start.
			now, count := t0, 0
			for now < t0+engSec {
				r, err := p.Acquire(&s, now, 1, Forever)
				if err != nil || !r.Granted {
					t.Fatalf("denied: %+v %v", r, err)
				}
				if r.Start < t0+engSec {
					count++
				}
				if gap := r.Start - now; count > 1 && (gap < p.Slice.Whole || gap > p.Slice.Whole+1) {
					t.Fatalf("permit %d: %d ns after the previous one, want the slice %+v", count, gap, p.Slice)
				}
				now = r.Start
			}
			if !engWithin(float64(count), c.Rate, 0.001) {
				t.Errorf("%d permits in 1 s, want %v ± 0.1%%", count, c.Rate)
			}
			// The slice is exact: k permits end the schedule at exactly ⌊k·σ⌋.
			k := new(big.Rat).SetInt64(s.Permits)
			end := k.Mul(k, engSliceRat(p.Slice))
			if want := t0 + new(big.Int).Quo(end.Num(), end.Denom()).Int64(); s.Next != want {
				t.Errorf("after %d permits the schedule is at %d, want %d", s.Permits, s.Next, want)
			}
		})
	}
}

// Guava #8420: no initial stored permits. limitd has initial_permits.
func TestSmoothInitialPermits(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	for _, tc := range []struct {
		name  string
		cfg   Config
		steps string
		want  string
	}{
		{"none", smooth(5), "A1 A1 A1", "R0.00 R0.20 R0.20"},
		{"three", Config{Kind: KindSmooth, Rate: 5, InitialPermits: f(3)}, "A1 A1 A1 A1 A1 A1",
			"R0.00 R0.00 R0.00 R0.00 R0.20 R0.20"},
		{"clamped to max_burst_seconds", Config{Kind: KindSmooth, Rate: 5, InitialPermits: f(100)}, "A1 A1 A1 A1 A1 A1 A1 A1",
			"R0.00 R0.00 R0.00 R0.00 R0.00 R0.00 R0.20 R0.20"},
		{"spent at once", Config{Kind: KindSmooth, Rate: 5, InitialPermits: f(3)}, "A3 A1 A1", "R0.00 R0.00 R0.20"},
		{"warm-up starts cold by default", warm(2, 4*time.Second, 3), "A1 A1 A1", "R0.00 R1.38 R1.13"},
		{"warm-up starts hot with 0", Config{Kind: KindSmooth, Rate: 2, Warmup: D(4 * time.Second), InitialPermits: f(0)},
			"A1 A1 A1", "R0.00 R0.50 R0.50"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := guavaRun(t, tc.cfg, tc.steps); got != tc.want {
				t.Errorf("\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

// TestSmoothHugeInitialPermits: initial_permits is validated only as "≥ 0 and
// finite", so any value must give a sane limiter: clamped to the most that can
// be stored, or rejected naming the field.
func TestSmoothHugeInitialPermits(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	for _, c := range []Config{
		{Kind: KindSmooth, Rate: 1, InitialPermits: f(1e10)},
		{Kind: KindSmooth, Rate: 5, InitialPermits: f(1e300)},
		{Kind: KindSmooth, Rate: 1, Warmup: D(4 * time.Second), InitialPermits: f(1e10)},
	} {
		t.Run(fmt.Sprintf("rate %v initial %v warm %v", c.Rate, *c.InitialPermits, c.Warmup != nil), func(t *testing.T) {
			p, err := Compile(c)
			if err != nil {
				var fe *FieldError
				if !errors.As(err, &fe) || fe.Field != "initial_permits" {
					t.Fatalf("rejected with %v, want a FieldError on initial_permits", err)
				}
				return
			}
			if p.Initial < 0 || p.Initial > p.Cap {
				t.Errorf("Params.Initial = %d, want it clamped to [0, Cap=%d]", p.Initial, p.Cap)
			}
			var s State
			now := int64(engSec)
			p.Start(&s, now)
			granted := 0
			for range 10 {
				if r := engAcquire(t, &p, &s, now+int64(granted), 1, 0); r.Granted {
					granted++
				}
			}
			// Full storage lets 1 s of permits (bursty) through at once, plus the
			// caller who pays later; a cold warm-up limiter lets just one through.
			limit := int(math.Round(float64(p.Cap)/p.Stable)) + 1
			if p.Warm {
				limit = 1
			}
			if granted > limit {
				t.Errorf("%d permits granted within 10 ns, want at most %d", granted, limit)
			}
			if s.Allocated < 0 || s.Idle < 0 || s.Stored < 0 || s.Next < now {
				t.Errorf("accounting broken: %+v", s)
			}
		})
	}
}

func TestSmoothReconfigureRescalesStored(t *testing.T) {
	burstSecs := func(rate, secs float64) Config { return Config{Kind: KindSmooth, Rate: rate, MaxBurstSeconds: &secs} }
	for _, tc := range []struct {
		name     string
		old, new Config
		want     int // permits granted at once after 1 s idle and the change
	}{
		{"same rate", smooth(5), smooth(5), 6},
		{"double rate: stored permits double, as Guava's setRate", smooth(5), smooth(10), 11},
		{"half rate", smooth(10), smooth(5), 6},
		{"longer burst: rescaled by new max / old max", burstSecs(5, 1), burstSecs(5, 2), 11},
		{"to a metronome", smooth(5), burstSecs(5, 0), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, np := engCompile(t, tc.old), engCompile(t, tc.new)
			var s State
			t0 := int64(engSec)
			p.Start(&s, t0)
			now := t0 + engSec // 1 s of storage
			Reconfigure(&s, now, &p, &np)
			granted := 0
			for engAcquire(t, &np, &s, now, 1, 0).Granted {
				granted++
			}
			if granted != tc.want {
				t.Errorf("%d permits at once, want %d", granted, tc.want)
			}
		})
	}
}

func TestSmoothReset(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	for _, tc := range []struct {
		name string
		cfg  Config
		want int // permits granted at once right after the reset
	}{
		{"bursty: stored permits forfeited", smooth(5), 1},
		{"bursty with initial permits: the initial burst again", Config{Kind: KindSmooth, Rate: 5, InitialPermits: f(2)}, 3},
		{"warm-up: cold again", warm(2, 4*time.Second, 3), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := engCompile(t, tc.cfg)
			var s State
			t0 := int64(engSec)
			p.Start(&s, t0)
			now := t0 + 10*engSec
			before := p.Peek(s, now)
			p.Reset(&s, now)
			after := p.Peek(s, now)
			if !p.Warm && after.Idle != before.Idle+before.Wait {
				t.Errorf("reset: idle %d → %d with %d stored, want the stored time forfeited", before.Idle, after.Idle, before.Wait)
			}
			if s.Stored != p.Initial {
				t.Errorf("reset: stored %d, want the initial %d", s.Stored, p.Initial)
			}
			granted := 0
			for engAcquire(t, &p, &s, now, 1, 0).Granted {
				granted++
			}
			if granted != tc.want {
				t.Errorf("%d permits at once after the reset, want %d", granted, tc.want)
			}
		})
	}
}

// --- Property tests ---

func engRandSmoothConfig(rng *rand.Rand) Config {
	c := Config{Kind: KindSmooth, Rate: engRandRate(rng)}
	f := func(v float64) *float64 { return &v }
	if rng.IntN(3) == 0 {
		c.Warmup = D([]time.Duration{1, time.Millisecond, 4 * time.Second, time.Duration(rng.Int64N(1000 * engSec))}[rng.IntN(4)])
		if rng.IntN(4) > 0 {
			c.ColdFactor = f([]float64{1, 3, 10, 1 + 100*rng.Float64()}[rng.IntN(4)])
		}
	} else if rng.IntN(4) > 0 {
		c.MaxBurstSeconds = f([]float64{0, 0.5, 1, 10, 5 * rng.Float64()}[rng.IntN(5)])
	}
	if rng.IntN(3) == 0 {
		c.InitialPermits = f(math.Floor(100 * rng.Float64()))
	}
	return c
}

// TestSmoothPropertyRandomOps drives the smooth engine (bursty and warming up)
// with random call sequences, time steps (incl. large gaps, zero and backward
// steps), peeks, resets and reconfigurations, and checks after every step:
// stored permits stay within [0, cap]; allocated and idle never shrink; a grant
// starts at max(next_free, now) (the caller pays later) and starts never go
// back; a bursting grant takes its exact cost from storage first and pushes
// next_free by the rest; a warming-up grant never costs less than the stable
// rate; Peek's delay is the next request's delay; and a denied request changes
// nothing at all and reports retry_after exactly.
func TestSmoothPropertyRandomOps(t *testing.T) {
	for _, seed := range engSeeds {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) { engSmoothRandomRun(t, seed, 2500) })
	}
}

func engSmoothRandomRun(t *testing.T, seed uint64, ops int) {
	rng := rand.New(rand.NewPCG(seed, 0x5300))
	cfg := engRandSmoothConfig(rng)
	p := engCompile(t, cfg)
	var s State
	now := rng.Int64N(1 << 61)
	p.Start(&s, now)
	tr := &engTrace{}
	tr.add("config %+v params %+v now %d", cfg, p, now)
	fail := func(i int, format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d, op %d: %s%s", seed, i, fmt.Sprintf(format, args...), tr)
	}
	lastStart := int64(math.MinInt64)
	for i := range ops {
		now = max(0, now+engRandStep(rng, p.Slice.Float(), false))
		before := s
		switch k := rng.IntN(100); {
		case k < 75:
			n, mw := engRandPermits(rng, p.MaxPermits), engRandMaxWait(rng, p.Slice.Float())
			view := p.Peek(s, now)
			r := engAcquire(t, &p, &s, now, n, mw)
			tr.add("acquire(now=%d, n=%d, maxWait=%d) → %+v", now, n, mw, r)
			clamped := min(max(mw, 0), Horizon)
			if r.Delay != view.Delay || r.Granted != (r.Delay <= clamped) {
				fail(i, "delay %d (Peek said %d), granted %v with max_wait %d", r.Delay, view.Delay, r.Granted, clamped)
			}
			if !r.Granted {
				if s != before {
					fail(i, "denied request changed the state:\n got %+v\nwant %+v", s, before)
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
			push := s.Allocated - before.Allocated
			switch {
			case r.Start != max(before.Next, now) || r.Scheduled != r.Start || r.Delay != r.Start-now:
				fail(i, "grant %+v, want it to start at max(next_free %d, now)", r, before.Next)
			case r.Start < lastStart:
				fail(i, "start %d before the previous start %d", r.Start, lastStart)
			case s.Next != r.Start+push || s.Permits != before.Permits+n:
				fail(i, "next_free %d, want start + push %d", s.Next, r.Start+push)
			case r.Wait != p.Peek(s, now).Wait:
				fail(i, "wait %d, Peek says %d", r.Wait, p.Peek(s, now).Wait)
			}
			lastStart = r.Start
			if !p.Warm {
				cost, rem := p.Slice.Cost(n, before.Rem)
				stored := view.Wait // stored time after resync
				if push != cost-min(cost, stored) || s.Rem != rem || s.Stored != stored-min(cost, stored) {
					fail(i, "bursty grant pushed %d and left %d stored, want cost %d − stored %d", push, s.Stored, cost, stored)
				}
			} else {
				if float64(push) < float64(n)*p.Stable*(1-1e-12)-4 {
					fail(i, "warm-up grant of %d permits pushed next_free by %d < %d × stable %v", n, push, n, p.Stable)
				}
				// It spends min(n, stored) stored permits, each Cooldown ns of storage.
				resynced := before
				p.resync(&resynced, now)
				want := max(0, float64(resynced.Stored)-float64(n)*p.Cooldown)
				if math.Abs(float64(s.Stored)-want) > 1+want*1e-12 {
					fail(i, "warm-up grant of %d permits left %d ns stored, want %.0f (had %d)", n, s.Stored, want, resynced.Stored)
				}
			}
		case k < 83:
			v := p.Peek(s, now)
			tr.add("peek(now=%d) → %+v", now, v)
			if v.Wait < 0 || v.Delay < 0 || v.Idle < s.Idle {
				fail(i, "bad view %+v", v)
			}
		case k < 88:
			p.Reset(&s, now)
			tr.add("reset(now=%d)", now)
			if s.Stored != p.Initial {
				fail(i, "reset left %d stored, want the initial %d", s.Stored, p.Initial)
			}
		default:
			nc := engRandSmoothConfig(rng)
			np := engCompile(t, nc)
			Reconfigure(&s, now, &p, &np)
			tr.add("reconfigure(now=%d, %+v)", now, nc)
			if s.Permits != before.Permits || s.Allocated != before.Allocated || s.Next < before.Next {
				fail(i, "reconfigure changed totals or moved next_free back: %+v → %+v", before, s)
			}
			p = np
		}
		switch {
		case s.Stored < 0 || s.Stored > p.Cap:
			fail(i, "stored %d outside [0, cap %d]", s.Stored, p.Cap)
		case s.Allocated < before.Allocated || s.Idle < before.Idle:
			fail(i, "allocated or idle shrank: %+v → %+v", before, s)
		case s.Rem < 0 || s.Rem >= p.Slice.Den:
			fail(i, "carry %d outside [0, Den=%d)", s.Rem, p.Slice.Den)
		}
	}
}

// TestSmoothPropertyWindow checks how many permits may start in a window, for
// fixed parameters. Take the grants whose starts lie in [t, t+W], and m the
// permits of all of them but the last (n_k). Then, σ being the exact slice:
//
//	bursty:     m·σ ≤ W + cap + 1 ns, i.e. at most r·W + max_permits + n_k
//	warming up: m·σ ≤ W + 4 ns per grant + 1 ns, i.e. at most r·W + n_k
//
// Why: each grant pushes next_free by its cost less what it took from storage,
// and the next start is ≥ next_free, so Σ push ≤ W minus the time that passed
// with nobody waiting — exactly the time that was stored. What the grants took
// from storage is at most what was stored at grant j (≤ cap) plus what was
// stored since. A warming-up limiter charges every permit, stored or not, at
// least the stable interval (the trapezoid lies above it), truncated to whole
// ns three times at most. Resets with initial permits would refill storage, so
// the bursting runs reset only when initial_permits is 0.
func TestSmoothPropertyWindow(t *testing.T) {
	for _, seed := range engSeeds {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 0xbeef))
			cfg := engRandSmoothConfig(rng)
			cfg.Rate = math.Round(math.Pow(10, 1+5*rng.Float64()))
			p := engCompile(t, cfg)
			sl := p.Slice.Float()
			var s State
			now := rng.Int64N(1 << 60)
			p.Start(&s, now)
			type grant struct{ start, n int64 }
			var gs []grant
			fast := 0
			for range 6000 {
				var n, mw int64 = 1, Forever
				switch {
				case fast > 0:
					fast--
				case rng.IntN(30) == 0:
					now += int64(sl * float64(rng.IntN(2000))) // idle: storage fills
					fast = rng.IntN(3000)
				case rng.IntN(40) == 0 && (p.Initial == 0 || p.Warm):
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
				gs = append(gs, grant{r.Start, n})
				if fast > 0 {
					now = r.Start
				}
			}
			sigma, _ := engSliceRat(p.Slice).Float64()
			for _, w := range []int64{p.Slice.Whole, 10 * p.Slice.Whole, 137 * p.Slice.Whole, engSec, 3 * engSec} {
				k, m := 0, int64(0)
				for j := range gs {
					if k < j {
						k, m = j, 0
					}
					for k+1 < len(gs) && gs[k+1].start <= gs[j].start+w {
						m += gs[k].n
						k++
					}
					bound := float64(w) + float64(p.Cap) + 1
					if p.Warm {
						bound = float64(w) + 4*float64(k-j) + 1
					}
					if float64(m)*sigma > bound*(1+1e-12) {
						t.Fatalf("seed %d (%+v): %d permits (+%d) start in [%d, %d+%d], bound %.0f ns = %.2f permits",
							seed, cfg, m, gs[k].n, gs[j].start, gs[j].start, w, bound, bound/sigma)
					}
					if j < k {
						m -= gs[j].n
					}
				}
			}
		})
	}
}
