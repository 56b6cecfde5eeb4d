//go:build unix

package integration

// Helpers of multiprocess_test.go: build the limitd binary once, run `limitd
// bench` processes, read their --log and --json output, and measure the merged
// permits. Every name here starts with mp so that other integration tests may
// live in this package without clashing.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/limitd/limitd/internal/bench"
)

// mpResult is the --json summary of one bench process (its fields are
// checked one by one in cmd/limitd's bench tests).
type mpResult = bench.Result

// mpProc is one `limitd bench` OS process.
type mpProc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	stdout  bytes.Buffer
	stderr  bytes.Buffer
	started time.Time
	exited  time.Time
	done    chan struct{}
	waitErr error
}

// mpStart starts `limitd bench` with args plus --json and --log into t's
// temporary directory. The process is killed when the test ends if it is
// still running.
func mpStart(t *testing.T, bin, name string, args ...string) *mpProc {
	t.Helper()
	p := &mpProc{name: name, logPath: filepath.Join(t.TempDir(), name+".log"), done: make(chan struct{})}
	args = append([]string{"bench", "--json", "--log", p.logPath}, args...)
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	p.started = time.Now()
	go func() {
		p.waitErr = p.cmd.Wait()
		p.exited = time.Now()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Signal(syscall.SIGCONT) // a stopped process ignores SIGKILL until continued on some systems
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// mpFleet starts n bench processes with the same arguments.
func mpFleet(t *testing.T, bin, prefix string, n int, args ...string) []*mpProc {
	t.Helper()
	ps := make([]*mpProc, n)
	for i := range ps {
		ps[i] = mpStart(t, bin, fmt.Sprintf("%s-%d", prefix, i), args...)
	}
	return ps
}

// mpWait waits for every process to exit within limit of its start (the
// run's duration plus what an orderly exit may take: a process that does not
// end in time left something running) and checks that each exited 0 with a
// --json summary, which it returns.
func mpWait(t *testing.T, ps []*mpProc, limit time.Duration) []mpResult {
	t.Helper()
	out := make([]mpResult, len(ps))
	for i, p := range ps {
		select {
		case <-p.done:
		case <-time.After(time.Until(p.started.Add(limit))):
			_ = p.cmd.Process.Kill()
			<-p.done
			t.Fatalf("%s did not exit within %v of its start\nstderr:\n%s", p.name, limit, p.stderr.String())
		}
		if p.waitErr != nil {
			t.Fatalf("%s: %v\nstderr:\n%s\nstdout:\n%s", p.name, p.waitErr, p.stderr.String(), p.stdout.String())
		}
		dec := json.NewDecoder(bytes.NewReader(p.stdout.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&out[i]); err != nil {
			t.Fatalf("%s: reading --json output %q: %v", p.name, p.stdout.String(), err)
		}
		t.Logf("%s: %s", p.name, strings.TrimSpace(p.stdout.String()))
		if s := p.stderr.String(); s != "" {
			t.Logf("%s stderr: %s", p.name, strings.TrimSpace(s))
		}
	}
	return out
}

// mpPermit is one --log line: Unix ns on the Redis clock.
type mpPermit struct{ sched, start int64 }

// mpReadLog reads a --log file and checks its format: two integers a line.
func mpReadLog(t *testing.T, path string) []mpPermit {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ps []mpPermit
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		a, b, ok := strings.Cut(sc.Text(), " ")
		s, err1 := strconv.ParseInt(a, 10, 64)
		st, err2 := strconv.ParseInt(b, 10, 64)
		if !ok || err1 != nil || err2 != nil {
			t.Fatalf("%s:%d: %q is not \"<scheduled_ns> <start_ns>\"", path, n, sc.Text())
		}
		ps = append(ps, mpPermit{s, st})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return ps
}

// mpLogs reads every process's log; each must hold as many lines as the
// process reported permits.
func mpLogs(t *testing.T, ps []*mpProc, res []mpResult) [][]mpPermit {
	t.Helper()
	logs := make([][]mpPermit, len(ps))
	for i, p := range ps {
		logs[i] = mpReadLog(t, p.logPath)
		if int64(len(logs[i])) != res[i].Permits {
			t.Fatalf("%s: %d log lines, %d permits in --json", p.name, len(logs[i]), res[i].Permits)
		}
		if len(logs[i]) == 0 {
			t.Fatalf("%s took no permit", p.name)
		}
	}
	return logs
}

func mpSched(p mpPermit) int64   { return p.sched }
func mpStartOf(p mpPermit) int64 { return p.start }

// mpOverlap is the span in which every process was taking permits, by the
// time key picks: from the latest first permit to the earliest last one,
// shrunk by trim at both ends (ramp-up while the pools learn their demand;
// the hand-back of unused permits at exit).
func mpOverlap(logs [][]mpPermit, key func(mpPermit) int64, trim time.Duration) (lo, hi int64) {
	lo, hi = int64(-1<<63), int64(1<<63-1)
	for _, l := range logs {
		first, last := key(l[0]), key(l[0])
		for _, p := range l {
			first, last = min(first, key(p)), max(last, key(p))
		}
		lo, hi = max(lo, first), min(hi, last)
	}
	return lo + int64(trim), hi - int64(trim)
}

// mpRate is the aggregate rate of the permits whose key lies in [lo, hi).
func mpRate(logs [][]mpPermit, key func(mpPermit) int64, lo, hi int64) (rate float64, n int) {
	for _, l := range logs {
		for _, p := range l {
			if k := key(p); k >= lo && k < hi {
				n++
			}
		}
	}
	return float64(n) / (float64(hi-lo) / 1e9), n
}

// mpSortedSched returns the scheduled times in [lo, hi) of every process's
// permits, in order.
func mpSortedSched(logs [][]mpPermit, lo, hi int64) []int64 {
	var s []int64
	for _, l := range logs {
		for _, p := range l {
			if p.sched >= lo && p.sched < hi {
				s = append(s, p.sched)
			}
		}
	}
	slices.Sort(s)
	return s
}

// mpMinGap returns the smallest distance between consecutive scheduled times
// of all permits with a scheduled time in [lo, hi), and where it is.
func mpMinGap(logs [][]mpPermit, lo, hi int64) (gap int64, at int64, n int) {
	s := mpSortedSched(logs, lo, hi)
	gap = int64(1<<63 - 1)
	for i := 1; i < len(s); i++ {
		if d := s[i] - s[i-1]; d < gap {
			gap, at = d, s[i]
		}
	}
	return gap, at, len(s)
}

// mpWithin fails the test unless got is within tol (a fraction) of want.
func mpWithin(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	dev := got/want - 1
	t.Logf("%s: %.1f/s, %+.3f%% from %.0f/s (tolerance ±%.1f%%)", what, got, 100*dev, want, 100*tol)
	if dev < -tol || dev > tol {
		t.Errorf("%s: %.1f/s is %+.3f%% from %.0f/s, beyond ±%.1f%%", what, got, 100*dev, want, 100*tol)
	}
}

// mpRedisNow is the Unix ns on the Redis clock corresponding to a local time,
// which the test needs to place its own actions (SIGSTOP, a restart) among the
// logged permits. The bench processes run on this host, so Redis's clock is
// the local wall clock here; the test only uses it to pick windows with
// hundreds of milliseconds to spare.
func mpRedisNow(t time.Time) int64 { return t.UnixNano() }

// mpTimeline logs each process's rate by start time in steps of step from
// lo, to show where a failing run lost or gained permits.
func mpTimeline(t *testing.T, logs [][]mpPermit, lo, hi int64, step time.Duration) {
	t.Helper()
	n := int((hi-lo)/int64(step)) + 1
	for i, l := range logs {
		counts := make([]int, n)
		late := make([]int64, n)
		for _, p := range l {
			if k := (p.start - lo) / int64(step); p.start >= lo && k < int64(n) {
				counts[k]++
				late[k] = max(late[k], p.start-p.sched)
			}
		}
		var b strings.Builder
		for k, c := range counts {
			fmt.Fprintf(&b, " %.0f(%v)", float64(c)/step.Seconds(), time.Duration(late[k]).Round(time.Millisecond))
		}
		t.Logf("process %d, permits/s (max lateness) every %v:%s", i, step, b.String())
	}
}

// mpExplainFailure logs the timeline of the permits if the test has failed
// by the time it ends.
func mpExplainFailure(t *testing.T, logs [][]mpPermit) {
	t.Cleanup(func() {
		if t.Failed() {
			lo, hi := mpOverlap(logs, mpStartOf, -time.Second)
			mpTimeline(t, logs, lo, hi, 250*time.Millisecond)
		}
	})
}
