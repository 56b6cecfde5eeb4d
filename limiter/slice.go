package limiter

import (
	"math"
	"math/big"
)

// Horizon bounds every time a limiter keeps: no permit is scheduled more than
// Horizon after now, no backlog is kept longer than Horizon, and no single
// request may cost more than Horizon of schedule. 2^50 ns is about 13 days.
// It is what keeps the Lua scripts' double arithmetic exact (values < 2^53).
const Horizon int64 = 1 << 50

// MaxDen bounds the denominator of a slice. With it, every product the Lua
// scripts form while computing a cost stays below 2^53.
const MaxDen int64 = 1 << 26

// Limits on the rate of a limiter, in permits per second.
const (
	MinRate = 1e-6 // one permit per ~11.6 days: a slice still fits the horizon
	MaxRate = 1e9  // one permit per nanosecond
)

// Slice is the schedule time one permit costs, Whole + Frac/Den nanoseconds:
// 1e9/rate exactly when that needs a denominator ≤ MaxDen (3/s, 0.1/s, 33.3/s,
// 1100.5/s, 5000/min, 1/h), else the best approximation with Den ≤ MaxDen,
// whose error is below 2^-26 ns a permit, 15 ns after a billion permits.
type Slice struct {
	Whole int64
	Frac  int64 // 0 ≤ Frac < Den
	Den   int64 // 1 ≤ Den ≤ MaxDen
}

// SliceOf returns the slice of a rate in permits per second.
// The rate must lie in [MinRate, MaxRate].
//
// A float64 cannot hold most decimal rates (0.1, 33.3, 10/min), so the rate is
// taken to be the simplest fraction that rounds to the same float: the one the
// user wrote. If 1e9 over it needs a denominator above MaxDen, the slice is the
// best approximation of 1e9 over the float's exact value.
func SliceOf(rate float64) Slice {
	x := new(big.Rat).Quo(big.NewRat(1e9, 1), intendedRate(rate))
	num, den := x.Num(), x.Denom()
	if den.Cmp(big.NewInt(MaxDen)) > 0 {
		num, den = bestRational(new(big.Rat).Quo(big.NewRat(1e9, 1), new(big.Rat).SetFloat64(rate)), MaxDen)
	}
	q, r := new(big.Int).QuoRem(num, den, new(big.Int))
	return Slice{Whole: q.Int64(), Frac: r.Int64(), Den: den.Int64()}
}

// intendedRate is the simplest fraction in the interval of reals that round to
// the float r (half-way to its neighbours on either side).
func intendedRate(r float64) *big.Rat {
	exact := new(big.Rat).SetFloat64(r)
	half := big.NewRat(1, 2)
	lo := new(big.Rat).Add(exact, new(big.Rat).SetFloat64(math.Nextafter(r, 0)))
	hi := new(big.Rat).Add(exact, new(big.Rat).SetFloat64(math.Nextafter(r, math.Inf(1))))
	return simplest(lo.Mul(lo, half), hi.Mul(hi, half))
}

// simplest returns the fraction with the smallest denominator in [a, b],
// 0 < a < b, by walking their continued fractions together.
func simplest(a, b *big.Rat) *big.Rat {
	fl := new(big.Int).Quo(a.Num(), a.Denom()) // floor: a > 0
	if a.IsInt() {
		return new(big.Rat).SetInt(fl)
	}
	up := new(big.Rat).SetInt(new(big.Int).Add(fl, big.NewInt(1)))
	if up.Cmp(b) <= 0 {
		return up
	}
	f := new(big.Rat).SetInt(fl)
	inner := simplest(
		new(big.Rat).Inv(new(big.Rat).Sub(b, f)),
		new(big.Rat).Inv(new(big.Rat).Sub(a, f)))
	return f.Add(f, inner.Inv(inner))
}

// bestRational returns the last continued-fraction convergent of x whose
// denominator does not exceed maxDen.
func bestRational(x *big.Rat, maxDen int64) (num, den *big.Int) {
	limit := big.NewInt(maxDen)
	p0, q0 := big.NewInt(0), big.NewInt(1) // convergent k-2
	p1, q1 := big.NewInt(1), big.NewInt(0) // convergent k-1
	n, d := new(big.Int).Set(x.Num()), new(big.Int).Set(x.Denom())
	for d.Sign() != 0 {
		a, r := new(big.Int).QuoRem(n, d, new(big.Int))
		p2 := new(big.Int).Add(new(big.Int).Mul(a, p1), p0)
		q2 := new(big.Int).Add(new(big.Int).Mul(a, q1), q0)
		if q2.Cmp(limit) > 0 {
			break
		}
		p0, q0, p1, q1 = p1, q1, p2, q2
		n, d = d, r
	}
	return p1, q1
}

// Float is the slice as a float64 (for the warm-up arithmetic and for display).
func (s Slice) Float() float64 {
	return float64(s.Whole) + float64(s.Frac)/float64(s.Den)
}

// Rate is the rate in permits per second the slice stands for.
func (s Slice) Rate() float64 {
	return 1e9 * float64(s.Den) / (float64(s.Whole)*float64(s.Den) + float64(s.Frac))
}

// Cost returns the whole nanoseconds that n permits cost when rem/Den ns of
// earlier costs are still owed, and the new remainder. The sum of costs over any
// sequence of calls is floor(total permits × exact slice): nothing drifts.
// n must be in [0, MaxPermits]; the arithmetic mirrors lua/ exactly (n is split
// by Den so no product exceeds 2^53).
func (s Slice) Cost(n, rem int64) (cost, newRem int64) {
	if s.Frac == 0 { // a whole-ns slice: no carry to track
		return n * s.Whole, rem
	}
	a, b := n/s.Den, n%s.Den
	t := rem + b*s.Frac // < 2^26 + 2^52
	return n*s.Whole + a*s.Frac + t/s.Den, t % s.Den
}

// PermitsWithin is the most permits one request may ask for when it may take
// at most reserve ns of schedule: the largest n with Cost(n, Den-1) ≤ reserve,
// at least 1 (one permit may always be asked for), at most MaxPermits.
func (s Slice) PermitsWithin(reserve int64) int64 {
	return max(1, s.permitsWithin(min(reserve, Horizon)))
}

func (s Slice) permitsWithin(reserve int64) int64 {
	n := int64(float64(reserve) / s.Float())
	for n > 0 && s.costCeil(n) > reserve {
		n--
	}
	for s.costCeil(n+1) <= reserve {
		n++
	}
	return n
}

func (s Slice) costCeil(n int64) int64 {
	if n > math.MaxInt64/(s.Whole+1) {
		return math.MaxInt64
	}
	c, _ := s.Cost(n, s.Den-1)
	return c
}
