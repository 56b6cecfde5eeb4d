package limiter

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// Precision (DESIGN §2): exact slices, no drift over a billion permits, far
// future timestamps, and a clock that steps backwards.

// engDecimalRate is the rate a spec string means, as an exact rational: the
// decimal the user wrote, not its float64 rounding ("5000/min" is 5000/60).
func engDecimalRate(t testing.TB, spec string) *big.Rat {
	t.Helper()
	num, unit, per := spec, "", int64(1)
	if n, u, ok := strings.Cut(spec, "/"); ok {
		num, unit = n, u
		per = map[string]int64{"s": 1, "min": 60, "h": 3600}[unit]
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok || per == 0 {
		t.Fatalf("engDecimalRate(%q): not a plain decimal", spec)
	}
	return r.Quo(r, big.NewRat(per, 1))
}

// engExactSlice is 1e9/rate as an exact rational.
func engExactSlice(rate *big.Rat) *big.Rat { return new(big.Rat).Quo(big.NewRat(1e9, 1), rate) }

// engFloorMul is ⌊k·x⌋.
func engFloorMul(k int64, x *big.Rat) int64 {
	v := new(big.Rat).Mul(new(big.Rat).SetInt64(k), x)
	return new(big.Int).Quo(v.Num(), v.Denom()).Int64()
}

// engDrift is (got − k·x) in ns, as a float.
func engDrift(got, k int64, x *big.Rat) float64 {
	v := new(big.Rat).Mul(new(big.Rat).SetInt64(k), x)
	v.Sub(new(big.Rat).SetInt64(got), v)
	f, _ := v.Float64()
	return f
}

// TestSliceOfExact: a rate whose slice 1e9/rate is a fraction with a small
// denominator gets exactly that slice. The rate is what the user wrote (a
// decimal, or n per unit), so "0.1" must give 1e10 ns even though the float64
// 0.1 is 0.1000000000000000055…
func TestSliceOfExact(t *testing.T) {
	for _, tc := range []struct {
		spec string
		want Slice
	}{
		{"3", Slice{333333333, 1, 3}},
		{"7", Slice{142857142, 6, 7}},
		{"1100.5", Slice{908677, 1923, 2201}},
		{"1e9", Slice{1, 0, 1}},
		{"2e6", Slice{500, 0, 1}},
		{"120000", Slice{8333, 1, 3}},
		{"5000/min", Slice{12000000, 0, 1}},
		{"30/min", Slice{2000000000, 0, 1}},
		{"0.25", Slice{4000000000, 0, 1}},
		{"0.1", Slice{10000000000, 0, 1}},
		{"1e-6", Slice{1000000000000000, 0, 1}},
		{"10/min", Slice{6000000000, 0, 1}},
		{"1/h", Slice{3600000000000, 0, 1}},
		{"33.3", Slice{30030030, 10, 333}}, // 1e10/333
	} {
		t.Run(tc.spec, func(t *testing.T) {
			rate, err := ParseRate(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			got := SliceOf(rate)
			if got != tc.want {
				exact := engExactSlice(engDecimalRate(t, tc.spec))
				off, _ := new(big.Rat).Sub(engSliceRat(got), exact).Float64()
				t.Errorf("SliceOf(%s) = %+v, want %+v (= %s ns exactly); off by %.3g ns a permit",
					tc.spec, got, tc.want, exact.RatString(), off)
			}
		})
	}
}

// TestSliceOfProperties: for rates across the whole range, the slice is exact
// for a rate that rounds to the same float, or else the best rational
// approximation with Den ≤ MaxDen (error < 1/(Den·MaxDen) ns, the
// continued-fraction bound); it is well formed, and MaxPermits is the most permits
// whose cost (with the worst carry) fits the Horizon.
func TestSliceOfProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	rates := []float64{MinRate, MaxRate, 1, 3, 0.1, 1100.5, math.Nextafter(MaxRate, 0), math.Nextafter(MinRate, 1), 999_999_999.9}
	for range 3000 {
		rates = append(rates, MinRate*math.Pow(10, 15*rng.Float64()))
	}
	for _, r := range rates {
		sl := SliceOf(r)
		if sl.Den < 1 || sl.Den > MaxDen || sl.Frac < 0 || sl.Frac >= sl.Den || sl.Whole < 1 {
			t.Fatalf("SliceOf(%v) = %+v: malformed", r, sl)
		}
		// Either the slice is exactly 1e9 over a rate that rounds to r (the
		// decimal the user wrote), or it is the best approximation of 1e9 over
		// r's exact binary value.
		implied, _ := new(big.Rat).Quo(big.NewRat(1e9, 1), engSliceRat(sl)).Float64()
		exact := engExactSlice(new(big.Rat).SetFloat64(r))
		diff := new(big.Rat).Sub(engSliceRat(sl), exact)
		bound := big.NewRat(1, sl.Den*MaxDen)
		if implied != r && diff.Abs(diff).Cmp(bound) >= 0 {
			t.Fatalf("SliceOf(%v) = %+v: neither exact for a rate rounding to it nor within 1/(Den·MaxDen) (error %s ns)", r, sl, diff.FloatString(20))
		}
		if got := sl.Rate(); !engWithin(got, r, 1e-9) {
			t.Fatalf("SliceOf(%v).Rate() = %v", r, got)
		}
		m := sl.MaxPermits()
		if m < 1 {
			t.Fatalf("SliceOf(%v): MaxPermits %d < 1", r, m)
		}
		if c, _ := sl.Cost(m, sl.Den-1); c > Horizon {
			t.Fatalf("SliceOf(%v): MaxPermits %d cost %d > Horizon", r, m, c)
		}
		if c, _ := sl.Cost(m, 0); c > Horizon {
			t.Fatalf("SliceOf(%v): MaxPermits %d cost %d > Horizon", r, m, c)
		}
		if c, _ := sl.Cost(m+1, sl.Den-1); c <= Horizon {
			t.Fatalf("SliceOf(%v): MaxPermits+1 = %d still costs %d ≤ Horizon", r, m+1, c)
		}
	}
}

// TestSliceCostNoDrift: whatever the split into requests, the costs add up to
// ⌊N·slice⌋ and the carry is the exact remainder.
func TestSliceCostNoDrift(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	for range 100 {
		sl := SliceOf(MinRate * math.Pow(10, 15*rng.Float64()))
		x := engSliceRat(sl)
		var total, sum, rem int64
		for range 50 {
			n := 1 + rng.Int64N(min(sl.MaxPermits(), 1<<20))
			if total+n > sl.MaxPermits() {
				break
			}
			var c int64
			c, rem = sl.Cost(n, rem)
			total, sum = total+n, sum+c
			if want := engFloorMul(total, x); sum != want {
				t.Fatalf("%+v: %d permits cost %d in total, want ⌊N·slice⌋ = %d", sl, total, sum, want)
			}
			want := new(big.Rat).Mul(new(big.Rat).SetInt64(total), x)
			want.Sub(want, new(big.Rat).SetInt64(sum)).Mul(want, new(big.Rat).SetInt64(sl.Den))
			if !want.IsInt() || want.Num().Int64() != rem {
				t.Fatalf("%+v: carry %d, want %s", sl, rem, want.RatString())
			}
		}
	}
}

// TestSchedulePrecisionBillionPermits: the scheduled time after k permits is
// the exact rational k·1e9/rate rounded down for rates with an exact slice, and
// within 1 µs of it otherwise, for k up to 1e9 — checked at every request of a
// run that asks for up to MaxPermits at a time, and along a million
// single-permit requests. Also at timestamps in the year 2200.
func TestSchedulePrecisionBillionPermits(t *testing.T) {
	if testing.Short() {
		t.Skip("a billion permits at seven rates, 40 s and more on a busy machine: left out of -short")
	}
	y2200 := time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano() + 123_456_789
	if y2200 < 7_258_000_000_000_000_000 {
		t.Fatalf("year 2200 is %d ns", y2200)
	}
	const billion = int64(1e9)
	for _, tc := range []struct {
		spec    string
		origin  int64
		singles int64
	}{
		{"3", 1, 1_000_000},
		{"3", y2200, 100_000},
		{"7", 1_700_000_000 * engSec, 100_000},
		{"1100.5", 0, 100_000},
		{"5000/min", 1_700_000_000 * engSec, 100_000},
		{"123456.789", 1_700_000_000 * engSec, 100_000},
		{"123456.789", y2200, 100_000},
	} {
		t.Run(fmt.Sprintf("%s from %d", tc.spec, tc.origin), func(t *testing.T) {
			rate, err := ParseRate(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			p := engCompile(t, Config{Rate: rate})
			exact := engExactSlice(engDecimalRate(t, tc.spec))
			exactSlice := exact.Denom().IsInt64() && exact.Denom().Int64() <= MaxDen
			check := func(what string, k, sched int64) {
				t.Helper()
				if exactSlice {
					if want := tc.origin + engFloorMul(k, exact); sched != want {
						t.Fatalf("%s: permit %d scheduled at origin+%d, want origin+%d (⌊k·1e9/rate⌋)", what, k, sched-tc.origin, want-tc.origin)
					}
				} else if d := engDrift(sched-tc.origin, k, exact); math.Abs(d) >= 1000 {
					t.Fatalf("%s: permit %d scheduled %.1f ns off the exact rational", what, k, d)
				}
			}

			// Large requests, the caller on schedule, up to a billion permits.
			rng := rand.New(rand.NewPCG(uint64(rate), 1))
			var s State
			now, k, calls := tc.origin, int64(0), 0
			for k < billion {
				n := min(billion-k, 1+rng.Int64N(min(p.MaxPermits, billion/40)))
				r, err := p.Acquire(&s, now, n, Forever)
				if err != nil || !r.Granted || r.Start != now {
					t.Fatalf("request %d for %d permits: %+v %v", calls, n, r, err)
				}
				check("large requests", k, r.Scheduled)
				k, now, calls = k+n, s.Next, calls+1
			}
			check("large requests", k, s.Next)
			if calls < 20 {
				t.Fatalf("only %d requests", calls)
			}

			// Single permits, an infinitely fast caller.
			s = State{}
			now = tc.origin
			for k = 0; k < tc.singles; k++ {
				r, err := p.Acquire(&s, now, 1, Forever)
				if err != nil || !r.Granted {
					t.Fatalf("permit %d: %+v %v", k, r, err)
				}
				if k%997 == 0 {
					check("single permits", k, r.Scheduled)
				}
				now = r.Start
			}
			check("single permits", k, s.Next)
		})
	}
}

// TestEngineYear2200: a run at timestamps in the year 2200 (≈ 7.26e18 ns) gives
// exactly the delays the same run gives near zero, for every engine.
func TestEngineYear2200(t *testing.T) {
	y2200 := time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	for _, c := range []Config{{Rate: 3}, {Rate: 1100.5, Burst: B(Inf)}, smooth(3), warm(2, 4*time.Second, 3), warm(123.456, 7*time.Second, 10)} {
		t.Run(fmt.Sprintf("%s %v", c.Kind, c.Rate), func(t *testing.T) {
			run := func(base int64) []Result {
				p := engCompile(t, c)
				var s State
				if p.StartsAtCreation() {
					p.Start(&s, base)
				}
				rng := rand.New(rand.NewPCG(1, 2))
				now := base
				var out []Result
				for range 3000 {
					now += []int64{0, 1, p.Slice.Whole / 3, p.Slice.Whole, 7 * engSec}[rng.IntN(5)]
					r := engAcquire(t, &p, &s, now, 1+rng.Int64N(3), []int64{0, Forever, p.Slice.Whole}[rng.IntN(3)])
					r.Scheduled, r.Start = r.Scheduled-base, r.Start-base
					if !r.Granted {
						r.Scheduled, r.Start = 0, 0
					}
					out = append(out, r)
				}
				return out
			}
			near, far := run(1000), run(y2200)
			for i := range near {
				if near[i] != far[i] {
					t.Fatalf("request %d: at year 2200 %+v, near zero %+v", i, far[i], near[i])
				}
			}
		})
	}
}

// TestEngineClockStepsBack: a clock that steps back by 1 s (a failover to a
// host with an earlier clock) never lets more than the rate through. Real time
// runs on; the limiter's clock reads 1 s less from the step on. Two callers:
// one polls every 100 µs without waiting (Allow), one waits for its start on
// its own clock (Wait). Grants are counted by real time in every window of
// 1 s: at most r·1s + 1 (the poller is never more than 100 µs behind, so the
// burst has nothing to catch up; see TestSchedulePropertyWindow).
func TestEngineClockStepsBack(t *testing.T) {
	const rate = 100
	const T0, step, end = 1000 * engSec, 5 * engSec, 15 * engSec // step at T0+5s, run until T0+15s
	clock := func(real int64) int64 {
		if real >= T0+step {
			return real - engSec
		}
		return real
	}
	// wake is the first real time ≥ real at which the clock reads at least c.
	wake := func(real, c int64) int64 {
		if real < T0+step && c < T0+step {
			return max(real, c)
		}
		return max(real, T0+step, c+engSec)
	}
	for _, c := range []Config{{Rate: rate, Burst: B(1)}, {Rate: rate}, {Rate: rate, Burst: B(Inf)}, {Rate: rate, MaxBacklog: D(0)}, smooth(rate)} {
		for _, caller := range []string{"poll", "wait"} {
			t.Run(fmt.Sprintf("%s burst %v %s", c.Kind, c.Burst, caller), func(t *testing.T) {
				p := engCompile(t, c)
				var s State
				if p.StartsAtCreation() {
					p.Start(&s, clock(T0))
				}
				var grants []int64 // real times
				for real := int64(T0); real < T0+end; {
					if caller == "poll" {
						if r, _ := p.Acquire(&s, clock(real), 1, 0); r.Granted {
							grants = append(grants, real)
						}
						real += 100_000
						continue
					}
					r := engAcquire(t, &p, &s, clock(real), 1, Forever)
					real = wake(real, r.Start)
					grants = append(grants, real)
				}
				k := 0
				for j := range grants {
					for k < len(grants) && grants[k] < grants[j]+engSec {
						k++
					}
					if n := k - j; n > rate+1 {
						t.Fatalf("%d grants in the real second from T0+%v (clock stepped back at T0+%v)",
							n, time.Duration(grants[j]-T0), time.Duration(step))
					}
				}
				if total, most := len(grants), rate*(end/engSec)+1; total > int(most) || total < int(most)-rate-2 {
					t.Fatalf("%d grants in %v of real time, want at most %d (and not starved: ≥ %d)", total, time.Duration(end), most, most-rate-2)
				}
			})
		}
	}
}
