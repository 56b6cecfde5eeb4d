package store_test

// The differential test for window limiters (see differential_test.go): the
// scripts (lua/window.lua) and the Go model (limiter/window.go) give the same
// decisions, counts, window ends and retry times, to the ns, for fixed and
// sliding windows of many periods and limits, with time steps that land
// exactly on, and 1 µs either side of, window boundaries and retry instants.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/internal/testkit/redistest"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

var diffWindowPeriods = []string{"1s", "1m", "1h", "24h", "168h", "720h", "8760h", "3ms", "7µs", "1.5s", "333ms", "13m17.000001s"}

var diffWindowLimits = []int64{1, 2, 3, 10, 100, 1000, 123457, 1e6, 1e9, 0, 1<<32 - 1}

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
// over it (refused by both as out of range; for a limit of 0, one permit is
// in range and refused).
func (g *diffRig) windowN(r *rand.Rand) int64 {
	l := g.p.Limit
	if l == 0 {
		return 1 + r.Int64N(2)
	}
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

// stepWindow runs one random operation on a window limiter: acquires,
// charges (past the limit too), checks, batches mixing them, grants and
// their hand-backs (which give permits back to the count within the grant's
// window), configs, resets, faults.
func (g *diffRig) stepWindow(r *rand.Rand) {
	g.t.Helper()
	peek := false
	switch x := r.IntN(1000); {
	case x < 330:
		g.acquire(g.windowN(r), g.randWait(r), false)
	case x < 420:
		g.charge(g.chargeN(r), g.chargeWait(r))
	case x < 450:
		g.mixedMany(r, g.windowN)
	case x < 520:
		k := 2 + r.IntN(5)
		ns, mws := make([]int64, k), make([]time.Duration, k)
		for i := range k {
			ns[i], mws[i] = g.windowN(r), g.randWait(r)
		}
		g.acquireMany(ns, mws)
	case x < 650:
		g.acquire(g.windowN(r), g.randWait(r), true)
		if n := len(g.grants); n > 0 && r.IntN(4) == 0 { // a hand-back within the window
			g.checkRaw()
			g.release(n-1, 1+r.Int64N(g.grants[n-1].r.Permits))
		}
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
		g.fault(r)
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
	ops := diffOps(6000, 600)
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
	ops := diffOps(1500, 400)
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
	case x < 45:
		g.acquire(g.windowN(r), g.randWait(r), false)
	case x < 55:
		g.charge(g.chargeN(r), g.chargeWait(r))
	case x < 65:
		g.mixedMany(r, g.windowN)
	case x < 85:
		g.acquire(g.windowN(r), g.randWait(r), true)
		if n := len(g.grants); n > 0 && r.IntN(4) == 0 {
			g.checkRaw()
			g.release(n-1, 1+r.Int64N(g.grants[n-1].r.Permits))
		}
	case x < 90:
		g.reset()
	default:
		g.note("peek")
		g.peek()
	}
	g.checkRaw()
}

// Calendar windows: the store computes their bounds in Go and sends them
// (bounds.go); the scripts and the model still agree to the ns. The runs
// start just before a leap day, the daylight-saving changes of Berlin and
// New York, and a year's end, with steps that land on local midnights ±1 µs.

var diffCalendarZones = []string{"UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe"}

func diffCalendarConfig(r *rand.Rand) limiter.Config {
	l := diffWindowLimits[r.IntN(6)]
	return limiter.Config{Kind: limiter.KindWindow, Limit: &l,
		Period: []string{"day", "day", "week", "month", "year"}[r.IntN(5)],
		Zone:   diffCalendarZones[r.IntN(len(diffCalendarZones))]}
}

// calendarPeek is peek for a calendar window: a Wait that finds its window
// ended sends the bounds first (with the call's floor), which the model
// takes as the store does (Params.Bound).
func (g *diffRig) calendarPeek() {
	g.t.Helper()
	now := g.now()
	p, st, _ := g.p, g.s, g.ver
	if g.tpl {
		p, st, _ = g.tplResolve(now)
	}
	if p.NeedsBounds(st, now) {
		g.takeFloor()
		if g.tpl {
			g.tplUse(now)
		}
		g.p.Bound(&g.s, now, g.floor)
		g.floor = nil
		g.ops["bounds-on-peek"]++
	}
	g.peek()
}

func (g *diffRig) stepCalendar(r *rand.Rand) {
	g.t.Helper()
	if g.p.Calendar != 0 && g.p.NeedsBounds(g.s, g.now()) {
		g.ops["bounds-needed"]++
		if r.IntN(4) == 0 { // a check that finds its window ended (its bounds move the limiter)
			g.charge(0, g.chargeWait(r))
			g.checkRaw()
			return
		}
	}
	switch x := r.IntN(1000); {
	case x < 380:
		g.acquire(g.windowN(r), g.randWait(r), false)
	case x < 450:
		g.charge(g.chargeN(r), g.chargeWait(r))
	case x < 520:
		g.mixedMany(r, g.windowN)
	case x < 600:
		g.acquire(g.windowN(r), g.randWait(r), true)
	case x < 640: // another limit, period or zone (the window after is then another)
		c := diffCalendarConfig(r)
		if r.IntN(3) == 0 {
			c = diffWindowConfig(r)
		}
		g.put(c)
	case x < 670:
		g.reset()
	case x < 676:
		g.fault(r)
	default:
		g.note("peek")
		g.ops["peek"]++
		g.checkRaw()
		g.calendarPeek()
	}
	g.checkRaw()
}

// calendarStepUS steps to the window's end ±1 µs often, else by minutes,
// hours or days.
func (g *diffRig) calendarStepUS(r *rand.Rand) int64 {
	now := g.now()
	switch x := r.IntN(100); {
	case x < 25:
		return 0
	case x < 55: // to the window's end (or the one after), ±1 µs
		end := g.s.Next
		if r.IntN(3) == 0 && g.s.Pace > end {
			end = g.s.Pace
		}
		if end > now && end-now < 40*86_400_000_000_000 {
			return max(0, (end-now)/1000+r.Int64N(3)-1)
		}
		return 1
	case x < 70:
		return r.Int64N(60_000_000)
	case x < 85:
		return r.Int64N(6 * 3_600_000_000)
	case x < 98:
		return r.Int64N(3 * 86_400_000_000)
	case x < 99 && g.mr != nil:
		return -r.Int64N(3_600_000_000) // a clock step back
	default:
		return r.Int64N(40 * 86_400_000_000)
	}
}

func TestDiffCalendar(t *testing.T) {
	t.Parallel()
	ops := diffOps(3000, 400)
	starts := map[string]time.Time{
		"leap-day":    time.Date(2024, 2, 27, 22, 0, 0, 0, time.UTC),
		"berlin-dst":  time.Date(2025, 3, 29, 20, 0, 0, 0, time.UTC),
		"newyork-dst": time.Date(2025, 10, 31, 12, 0, 0, 0, time.UTC),
		"year-end":    time.Date(2025, 12, 30, 10, 0, 0, 123456000, time.UTC),
	}
	seed := uint64(0)
	for name, at := range starts {
		seed++
		for _, tpl := range []bool{false, true} {
			label := name
			if tpl {
				label += "/template"
			}
			t.Run(label, func(t *testing.T) {
				t.Parallel()
				r := rand.New(rand.NewPCG(seed, 0x63616c))
				g := diffNewMini(t, "calendar "+label, at.UnixMicro())
				if tpl {
					g = diffNewTemplate(t, "calendar "+label, at.UnixMicro())
				}
				g.put(diffCalendarConfig(r))
				g.check()
				for range ops {
					g.advance(g.calendarStepUS(r))
					g.stepCalendar(r)
				}
				g.calendarPeek()
				if g.ops["bounds-needed"] == 0 {
					t.Error("no window ended")
				}
				t.Logf("%s: %s", label, g.summary())
			})
		}
	}
}

// TestWindowCalendarRealRedis: a calendar window on a real redis-server
// (functions and scripts) gets its bounds from the store on its first call
// and counts to the local midnight (or month's end) of its zone.
func TestWindowCalendarRealRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Server(t)
	for i, mode := range []string{"functions", "scripts"} {
		var opts []store.Option
		if mode == "scripts" {
			opts = []store.Option{store.WithScriptsOnly()}
		}
		for _, c := range []struct{ period, zone string }{{"day", "Europe/Berlin"}, {"month", "America/New_York"}, {"year", "UTC"}} {
			t.Run(mode+"/"+c.period, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				st := store.New(srv.Client(), append([]store.Option{store.WithPrefix(fmt.Sprint("cal", i))}, opts...)...)
				l := int64(3)
				name := "cal-" + c.period
				if _, _, err := st.Put(ctx, name, limiter.Config{Kind: limiter.KindWindow, Limit: &l, Period: c.period, Zone: c.zone}); err != nil {
					t.Fatal(err)
				}
				cal := map[string]limiter.Calendar{"day": limiter.Day, "month": limiter.Month, "year": limiter.Year}[c.period]
				for k := range 4 {
					d, err := st.Acquire(ctx, name, 1, 0)
					if err != nil {
						t.Fatal(err)
					}
					_, end, err := limiter.CalendarWindow(cal, c.zone, d.Now)
					if err != nil {
						t.Fatal(err)
					}
					if d.Granted != (k < 3) || d.Wait != max(0, 2-int64(k)) || d.Limit != 3 || d.Position != end {
						t.Errorf("acquire %d: %+v, want the window to end at %d", k, d, end)
					}
					if !d.Granted && d.RetryAfter != end-d.Now {
						t.Errorf("retry after %d, want %d (until the window's end)", d.RetryAfter, end-d.Now)
					}
				}
				w, err := st.Wait(ctx, name)
				if err != nil || w.Limit != 3 || w.Wait != 0 {
					t.Errorf("wait: %+v %v", w, err)
				}
			})
		}
	}
}

// TestDiffRealRedisWindowInstance runs acquires and charges on an instance
// of a window template against a real redis-server, where one request on
// an instance of a fixed window takes window.lua's fast path (window_one),
// or when the instance does not exist creates it there (window_create), as
// functions; sliding windows, new template versions and scripts (which
// have no window fast path) take the general path. The state Redis keeps
// is checked to the byte against the model.
func TestDiffRealRedisWindowInstance(t *testing.T) {
	t.Parallel()
	srv := redistest.Server(t)
	ops := diffOps(900, 300)
	for i, mode := range []string{"functions", "scripts"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			var opts []store.Option
			if mode == "scripts" {
				opts = []store.Option{store.WithScriptsOnly()}
			}
			pfx := "diffwin-" + mode
			rdb := srv.Client()
			// The model does not expire instances: an idle TTL of an hour
			// keeps them while the test runs (TestWindowInstanceTTL checks
			// the TTLs without one).
			g := &diffRig{t: t, ctx: context.Background(), rdb: rdb, st: store.New(rdb, append([]store.Option{store.WithPrefix(pfx)}, opts...)...),
				name: "t:diff", key: pfx + ":{t:diff}:i", label: "real redis window instance (" + mode + ")", ops: map[string]int{}, tpl: true,
				tplIdle: limiter.D(time.Hour)}
			r := rand.New(rand.NewPCG(uint64(7300+i), 0x77696e69))
			config := func() limiter.Config {
				l := []int64{0, 1, 3, 10, 1000}[r.IntN(5)]
				return limiter.Config{Kind: limiter.KindWindow, Limit: &l,
					Period: []string{"1ms", "3ms", "10ms", "1s"}[r.IntN(4)], Sliding: r.IntN(5) == 0}
			}
			g.put(config())
			fresh := 0
			for range ops {
				g.advance(r.Int64N(2000))
				switch x := r.IntN(100); {
				case x < 2:
					g.put(config())
				case x < 10: // an instance of a name never used: created by this request
					fresh++
					name := fmt.Sprintf("t:fresh%d", fresh)
					f := *g
					f.name, f.key, f.instExists, f.s, f.ver, f.p, f.grants = name, pfx+":{"+name+"}:i", false, limiter.State{}, g.tver, g.tp, nil
					f.hist = nil
					if r.IntN(2) == 0 {
						f.charge(f.chargeN(r), f.chargeWait(r))
					} else {
						f.acquire(f.windowN(r), f.randWait(r), false)
					}
					if f.instExists {
						f.checkRaw()
					}
					continue
				case x < 45:
					g.charge(g.chargeN(r), g.chargeWait(r))
				case x < 55:
					g.mixedMany(r, g.windowN)
				default:
					g.acquire(g.windowN(r), g.randWait(r), false)
				}
				if g.instExists {
					g.checkRaw()
				}
			}
			g.peek()
			t.Logf("%s: %s", mode, g.summary())
		})
	}
}

// TestWindowInstanceTTL: the TTL the fast paths give an instance of a fixed
// window without an idle_ttl, created (window_create) and used
// (window_one), on a real redis-server: until its window's end, and an
// eighth more, set again only when a use needs more (lua/lib.lua, Instance
// TTLs). Read right after the request: a machine stalled for 10 s between
// the two would fail it.
func TestWindowInstanceTTL(t *testing.T) {
	t.Parallel()
	rdb := redistest.Server(t).Client()
	ctx := context.Background()
	s := store.New(rdb, store.WithPrefix("wttl"))
	l := int64(1000)
	if _, err := s.PutTemplate(ctx, limitd.Template{ID: "w", Pattern: "w:*", Limiter: limiter.Config{Kind: limiter.KindWindow, Limit: &l, Period: "1h"}}); err != nil {
		t.Fatal(err)
	}
	var first time.Duration
	for i, what := range []string{"created", "used", "charged"} {
		var d limitd.Decision
		var err error
		if what == "charged" {
			d, err = s.Charge(ctx, "w:a", 5)
		} else {
			d, err = s.Acquire(ctx, "w:a", 1, 0)
		}
		if err != nil || !d.Granted || !d.Instance || !d.Window {
			t.Fatalf("%s: %+v, %v", what, d, err)
		}
		toEnd := time.Duration(d.Position - d.Now)
		ttl := rdb.PTTL(ctx, "wttl:{w:a}:i").Val()
		if i == 0 {
			first = ttl
			if most := toEnd + toEnd/8 + 2*time.Millisecond; ttl > most || ttl < toEnd-10*time.Second {
				t.Fatalf("%s: PTTL %v, want the window's end (in %v) and up to an eighth more", what, ttl, toEnd)
			}
			continue
		}
		if ttl > first || ttl < toEnd { // not set again: it still covers the window
			t.Errorf("%s: PTTL %v, want at most the first one (%v) and at least the window's end (in %v)", what, ttl, first, toEnd)
		}
	}
}
