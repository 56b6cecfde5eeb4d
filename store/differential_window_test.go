package store_test

// The differential test for window limiters (see differential_test.go): the
// scripts (lua/window.lua) and the Go model (limiter/window.go) give the same
// decisions, counts, window ends and retry times, to the ns, for fixed and
// sliding windows of many periods and limits, with time steps that land
// exactly on, and 1 µs either side of, window boundaries and retry instants.

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/limitd/limitd/internal/redistest"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

var diffWindowPeriods = []string{"1s", "1m", "1h", "24h", "168h", "720h", "8760h", "3ms", "7µs", "1.5s", "333ms", "13m17.000001s"}

var diffWindowLimits = []int64{1, 2, 3, 10, 100, 1000, 123457, 1e6, 1e9}

func diffWindowConfig(r *rand.Rand) limiter.Config {
	l := diffWindowLimits[r.IntN(len(diffWindowLimits))]
	c := limiter.Config{Kind: limiter.KindWindow, Limit: &l,
		Period: diffWindowPeriods[r.IntN(len(diffWindowPeriods))], Sliding: r.IntN(2) == 0}
	if c.Period == "8760h" {
		c.Sliding = false // at most 2400h (limiter.MaxSlidingPeriod)
	}
	return c
}

// windowN is a random request: mostly small, some up to the limit, a few
// over it (refused by both as out of range).
func (g *diffRig) windowN(r *rand.Rand) int64 {
	l := g.p.Limit
	switch x := r.IntN(100); {
	case x < 50:
		return 1
	case x < 75:
		return min(l, 1+r.Int64N(10))
	case x < 95:
		return 1 + r.Int64N(l)
	case x < 97:
		return l
	default:
		return l + 1 + r.Int64N(3)
	}
}

// windowStepUS is a random time step (µs): none, small, a fraction of the
// period, to the window's end or the retry instant ±1 µs, whole periods, and
// gaps of days.
func (g *diffRig) windowStepUS(r *rand.Rand) int64 {
	pu := max(1, g.p.Period/1000)
	now := g.now()
	// steps of more than 30 days are rare, so that a run stays well before
	// 2255 (Unix µs below 2^53)
	const month = 30 * 86_400_000_000
	if x := r.IntN(1000); x >= 995 {
		return r.Int64N(400 * 86_400_000_000)
	} else if d := g.windowStep(r, x, now, pu); d <= month {
		return d
	}
	return r.Int64N(month)
}

func (g *diffRig) windowStep(r *rand.Rand, x int, now, pu int64) int64 {
	switch {
	case x < 4 && g.mr != nil: // Redis time steps back
		return -(1 + r.Int64N(min(pu, 120_000_000)))
	case x < 200:
		return 0
	case x < 400:
		return 1 + r.Int64N(min(pu, 1000))
	case x < 600:
		return r.Int64N(pu + 1)
	case x < 700: // to the window's end, ±1 µs
		if g.s.Started && g.s.Next > now {
			return max(0, (g.s.Next-now)/1000+r.Int64N(3)-1)
		}
		return 1
	case x < 800: // until one more permit would be granted, ±1 µs
		d := g.p.Peek(g.s, now).Delay
		return max(0, (d+999)/1000+r.Int64N(3)-1)
	case x < 950:
		return pu * (1 + r.Int64N(3))
	default:
		return r.Int64N(86_400_000_000)
	}
}

// stepWindow runs one random operation on a window limiter. Hand-backs of
// grants are not among them: a client pool does not take grants of a window
// limiter (see client.Pool).
func (g *diffRig) stepWindow(r *rand.Rand) {
	g.t.Helper()
	peek := false
	switch x := r.IntN(1000); {
	case x < 450:
		g.acquire(g.windowN(r), g.randWait(r), false)
	case x < 520:
		k := 2 + r.IntN(5)
		ns, mws := make([]int64, k), make([]time.Duration, k)
		for i := range k {
			ns[i], mws[i] = g.windowN(r), g.randWait(r)
		}
		g.acquireMany(ns, mws)
	case x < 650:
		g.acquire(g.windowN(r), g.randWait(r), true)
	case x < 700: // another limit or sliding keeps the counts; another period starts over
		c := diffWindowConfig(r)
		if r.IntN(2) == 0 {
			c.Period = g.cfg.Period
			if g.tpl {
				c.Period = g.tcfg.Period
			}
			if c.Period == "8760h0m0s" {
				c.Sliding = false
			}
		}
		g.put(c)
		peek = r.IntN(2) == 0
	case x < 710:
		if g.tpl {
			g.put(g.tcfg)
			break
		}
		g.put(g.cfg)
	case x < 740:
		g.reset()
		peek = r.IntN(2) == 0
	case x < 748:
		switch {
		case g.snap == nil || r.IntN(3) == 0:
			g.snapshot()
		case r.IntN(3) == 0:
			g.wipe()
		default:
			g.rewind()
		}
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

func diffWindowRun(g *diffRig, r *rand.Rand, ops int) {
	g.put(diffWindowConfig(r))
	g.check()
	for range ops {
		g.advance(g.windowStepUS(r))
		if g.mr != nil && g.op%97 == 0 {
			g.checkTIME()
		}
		g.stepWindow(r)
	}
	g.peek()
}

func TestDiffWindow(t *testing.T) {
	t.Parallel()
	ops := 6000
	if testing.Short() {
		ops = 1500
	}
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(seed, 0x77696e))
			g := diffNewMini(t, fmt.Sprintf("window seed %d", seed), diffStart2025+int64(seed)*7919)
			diffWindowRun(g, r, ops)
			t.Logf("seed %d: %s", seed, g.summary())
		})
	}
	t.Run("template", func(t *testing.T) {
		t.Parallel()
		r := rand.New(rand.NewPCG(4, 0x77696e))
		g := diffNewTemplate(t, "window template", diffStart2025)
		diffWindowRun(g, r, ops/2)
		t.Logf("template: %s", g.summary())
	})
	t.Run("year2200", func(t *testing.T) {
		t.Parallel()
		r := rand.New(rand.NewPCG(5, 0x77696e))
		start := time.Date(2200, 7, 4, 23, 59, 58, 987654000, time.UTC).UnixMicro() + 321
		g := diffNewMini(t, "window year 2200", start)
		diffWindowRun(g, r, ops/2)
		t.Logf("year 2200: %s", g.summary())
	})
}

// TestDiffWindowRealRedis runs the window differential on a real
// redis-server (Lua 5.1, binary state), functions and scripts.
func TestDiffWindowRealRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Server(t)
	ops := 1500
	if testing.Short() {
		ops = 400
	}
	for i, mode := range []string{"functions", "scripts"} {
		var opts []store.Option
		if mode == "scripts" {
			opts = []store.Option{store.WithScriptsOnly()}
		}
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(uint64(7100+i), 0x77696e))
			g := diffNewReal(t, "window real redis "+mode, srv.Client(), "diff-window-"+mode, opts...)
			// real time cannot be moved: periods in which µs and ms matter
			l := []int64{1, 3, 10, 1000}[r.IntN(4)]
			g.put(limiter.Config{Kind: limiter.KindWindow, Limit: &l, Period: "3ms", Sliding: true})
			g.check()
			for j := range ops {
				g.advance(r.Int64N(2000))
				if j%300 == 299 {
					l := []int64{1, 3, 10, 1000}[r.IntN(4)]
					g.put(limiter.Config{Kind: limiter.KindWindow, Limit: &l,
						Period: []string{"1ms", "3ms", "10ms", "1s"}[r.IntN(4)], Sliding: r.IntN(2) == 0})
				}
				g.stepWindowReal(r)
			}
			g.peek()
			t.Logf("%s: %s", mode, g.summary())
		})
	}
}

// stepWindowReal is stepWindow without the configs of stepWindow's periods
// (real time does not move by hours) nor faults.
func (g *diffRig) stepWindowReal(r *rand.Rand) {
	g.t.Helper()
	switch x := r.IntN(100); {
	case x < 55:
		g.acquire(g.windowN(r), g.randWait(r), false)
	case x < 65:
		ns, mws := []int64{g.windowN(r), g.windowN(r), g.windowN(r)}, []time.Duration{0, 0, store.Forever}
		g.acquireMany(ns, mws)
	case x < 85:
		g.acquire(g.windowN(r), g.randWait(r), true)
	case x < 90:
		g.reset()
	default:
		g.note("peek")
		g.peek()
	}
	g.checkRaw()
}
