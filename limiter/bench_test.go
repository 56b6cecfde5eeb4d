package limiter_test

// Benchmarks of the in-process Limiter beside what a Go user would pick
// instead, all in one run (DESIGN §9): golang.org/x/time/rate for Allow and
// Reserve, go.uber.org/ratelimit for a blocking Take. The machines are small
// and noisy, so compare medians of -count=5 and their ratios, never a lone time:
//
//	go test -run='^$' -bench=. -benchmem -count=5 ./limiter/ | tee /tmp/limiter-bench.txt
//	benchstat /tmp/limiter-bench.txt

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/ratelimit"
	"golang.org/x/time/rate"

	"github.com/limitd/limitd/internal/testkit/rounds"
	"github.com/limitd/limitd/limiter"
)

// decideRate is so high (one permit a nanosecond) that every Allow and Reserve
// is granted at once: the benchmarks measure the cost of deciding, not waiting.
const decideRate = 1e9

// allower is what Allow benchmarks call, so that every contender pays the same
// indirect call.
type allower interface{ Allow() bool }

// allowContenders returns the limiters compared by the Allow benchmarks:
//   - limitd-schedule: a finite burst (1e6, the largest) rather than "inf", so
//     that the decision takes the usual path, pace arithmetic included;
//   - limitd-smooth: SmoothBursty with the default one second of stored permits;
//   - xtime-rate: a finite limit and bucket (not rate.Inf, which short-cuts),
//     so that it really computes tokens.
func allowContenders(b *testing.B) []struct {
	name string
	lim  allower
} {
	b.Helper()
	return []struct {
		name string
		lim  allower
	}{
		{"limitd-schedule", mustNew(b, limiter.Config{Rate: decideRate, Burst: limiter.B(limiter.MaxBurst)})},
		{"limitd-smooth", mustNew(b, limiter.Config{Kind: limiter.KindSmooth, Rate: decideRate})},
		{"xtime-rate", rate.NewLimiter(rate.Limit(decideRate), int(decideRate))},
	}
}

func mustNew(tb testing.TB, c limiter.Config) *limiter.Limiter {
	tb.Helper()
	l, err := limiter.New(c)
	if err != nil {
		tb.Fatal(err)
	}
	return l
}

// BenchmarkAllow is the cost of one non-blocking decision from one goroutine.
// denied/op should be 0: a denial would mean the rate was not high enough.
func BenchmarkAllow(b *testing.B) {
	for _, c := range allowContenders(b) {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			var ops, denied int
			for b.Loop() {
				if !c.lim.Allow() {
					denied++
				}
				ops++
			}
			b.ReportMetric(float64(denied)/float64(ops), "denied/op")
		})
	}
}

// BenchmarkAllowParallel is Allow from GOMAXPROCS goroutines on one limiter:
// the cost of the lock under contention.
func BenchmarkAllowParallel(b *testing.B) {
	for _, c := range allowContenders(b) {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			var ops, denied atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				var n, d int64
				for pb.Next() {
					if !c.lim.Allow() {
						d++
					}
					n++
				}
				ops.Add(n)
				denied.Add(d)
			})
			b.ReportMetric(float64(denied.Load())/float64(max(1, ops.Load())), "denied/op")
		})
	}
}

// BenchmarkReserve takes one permit and asks how long to wait, without
// waiting; both return a pointer.
func BenchmarkReserve(b *testing.B) {
	b.Run("limitd", func(b *testing.B) {
		l := mustNew(b, limiter.Config{Rate: decideRate, Burst: limiter.B(limiter.MaxBurst)})
		b.ReportAllocs()
		for b.Loop() {
			r, err := l.Reserve(1)
			if err != nil {
				b.Fatal(err)
			}
			_ = r.Delay()
		}
	})
	b.Run("xtime-rate", func(b *testing.B) {
		l := rate.NewLimiter(rate.Limit(decideRate), int(decideRate))
		b.ReportAllocs()
		for b.Loop() {
			r := l.Reserve()
			if !r.OK() {
				b.Fatal("x/time/rate refused a reservation")
			}
			_ = r.Delay()
		}
	})
}

// takeRate is the rate of the blocking benchmarks: one permit every 10ns.
const takeRate = 1e8

// BenchmarkTake compares the blocking calls of a strict schedule: limitd's
// Wait on a schedule limiter with burst 1 (late time is never caught up) and
// uber's Take without slack, which is the same policy. A slot (10ns) is shorter
// than either call, so neither sleeps in a serial loop: what is compared is the
// cost of reaching the decision "start now" and returning (limitd also fills
// in a Permit with the scheduled time; uber returns the time).
func BenchmarkTake(b *testing.B) {
	b.Run("limitd-wait", func(b *testing.B) {
		l := mustNew(b, limiter.Config{Rate: takeRate, Burst: limiter.B(1)})
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			if _, err := l.Wait(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("uber-ratelimit", func(b *testing.B) {
		rl := ratelimit.New(takeRate, ratelimit.WithoutSlack)
		b.ReportAllocs()
		for b.Loop() {
			rl.Take()
		}
	})
}

// TestAllowDoesNotAllocate holds the hot paths to zero allocations: Allow and
// AllowN on both engines, and a Wait that need not sleep. Reserve returns a
// pointer (one allocation, as x/time/rate's does), so that copies of a
// reservation share its state.
func TestAllowDoesNotAllocate(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  limiter.Config
	}{
		{"schedule", limiter.Config{Rate: decideRate, Burst: limiter.B(limiter.MaxBurst)}},
		{"schedule burst inf", limiter.Config{Rate: decideRate, Burst: limiter.B(limiter.Inf)}},
		{"smooth", limiter.Config{Kind: limiter.KindSmooth, Rate: decideRate}},
		{"smooth warm-up", limiter.Config{Kind: limiter.KindSmooth, Rate: decideRate, Warmup: limiter.D(time.Second)}},
	} {
		l := mustNew(t, c.cfg)
		ctx := context.Background()
		for name, f := range map[string]func(){
			"Allow":  func() { l.Allow() },
			"AllowN": func() { l.AllowN(2) },
			"Wait":   func() { _, _ = l.Wait(ctx) },
		} {
			if a := testing.AllocsPerRun(1000, f); a != 0 {
				t.Errorf("%s on %s: %v allocs/op, want 0", name, c.name, a)
			}
		}
		if a := testing.AllocsPerRun(1000, func() { r, _ := l.Reserve(1); _ = r.Delay() }); a > 1 {
			t.Errorf("Reserve on %s: %v allocs/op, want at most 1", c.name, a)
		}
	}
}

// BenchmarkAllowVs is BenchmarkAllow and BenchmarkAllowParallel side by side
// in alternating rounds (internal/testkit/rounds): each iteration is a round of 100
// ms per contender, the one going first rotating; the figures are medians
// over the rounds, limitd's time per call divided by x/time/rate's the one to
// read (goal ≤ 1.0). Every call must be granted.
//
//	go test -run='^$' -bench=BenchmarkAllowVs -benchtime=20x ./limiter/
func BenchmarkAllowVs(b *testing.B) {
	for _, g := range []struct {
		name string
		n    int
	}{{"g1", 1}, {"parallel", runtime.GOMAXPROCS(0)}} {
		for _, kind := range []limiter.Kind{limiter.KindSchedule, limiter.KindSmooth} {
			b.Run(g.name+"/"+string(kind), func(b *testing.B) {
				cfg := limiter.Config{Rate: decideRate, Burst: limiter.B(limiter.MaxBurst)}
				if kind == limiter.KindSmooth {
					cfg = limiter.Config{Kind: limiter.KindSmooth, Rate: decideRate}
				}
				l := mustNew(b, cfg)
				x := rate.NewLimiter(rate.Limit(decideRate), int(decideRate))
				rounds.Run(b, g.n, 100*time.Millisecond,
					rounds.Side{Name: "limitd", Op: l.Allow},
					rounds.Side{Name: "xtime", Op: x.Allow})
			})
		}
	}
}

// BenchmarkTakeVs is BenchmarkTake in alternating rounds: limitd's Wait
// that need not sleep against uber's Take (limitd/uber). No goal: Wait does
// more than Take, it fills in the Permit with its scheduled time and start.
//
//	go test -run='^$' -bench=BenchmarkTakeVs -benchtime=20x ./limiter/
func BenchmarkTakeVs(b *testing.B) {
	l := mustNew(b, limiter.Config{Rate: takeRate, Burst: limiter.B(1)})
	rl := ratelimit.New(takeRate, ratelimit.WithoutSlack)
	ctx := context.Background()
	rounds.Run(b, 1, 100*time.Millisecond,
		rounds.Side{Name: "limitd", Op: func() bool { _, err := l.Wait(ctx); return err == nil }},
		rounds.Side{Name: "uber", Op: func() bool { rl.Take(); return true }})
}
