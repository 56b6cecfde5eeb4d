//go:build unix

package integration

// Several `limitd bench` OS processes share one schedule limiter in a real
// redis-server, and their --log files show whether the schedule held across
// them: the claim of docs/concepts.md (client pools) that a fleet of processes together
// drives exactly R permits/s, checked from the outside.
//
// How the rates are measured, and why it means something:
//   - Every logged time is on the Redis clock (the bench converts its local
//     monotonic clock with the offset it measures on each round trip), so the
//     logs of different processes merge without trusting their clocks.
//   - The window is where every process was taking permits: from the latest
//     first permit to the earliest last one, less 250ms at each end (ramp-up
//     while the pools learn their demand; hand-backs at exit). The aggregate
//     there is the fleet's rate, not a mix of one to four processes.
//   - The criterion is the rate by scheduled time: the permits whose
//     scheduled time lies in the window, over its length. Scheduled times
//     come from the one schedule in Redis and do not depend on how promptly
//     a busy machine woke the workers, so this measures the limiter: above R
//     would mean slots given twice, below R slots lost (granted to a pool and
//     never used: handed back stale, dropped). Counted alone it could hide a
//     double booking behind a loss, hence the second check: the merged
//     scheduled times are never closer than one slice, i.e. every slot of the
//     schedule went to exactly one caller.
//   - The rate by start time (when a worker really got its permit) is checked
//     too, more loosely. It is what a system under test sees, but it also
//     measures the machine: when every process is descheduled at once (seen
//     in the logs as a jump of lateness in all of them at the same moment;
//     this host runs other test suites beside this one) a strict schedule
//     (burst 1) never gives the lost time back, by design (DESIGN §3.1). The
//     looser bound still catches a pool that fails to deliver: the two pool
//     bugs this test found gave -80% and -99%.
//   - A window of ~7 s at 2,000/s holds ~14,000 permits; counting them is
//     exact to ±1 permit at the edges (±0.01%), so a ±1% criterion tests the
//     limiter, not the arithmetic.
//
// The processes run with unlimited demand (workers take the next permit as
// soon as they have the last): the limiter is always the bottleneck. On a
// failure the test logs each process's rate and lateness every 250ms.

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/internal/testkit/redistest"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

const (
	mpTrim = 250 * time.Millisecond
	// mpExitSlack is how long after its duration a bench process may take to
	// connect, hand its unused permits back and exit.
	mpExitSlack = 4 * time.Second
)

func TestMultiprocess(t *testing.T) {
	longTest(t)
	bin := svBinary(t)
	srv := redistest.Server(t)
	url := "redis://" + srv.Addr()

	// (a) 4 processes × 4 workers on one strict schedule (burst 1) at
	// 2,000/s for 8 s.
	t.Run("strict", func(t *testing.T) {
		const rate, slice = 2000.0, int64(500_000)
		ps := mpFleet(t, bin, "strict", 4, "--redis", url, "--limiter", "mp-strict",
			"--create", "2000,1", "--workers", "4", "--duration", "8s")
		res := mpWait(t, ps, 8*time.Second+mpExitSlack)
		logs := mpLogs(t, ps, res)
		mpExplainFailure(t, logs)
		mpCheckShares(t, ps, logs)
		mpCheckSpacing(t, logs, mpSpan{}, slice)
		mpCheckRates(t, logs, mpSpan{}, rate, 0.01, 0.05)
	})

	// (b) 100,000/s through the pools: 2 processes × 4 workers for 5 s, at
	// most one Redis round trip per 100 permits. The default burst (1.1, the
	// load generator's) lets a pool that a busy machine delayed catch up.
	t.Run("pool-100k", func(t *testing.T) {
		const rate, slice = 100_000.0, int64(10_000)
		ps := mpFleet(t, bin, "pool", 2, "--redis", url, "--limiter", "mp-100k",
			"--create", "100000", "--workers", "4", "--duration", "5s", "--mode", "pool")
		res := mpWait(t, ps, 5*time.Second+mpExitSlack)
		logs := mpLogs(t, ps, res)
		mpExplainFailure(t, logs)
		mpCheckShares(t, ps, logs)

		var permits, calls int64
		for _, r := range res {
			permits += r.Permits
			calls += r.RemoteCalls
			if r.TargetRate != rate {
				t.Errorf("target_rate %v, want %v", r.TargetRate, rate)
			}
		}
		t.Logf("remote calls %d for %d permits (%.3f%%)", calls, permits, 100*float64(calls)/float64(permits))
		if float64(calls) > 0.01*float64(permits) {
			t.Errorf("%d remote calls for %d permits: more than 1%%", calls, permits)
		}
		mpCheckSpacing(t, logs, mpSpan{}, slice)
		mpCheckRates(t, logs, mpSpan{}, rate, 0.01, 0.05)
	})

	// (c) One of 4 processes frozen (SIGSTOP) for 2 s of a 6 s run: the other
	// three take the whole schedule meanwhile, and on waking the frozen one
	// neither reuses slots nor bursts through the permits it held.
	t.Run("sigstop", func(t *testing.T) {
		const rate, slice = 2000.0, int64(500_000)
		ps := mpFleet(t, bin, "stop", 4, "--redis", url, "--limiter", "mp-stop",
			"--create", "2000,1", "--workers", "4", "--duration", "6s")
		time.Sleep(2 * time.Second)
		if err := ps[0].cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		stopped := mpRedisNow(time.Now())
		time.Sleep(2 * time.Second)
		if err := ps[0].cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		resumed := mpRedisNow(time.Now())
		res := mpWait(t, ps, 6*time.Second+mpExitSlack)
		logs := mpLogs(t, ps, res)
		mpExplainFailure(t, logs)

		mpCheckSpacing(t, logs, mpSpan{}, slice)
		mpCheckRates(t, logs, mpSpan{}, rate, 0.02, 0.05)
		// While it was frozen the other three carried the whole rate.
		r, n := mpRate(logs[1:], mpStartOf, stopped+int64(mpTrim), resumed-int64(mpTrim))
		t.Logf("while one process was frozen the others started %d permits (%.1f/s)", n, r)
		// On waking, only the permits its workers already held (one each,
		// due some ms after the freeze began) may start: a permit due early
		// in the freeze that started after its middle. The rest of its pool
		// was stale and handed back.
		held := 0
		for _, p := range logs[0] {
			if p.sched < stopped+int64(500*time.Millisecond) && p.start > stopped+int64(time.Second) {
				held++
			}
		}
		t.Logf("frozen process: %d permits due during the freeze started after it", held)
		if held > 4 {
			t.Errorf("the frozen process started %d permits due during its freeze; only its 4 workers' held permits may", held)
		}
	})

	// (d) Redis down for a second mid-run, then back empty, and the limiter
	// created again as limitd serve's boot file would: the processes fall
	// back to local limits, come back to the shared schedule, and end on
	// time with exit code 0.
	t.Run("redis-restart", func(t *testing.T) {
		const rate, slice = 2000.0, int64(500_000)
		srv := redistest.Server(t)
		url := "redis://" + srv.Addr()
		cfg := limiter.Config{Spec: "2000,1"}
		ps := mpFleet(t, bin, "restart", 3, "--redis", url, "--limiter", "mp-restart",
			"--create", cfg.Spec, "--workers", "4", "--duration", "8s")
		time.Sleep(2 * time.Second)
		// Down long enough for every pool to need a grant meanwhile.
		srv.Stop()
		down := mpRedisNow(time.Now())
		time.Sleep(time.Second)
		srv.Restart()
		restarted := mpRedisNow(time.Now())
		st := store.New(srv.Client())
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, _, err := st.Put(ctx, "mp-restart", cfg); err != nil {
			t.Fatalf("re-creating the limiter: %v", err)
		}
		res := mpWait(t, ps, 8*time.Second+mpExitSlack)
		logs := mpLogs(t, ps, res)
		mpExplainFailure(t, logs)

		fellBack := 0
		for _, p := range ps {
			if strings.Contains(p.stderr.String(), "fallback") {
				fellBack++
			}
		}
		if fellBack != len(ps) {
			t.Errorf("%d of %d processes used the fallback while Redis was down", fellBack, len(ps))
		}
		// Permits kept coming while Redis was gone: each pool fell back to a
		// local limit at its recent share of the rate.
		r, n := mpRate(logs, mpStartOf, down+int64(mpTrim), restarted)
		t.Logf("while Redis was down: %d permits (%.0f/s)", n, r)
		if r < 0.5*rate || r > 1.5*rate {
			t.Errorf("%.0f/s while Redis was down: the fallback should keep near %.0f/s", r, rate)
		}
		// Back on one shared schedule from 2 s after the restart (the pools
		// retry Redis every second).
		after := mpSpan{from: restarted + int64(2*time.Second)}
		mpCheckSpacing(t, logs, after, slice)
		mpCheckRates(t, logs, after, rate, 0.02, 0.10)
	})

	// SIGINT ends a run early: the summary and the log are still written,
	// and the exit code is 0.
	// SIGINT ends a run early, with its summary and log. The signal goes once
	// the process takes permits (it listens for signals before it starts),
	// however long a busy machine takes to get it there; no bound on time
	// but a hang's.
	t.Run("sigint", func(t *testing.T) {
		ps := mpFleet(t, bin, "sigint", 1, "--redis", url, "--limiter", "mp-sigint",
			"--create", "1000,1", "--duration", "1h")
		st := store.New(srv.Client())
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
			if w, err := st.Wait(context.Background(), "mp-sigint"); err == nil && w.Permits > 0 {
				break
			}
			if time.Now().After(deadline) {
				mpWait(t, ps, 0) // kills it, and fails with its stderr
				t.Fatal("sigint-0 took no permit within a minute")
			}
		}
		if err := ps[0].cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		res := mpWait(t, ps, time.Since(ps[0].started)+time.Minute)
		mpLogs(t, ps, res) // as many lines as permits reported
		if res[0].Permits == 0 || res[0].Seconds >= time.Hour.Seconds() {
			t.Errorf("summary after SIGINT: %+v (want the permits taken, in a run ended before its hour)", res[0])
		}
	})

	// A schedule with a backlog (idle for a while) must not look stale to the
	// pools: its permits are due in the past but may start now. The pools
	// once measured staleness from the due time, handed every grant back and
	// rewound the schedule forever (a few permits a second), hence the loose
	// start-time bound: it is there to catch that. The permits run ~0.7 s
	// late throughout (the backlog), and the scheduled-time window ends that
	// much before the end: 4 s leave a window long enough that a stall of a
	// busy machine, whose stale permits are lost, moves it little.
	t.Run("backlog", func(t *testing.T) {
		const rate, slice = 2000.0, int64(500_000)
		st := store.New(srv.Client())
		ctx := context.Background()
		if _, _, err := st.Put(ctx, "mp-backlog", limiter.Config{Spec: "2000,1"}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Acquire(ctx, "mp-backlog", 1, limitd.Forever); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond) // a backlog of 500ms, over the pools' 100ms staleness
		ps := mpFleet(t, bin, "backlog", 2, "--redis", url, "--limiter", "mp-backlog",
			"--workers", "2", "--duration", "4s")
		res := mpWait(t, ps, 4*time.Second+mpExitSlack)
		logs := mpLogs(t, ps, res)
		mpExplainFailure(t, logs)
		mpCheckSpacing(t, logs, mpSpan{}, slice)
		mpCheckRates(t, logs, mpSpan{}, rate, 0.02, 0.5)
	})
}

// mpSpan bounds a measure on the Redis clock (0: no bound).
type mpSpan struct{ from, to int64 }

func (s mpSpan) clip(lo, hi int64) (int64, int64) {
	if s.from != 0 {
		lo = max(lo, s.from)
	}
	if s.to != 0 {
		hi = min(hi, s.to)
	}
	return lo, hi
}

// mpBusyLoss is how far below the rate the fleet's start times may fall on a
// busy machine (2 cores at load 4–5: other suites run beside this one).
// When every process is descheduled at once, a strict schedule never gives
// the lost time back (DESIGN §3.1), so the start rate measures the machine
// as much as the limiter: -5.4% was seen. A pool that fails to deliver
// shows far below this (the two pool bugs this test found gave -80% and
// -99%), and the scheduled-time rate, which the machine cannot move, is
// held to schedTol both ways.
const mpBusyLoss = 0.25

// mpCheckRates checks the fleet's aggregate rate where every process was
// taking permits: by scheduled time within schedTol, by start time at most
// startTol above and max(startTol, mpBusyLoss) below (fractions of rate).
func mpCheckRates(t *testing.T, logs [][]mpPermit, span mpSpan, rate, schedTol, startTol float64) {
	t.Helper()
	measure := func(name string, key func(mpPermit) int64, cut int64) (string, float64) {
		lo, hi := span.clip(mpOverlap(logs, key, mpTrim))
		hi = max(lo+1, hi-cut)
		r, n := mpRate(logs, key, lo, hi)
		return fmt.Sprintf("aggregate rate by %s time (%d permits in %.2f s)", name, n, float64(hi-lo)/1e9), r
	}
	// A permit scheduled less than the fleet's worst lateness before the end
	// may still have been in a pool when its process was told to stop: a
	// busy machine makes the lateness, not the schedule. So the scheduled
	// span ends that much earlier (a few ms on a quiet machine).
	var late int64
	for _, l := range logs {
		for _, p := range l {
			late = max(late, p.start-p.sched)
		}
	}
	what, r := measure("scheduled", mpSched, late)
	mpWithin(t, what, r, rate, schedTol)
	what, r = measure("start", mpStartOf, 0)
	below, dev := max(startTol, mpBusyLoss), r/rate-1
	t.Logf("%s: %.1f/s, %+.3f%% from %.0f/s (tolerance -%.1f%% +%.1f%%)", what, r, 100*dev, rate, 100*below, 100*startTol)
	if dev < -below || dev > startTol {
		t.Errorf("%s: %.1f/s is %+.3f%% from %.0f/s, beyond -%.1f%% +%.1f%%", what, r, 100*dev, rate, 100*below, 100*startTol)
	}
}

// mpCheckSpacing checks that no two permits scheduled in span are closer
// than one slice: every slot of the schedule went to one caller.
func mpCheckSpacing(t *testing.T, logs [][]mpPermit, span mpSpan, slice int64) {
	t.Helper()
	lo, hi := span.clip(-1<<63, 1<<63-1)
	gap, at, n := mpMinGap(logs, lo, hi)
	t.Logf("%d permits; the closest two scheduled times are %d ns apart", n, gap)
	if gap < slice {
		t.Errorf("two permits scheduled %d ns apart at %d, less than one slice (%d ns)", gap, at, slice)
	}
}

// mpCheckShares checks that every process got a fair part of the permits:
// with equal demand none may be starved by the others.
func mpCheckShares(t *testing.T, ps []*mpProc, logs [][]mpPermit) {
	t.Helper()
	total := 0
	for _, l := range logs {
		total += len(l)
	}
	line := ""
	for i, l := range logs {
		share := float64(len(l)) / float64(total)
		line += fmt.Sprintf(" %s %.1f%%", ps[i].name, 100*share)
		if share < 0.25/float64(len(logs)) {
			t.Errorf("%s got %.1f%% of the permits, under a quarter of a fair share", ps[i].name, 100*share)
		}
	}
	t.Logf("shares:%s", line)
}
