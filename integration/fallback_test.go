//go:build linux

package integration

// The client's fallback never stacks on the shared schedule: three OS
// processes, each a client with 64 workers taking permits in a loop (no
// demand limit of their own), go through the faults a deployment meets
// while they share one limiter, and every second of the run is counted from
// the permits' actual start times. Whatever serves while the shared
// schedule is unreachable (the pools' fallback, FallbackSafe) must count
// against what the schedule hands out, so that no second holds more than
// the rate, within 10 % (the processes' parts of the rate, each measured on
// its own, add up to about 1, and a busy machine wakes a worker late now
// and then); and within the 4 s after a fault the fleet is back to at least
// half the rate, so that a fallback that gave nothing would fail too.
//
// Two fleets run side by side:
//   - pools over HTTP (client.NewHTTP) through `limitd serve`, on a strict
//     (burst 1) limiter at 100/s whose queue of 192 callers runs ~1.9 s ahead
//     of the clock, with a TCP proxy between limitd and Redis; faults: limitd
//     killed (-9) and started again a second later, Redis restarted empty
//     (limitd re-applies its boot file), Redis restarted from its AOF, the
//     proxy stalling every byte for 5 s, then adding 500 ms to every request
//     for 5 s.
//   - pools on Redis (client.New over store.NewClient) at 500/s, strict,
//     with the proxy between the processes and Redis; faults: Redis restarted
//     empty (the test puts the limiter back), from its AOF, the proxy cutting
//     every connection for 2 s, stalling for 5 s, adding 500 ms for 5 s.
//
// The child processes are this test binary run again (LIMITD_FB_CHILD holds
// the child's spec); each reports every permit as a line "p <start_ns>
// <shared>", its start being time.Now() when Wait returned: this host's wall
// clock, one clock for all of them. A canary goroutine in each reports when
// the process did not run for more than 15 ms ("g <from_ns> <to_ns>"): a
// machine too busy to run the workers (this one runs other suites beside
// this test) wakes them late, together, and a second that begins while they
// wait gets the permits due before it as well, shared or the fallback's
// alike. So no window is measured from a start that falls in such a stall
// (or within 50 ms after it, while the late ones start): a window that
// begins before the stall holds both its gap and its bunch. A failure logs
// each process's permits per 250 ms and per 50 ms around the worst second,
// and its stalls.
//
// Run it alone with
//
//	go test -count=1 -v -run TestFallbackNeverStacks ./integration/

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitd/limitd/client"
	"github.com/limitd/limitd/client/redisclient"
	"github.com/limitd/limitd/internal/testkit/faultproxy"
	"github.com/limitd/limitd/internal/testkit/redistest"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

const fbChildEnv = "LIMITD_FB_CHILD"

// fbSpec is what a child process does.
type fbSpec struct {
	Kind    string `json:"kind"` // "redis" or "http"
	URL     string `json:"url"`  // redis://… or http://…
	Name    string `json:"name"`
	Workers int    `json:"workers"`
}

// TestFbChild is the body of the child processes; run directly it skips.
func TestFbChild(t *testing.T) {
	raw := os.Getenv(fbChildEnv)
	if raw == "" {
		t.Skip("the child process of TestFallbackNeverStacks (" + fbChildEnv + " unset)")
	}
	var spec fbSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		t.Fatal(err)
	}
	if err := fbChild(spec); err != nil {
		fmt.Printf("e %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
		t.Fatal(err)
	}
}

// fbChild takes permits with spec.Workers goroutines until its stdin is
// closed, and prints them.
func fbChild(spec fbSpec) error {
	var c *client.Client
	switch spec.Kind {
	case "redis":
		rdb, err := store.NewClient(spec.URL)
		if err != nil {
			return err
		}
		defer rdb.Close()
		c = redisclient.New(rdb)
	case "http":
		c = client.NewHTTP(spec.URL)
	default:
		return fmt.Errorf("kind %q", spec.Kind)
	}
	l, err := c.Limiter(spec.Name)
	if err != nil {
		return err
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()

	var mu sync.Mutex
	var buf []byte
	var errs atomic.Int64
	var errText []string
	var wg sync.WaitGroup
	for range spec.Workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				p, err := l.Wait(ctx)
				if err != nil {
					if ctx.Err() == nil {
						errs.Add(1)
						mu.Lock()
						if len(errText) < 3 && !slices.Contains(errText, err.Error()) {
							errText = append(errText, err.Error())
						}
						mu.Unlock()
						time.Sleep(20 * time.Millisecond)
					}
					continue
				}
				now := time.Now().UnixNano()
				shared := 0
				if p.Shared {
					shared = 1
				}
				mu.Lock()
				buf = fmt.Appendf(buf, "p %d %d\n", now, shared)
				mu.Unlock()
			}
		})
	}
	// The canary: a goroutine that sleeps 5ms at a time and reports each
	// time it woke more than 15ms late: this process did not run.
	wg.Go(func() {
		prev := time.Now()
		for ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
			now := time.Now()
			if now.Sub(prev) > 20*time.Millisecond {
				mu.Lock()
				buf = fmt.Appendf(buf, "g %d %d\n", prev.UnixNano(), now.UnixNano())
				mu.Unlock()
			}
			prev = now
		}
	})
	flush := func() {
		mu.Lock()
		b := buf
		buf = nil
		mu.Unlock()
		_, _ = os.Stdout.Write(b)
	}
	tick := time.NewTicker(50 * time.Millisecond)
	for ctx.Err() == nil {
		select {
		case <-tick.C:
			flush()
		case <-ctx.Done():
		}
	}
	tick.Stop()
	wg.Wait()
	flush()
	st := l.Stats()
	closeErr := c.Close()
	fmt.Printf("s %d %d %d %d %q\n", st.SharedPermits, st.FallbackPermits, st.RemoteCalls, errs.Load(), errText)
	return closeErr
}

// fbProc is one child process.
type fbProc struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{}
	err   error

	mu      sync.Mutex
	permits []fbPermit
	stalls  [][2]int64 // when the process did not run (its canary woke late), in order
	stats   string
	other   []string
	stderr  strings.Builder
}

func fbStart(t *testing.T, name string, spec fbSpec) *fbProc {
	t.Helper()
	raw, _ := json.Marshal(spec)
	p := &fbProc{name: name, done: make(chan struct{})}
	p.cmd = exec.Command(os.Args[0], "-test.run=^TestFbChild$", "-test.count=1")
	p.cmd.Env = append(os.Environ(), fbChildEnv+"="+string(raw))
	p.cmd.Stderr = &fbLocked{mu: &p.mu, w: &p.stderr}
	stdin, err := p.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.stdin = stdin
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			switch f := strings.Fields(line); {
			case len(f) == 3 && f[0] == "p":
				if start, err := strconv.ParseInt(f[1], 10, 64); err == nil {
					p.permits = append(p.permits, fbPermit{start: start, shared: f[2] == "1"})
				}
			case len(f) == 3 && f[0] == "g":
				a, err1 := strconv.ParseInt(f[1], 10, 64)
				b, err2 := strconv.ParseInt(f[2], 10, 64)
				if err1 == nil && err2 == nil {
					p.stalls = append(p.stalls, [2]int64{a, b})
				}
			case len(f) > 0 && f[0] == "s":
				p.stats = line
			default:
				p.other = append(p.other, line)
			}
			p.mu.Unlock()
		}
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// fbPermit is one permit a child reported: when Wait returned, and where
// it came from.
type fbPermit struct {
	start  int64
	shared bool
}

type fbLocked struct {
	mu *sync.Mutex
	w  *strings.Builder
}

func (l *fbLocked) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// stop ends the child cleanly (its pools hand their permits back).
func (p *fbProc) stop(t *testing.T) {
	t.Helper()
	_ = p.stdin.Close()
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not exit within 10s of its stdin closing", p.name)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		t.Errorf("%s: %v\nstderr: %s\nstdout: %s", p.name, p.err, p.stderr.String(), strings.Join(p.other, "\n"))
	}
	fell := 0
	for _, x := range p.permits {
		if !x.shared {
			fell++
		}
	}
	t.Logf("%s: %d permits, %d from the fallback, %d stalls of the process; stats (shared fallback calls errors): %s", p.name, len(p.permits), fell, len(p.stalls), p.stats)
	if e := p.stderr.String(); e != "" {
		t.Logf("%s stderr: %s", p.name, e)
	}
}

// fbFault is one fault of a run: its name, when it began and ended (Unix
// ns), and until when its effects are counted (the next fault's start).
type fbFault struct {
	name          string
	from, to, end int64
}

// fbFleet is the child processes of one kind of pool, and the faults they
// went through.
type fbFleet struct {
	kind   string
	rate   float64
	procs  []*fbProc
	faults []fbFault
}

func (f *fbFleet) fault(name string, do func()) {
	from := time.Now().UnixNano()
	do()
	to := time.Now().UnixNano()
	if n := len(f.faults); n > 0 {
		f.faults[n-1].end = from
	}
	f.faults = append(f.faults, fbFault{name: name, from: from, to: to})
}

// fbRecover is how long each fault's effects are watched before the next.
const fbRecover = 4 * time.Second

// check stops the children and holds every fault's worst second to the
// rate, within tol.
func (f *fbFleet) check(t *testing.T, tol float64) {
	t.Helper()
	f.faults[len(f.faults)-1].end = time.Now().UnixNano()
	for _, p := range f.procs {
		p.stop(t)
	}
	var all []int64
	var stalls [][2]int64
	for _, p := range f.procs {
		p.mu.Lock()
		for _, x := range p.permits {
			all = append(all, x.start)
		}
		stalls = append(stalls, p.stalls...)
		p.mu.Unlock()
	}
	slices.Sort(all)
	slices.SortFunc(stalls, func(a, b [2]int64) int { return cmp.Compare(a[0], b[0]) })
	// stalled reports whether a window may not start at x: a worker of the
	// fleet was kept from running then, or until less than 50 ms before.
	stalled := func(x int64) bool {
		for _, g := range stalls {
			if g[0] > x {
				return false
			}
			if x <= g[1]+int64(50*time.Millisecond) {
				return true
			}
		}
		return false
	}
	limit := f.rate * (1 + tol)
	for _, fl := range f.faults {
		// Every window of 1 s that starts from 1 s before the fault to 1 s
		// before the next one.
		worst, at, skipped := fbWorstSecond(all, fl.from-int64(time.Second), fl.end-int64(time.Second), stalled)
		// The recovery: permits in the last second before the next fault.
		after := fbCount(all, fl.end-int64(time.Second), fl.end)
		t.Logf("FALLBACK %s %s: worst second %d permits (%.2f× the rate of %.0f/s) at %+.2fs from the fault's start (which lasted %.2fs); %d in the last second before the next fault; %.0f%% of the window starts in stalls of the machine, not measured",
			f.kind, fl.name, worst, float64(worst)/f.rate, f.rate, float64(at-fl.from)/1e9, float64(fl.to-fl.from)/1e9, after, 100*skipped)
		if d := fl.to - fl.from; d >= int64(2*time.Second) {
			// The fallbacks' rates over the fault's second half, when
			// every process is in its fallback: their parts of the rate,
			// each measured on its own, add up to about 1.
			var b strings.Builder
			sum := 0.0
			for _, p := range f.procs {
				n := 0
				p.mu.Lock()
				for _, x := range p.permits {
					if !x.shared && x.start >= fl.from+d/2 && x.start < fl.to {
						n++
					}
				}
				p.mu.Unlock()
				r := float64(n) / (float64(d/2) / 1e9)
				sum += r
				fmt.Fprintf(&b, " %.1f/s", r)
			}
			t.Logf("FALLBACK %s %s: the processes' fallbacks over the fault's second half:%s, %.2f× the rate together", f.kind, fl.name, b.String(), sum/f.rate)
		}
		if float64(worst) > limit {
			t.Errorf("%s, %s: %d permits in one second, more than %.0f (the rate %.0f/s + %.0f%%)", f.kind, fl.name, worst, limit, f.rate, 100*tol)
			f.timeline(t, fl.from, fl.from-int64(2*time.Second), fl.end, 250*time.Millisecond)
			f.timeline(t, fl.from, at-int64(500*time.Millisecond), at+int64(1500*time.Millisecond), 50*time.Millisecond)
			for _, p := range f.procs {
				p.mu.Lock()
				for _, g := range p.stalls {
					if g[1] > at-int64(time.Second) && g[0] < at+int64(time.Second) {
						t.Logf("%s did not run from %+.3fs to %+.3fs of the worst second", p.name, float64(g[0]-at)/1e9, float64(g[1]-at)/1e9)
					}
				}
				p.mu.Unlock()
			}
		}
		if float64(after) < f.rate/2 {
			t.Errorf("%s, %s: %d permits in the last second before the next fault: the fleet did not return to the rate of %.0f/s within %v", f.kind, fl.name, after, f.rate, fbRecover)
			f.timeline(t, fl.from, fl.from-int64(2*time.Second), fl.end, 250*time.Millisecond)
		}
	}
}

// fbWorstSecond is the most permits in [x, x+1s) for any x in [lo, hi]
// that skip does not rule out, and that x (the most is always at a
// permit's start); skipped is the part of the permits in [lo, hi] that
// skip ruled out as a window's start.
func fbWorstSecond(sorted []int64, lo, hi int64, skip func(int64) bool) (worst int, at int64, skipped float64) {
	j, n, out := 0, 0, 0
	for i, s := range sorted {
		if s < lo || s > hi {
			continue
		}
		n++
		if skip(s) {
			out++
			continue
		}
		j = max(j, i)
		for j < len(sorted) && sorted[j] < s+int64(time.Second) {
			j++
		}
		if c := j - i; c > worst {
			worst, at = c, s
		}
	}
	return worst, at, float64(out) / float64(max(n, 1))
}

// fbIndex is the index of the first element ≥ v.
func fbIndex(sorted []int64, v int64) int {
	i, _ := slices.BinarySearch(sorted, v)
	return i
}

// fbCount is the number of permits in [lo, hi).
func fbCount(sorted []int64, lo, hi int64) int {
	return fbIndex(sorted, hi) - fbIndex(sorted, lo)
}

// timeline logs each process's permits per step from lo to hi, as
// shared+fallback.
func (f *fbFleet) timeline(t *testing.T, from, lo, hi int64, step time.Duration) {
	t.Helper()
	for _, p := range f.procs {
		p.mu.Lock()
		var all, fell []int64
		for _, x := range p.permits {
			all = append(all, x.start)
			if !x.shared {
				fell = append(fell, x.start)
			}
		}
		p.mu.Unlock()
		slices.Sort(all)
		slices.Sort(fell)
		var b strings.Builder
		for x := lo; x < hi; x += int64(step) {
			y := x + int64(step)
			n, m := fbCount(all, x, y), fbCount(fell, x, y)
			fmt.Fprintf(&b, " %d+%d", n-m, m)
		}
		t.Logf("%s, shared+fallback permits per %v (by start) from %.2fs after the fault's start:%s", p.name, step, float64(lo-from)/1e9, b.String())
	}
}

// fbRedis starts a redis-server that writes an AOF into a directory of the
// test's, so that Restart brings its data back; wipe empties that
// directory, for a restart that comes back empty.
func fbRedis(t *testing.T) (srv *redistest.Instance, wipe func()) {
	t.Helper()
	dir := t.TempDir()
	srv = redistest.Server(t, "--appendonly", "yes", "--appendfsync", "everysec", "--dir", dir)
	return srv, func() {
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// fbRestartEmpty kills srv and starts it again with no data.
func fbRestartEmpty(srv *redistest.Instance, wipe func()) {
	srv.Stop()
	wipe()
	srv.Start()
}

func TestFallbackNeverStacks(t *testing.T) {
	longTest(t)
	redistest.Require(t)
	bin := svBinary(t)
	const tol = 0.10

	t.Run("http", func(t *testing.T) {
		t.Parallel()
		srv, wipe := fbRedis(t)
		proxy := faultproxy.Start(t, srv.Addr())
		boot := filepath.Join(t.TempDir(), "limitd.yaml")
		if err := os.WriteFile(boot, []byte("limiters:\n  fbh: {rate: 100, burst: 1}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		env := map[string]string{"LIMITD_REDIS_URL": "redis://" + proxy.Addr(), "LIMITD_CONFIG": boot,
			"LIMITD_LOG_LEVEL": "error", "LIMITD_ADDR": "127.0.0.1:" + strconv.Itoa(redistest.FreePort(t))}
		serve := fbServe(t, bin, env)
		f := &fbFleet{kind: "http", rate: 100}
		for i := range 3 {
			f.procs = append(f.procs, fbStart(t, fmt.Sprintf("http-%d", i),
				fbSpec{Kind: "http", URL: serve.base, Name: "fbh", Workers: 64}))
		}
		time.Sleep(6 * time.Second) // 192 callers queue ~1.9 s ahead; each process learns its part
		f.fault("limitd restart", func() {
			_ = serve.cmd.Process.Kill()
			<-serve.done
			time.Sleep(time.Second)
			serve = fbServe(t, bin, env)
		})
		time.Sleep(fbRecover)
		f.fault("redis restart empty", func() { fbRestartEmpty(srv, wipe) })
		time.Sleep(fbRecover)
		f.fault("redis restart aof", func() { srv.Restart() })
		time.Sleep(fbRecover)
		f.fault("stall 5s", func() { proxy.Stall(); time.Sleep(5 * time.Second); proxy.Resume() })
		time.Sleep(fbRecover)
		f.fault("latency 500ms", func() { proxy.SetLatency(500 * time.Millisecond); time.Sleep(5 * time.Second); proxy.SetLatency(0) })
		time.Sleep(fbRecover)
		f.check(t, tol)
	})

	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		srv, wipe := fbRedis(t)
		proxy := faultproxy.Start(t, srv.Addr())
		put := func() {
			rdb := srv.Client()
			defer rdb.Close()
			if _, _, err := store.New(rdb).Put(context.Background(), "fbr", limiter.Config{Rate: 500, Burst: limiter.B(1)}); err != nil {
				t.Fatal(err)
			}
		}
		put()
		f := &fbFleet{kind: "redis", rate: 500}
		for i := range 3 {
			f.procs = append(f.procs, fbStart(t, fmt.Sprintf("redis-%d", i),
				fbSpec{Kind: "redis", URL: "redis://" + proxy.Addr(), Name: "fbr", Workers: 64}))
		}
		time.Sleep(3 * time.Second)
		f.fault("redis restart empty", func() { fbRestartEmpty(srv, wipe); put() })
		time.Sleep(fbRecover)
		f.fault("redis restart aof", func() { srv.Restart() })
		time.Sleep(fbRecover)
		f.fault("cut 2s", func() { proxy.Cut(); time.Sleep(2 * time.Second); proxy.Mend() })
		time.Sleep(fbRecover)
		f.fault("stall 5s", func() { proxy.Stall(); time.Sleep(5 * time.Second); proxy.Resume() })
		time.Sleep(fbRecover)
		f.fault("latency 500ms", func() { proxy.SetLatency(500 * time.Millisecond); time.Sleep(5 * time.Second); proxy.SetLatency(0) })
		time.Sleep(fbRecover)
		f.check(t, tol)
	})
}

// fbServe starts limitd serve with env (LIMITD_ADDR fixed, so that a
// restart comes back where the clients look) and waits for /healthz.
func fbServe(t *testing.T, bin string, env map[string]string) *svProc {
	t.Helper()
	p := svRunBin(t, bin, env)
	p.base = "http://" + env["LIMITD_ADDR"]
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-p.done:
			t.Fatalf("limitd exited during start-up (%v):\n%s", p.err, p.stderr)
		default:
		}
		if code, _ := fbGet(p.base + "/healthz"); code == 200 {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("limitd did not answer /healthz within 10s:\n%s", p.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func fbGet(url string) (int, error) {
	resp, err := svClient.Get(url)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}
