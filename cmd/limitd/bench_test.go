package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"math"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/limitd/limitd/api"
	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/internal/bench"
	"github.com/limitd/limitd/internal/testkit/redistest"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

// benchRun runs `limitd bench args...` in-process with ctx.
func benchRun(ctx context.Context, args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(ctx, append([]string{"bench"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

// Command-line mistakes exit 2 with one line naming the flag at fault,
// before anything is contacted (the URLs here lead nowhere).
func TestBenchFlagErrorsNameTheFlag(t *testing.T) {
	r := []string{"--redis", "redis://127.0.0.1:1"}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--limiter", "x"}, "--redis URL or --http URL is required"},
		{[]string{"--redis", "redis://127.0.0.1:1", "--http", "http://127.0.0.1:1", "--limiter", "x"}, "--redis and --http exclude each other"},
		{append(r, "--limiter", "has space"), "--limiter"},
		{r, "--limiter NAME is required"},
		{append(r, "--limiter", "x", "--workers", "0"), "--workers must be from 1"},
		{append(r, "--limiter", "x", "--workers", "many"), "-workers"},
		{append(r, "--limiter", "x", "--duration", "0s"), "--duration must be > 0"},
		{append(r, "--limiter", "x", "--duration", "soon"), "-duration"},
		{append(r, "--limiter", "x", "--permits", "0"), "--permits must be ≥ 1"},
		{append(r, "--limiter", "x", "--permits", "5", "--duration", "1s"), "--duration and --permits exclude each other"},
		{append(r, "--limiter", "x", "--mode", "turbo"), "--mode must be pool, direct or http"},
		{append(r, "--limiter", "x", "--mode", "http"), "--mode http needs --http"},
		{[]string{"--http", "http://127.0.0.1:1", "--limiter", "x", "--mode", "pool"}, "--mode pool needs --redis"},
		{[]string{"--http", "ftp://h", "--limiter", "x"}, "--http"},
		{append(r, "--limiter", "x", "--create", "2000,x"), "--create: burst"},
		{append(r, "--limiter", "x", "--create", `{"rate":-1}`), "--create: rate"},
		{append(r, "--limiter", "x", "--create", `{"rate":5,"brust":2}`), `--create: invalid JSON config: json: unknown field "brust"`},
		{append(r, "--limiter", "x", "--create", ""), "--create: empty"},
		{append(r, "--limiter", "x", "--log", ""), "--log needs a file name"},
		{append(r, "--limiter", "x", "--frobnicate"), "-frobnicate"},
		{append(r, "--limiter", "x", "extra"), `unexpected argument "extra"`},
		{[]string{"--redis", "mongodb://h:1", "--limiter", "x"}, "--redis"},
	}
	for _, c := range cases {
		code, stdout, stderr := benchRun(context.Background(), c.args...)
		if code != 2 || !strings.Contains(stderr, c.want) || stdout != "" {
			t.Errorf("bench %q: exit %d, stderr %q, stdout %q; want exit 2 and %q", c.args, code, stderr, stdout, c.want)
		}
		if lines := strings.Count(stderr, "\n"); lines != 2 {
			t.Errorf("bench %q: %d lines on stderr, want the error and a pointer to the help:\n%s", c.args, lines, stderr)
		}
	}
}

func TestBenchHelp(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"--redis", "x", "--help"}} {
		code, stdout, _ := benchRun(context.Background(), args...)
		if code != 0 || !strings.HasPrefix(stdout, "usage: limitd bench") {
			t.Errorf("bench %q: exit %d, stdout %.40q", args, code, stdout)
		}
	}
	if !strings.Contains(mainUsage(), "bench") {
		t.Error("limitd --help does not list bench")
	}
}

func TestBenchParseCreate(t *testing.T) {
	c, body, err := parseCreate(`  {"rate":2000,"burst":1}  `)
	if err != nil || c.Rate != 2000 || float64(*c.Burst) != 1 || string(body) != `{"rate":2000,"burst":1}` {
		t.Errorf("JSON: %+v %s %v", c, body, err)
	}
	c, body, err = parseCreate("12k,1.1")
	if err != nil || c.Spec != "12k,1.1" || string(body) != `{"spec":"12k,1.1"}` {
		t.Errorf("spec: %+v %s %v", c, body, err)
	}
	if n, _, _ := c.Normalize(); n.Rate != 12000 {
		t.Errorf("spec rate %v", n.Rate)
	}
	if _, _, err := parseCreate(`{"rate":5} {}`); err == nil {
		t.Error("two JSON objects accepted")
	}
}

// benchJSON decodes the --json output: exactly the contract's fields, one
// object, one line.
func benchJSON(t *testing.T, stdout string) bench.Result {
	t.Helper()
	if strings.Count(stdout, "\n") != 1 || !strings.HasSuffix(stdout, "}\n") {
		t.Fatalf("--json printed %q, want one line with one object", stdout)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(stdout), &raw); err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	want := []string{"errors", "lateness_ns", "mode", "permits", "rate", "remote_calls", "seconds", "target_rate", "workers"}
	if !slices.Equal(keys, want) {
		t.Fatalf("--json fields %v, want %v", keys, want)
	}
	var late map[string]int64
	if err := json.Unmarshal(raw["lateness_ns"], &late); err != nil || len(late) != 3 {
		t.Fatalf("lateness_ns %s: want {p50,p99,max} integers (%v)", raw["lateness_ns"], err)
	}
	for _, k := range []string{"p50", "p99", "max"} {
		if _, ok := late[k]; !ok {
			t.Fatalf("lateness_ns %s has no %s", raw["lateness_ns"], k)
		}
	}
	dec := json.NewDecoder(strings.NewReader(stdout))
	dec.DisallowUnknownFields()
	var r bench.Result
	if err := dec.Decode(&r); err != nil {
		t.Fatal(err)
	}
	return r
}

// benchLog reads a --log file: "<scheduled_ns> <start_ns>" a line.
func benchLog(t *testing.T, path string) [][2]int64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out [][2]int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		a, b, ok := strings.Cut(sc.Text(), " ")
		s, err1 := strconv.ParseInt(a, 10, 64)
		st, err2 := strconv.ParseInt(b, 10, 64)
		if !ok || err1 != nil || err2 != nil {
			t.Fatalf("log line %q", sc.Text())
		}
		out = append(out, [2]int64{s, st})
	}
	return out
}

// checkBenchLog checks a strict schedule's log: n permits, one slice apart by
// scheduled time, none starting before it was scheduled, times on the Redis
// clock (the local wall clock here, within a minute).
func checkBenchLog(t *testing.T, path string, n int64, slice int64) {
	t.Helper()
	lines := benchLog(t, path)
	if int64(len(lines)) != n {
		t.Fatalf("%d log lines, want %d", len(lines), n)
	}
	sched := make([]int64, len(lines))
	now := time.Now().UnixNano()
	for i, l := range lines {
		if l[1] < l[0] {
			t.Fatalf("permit starts at %d before its schedule %d", l[1], l[0])
		}
		if d := time.Duration(now - l[0]); d < 0 || d > time.Minute {
			t.Fatalf("scheduled time %d is %v from now: not Unix ns on the Redis clock", l[0], d)
		}
		sched[i] = l[0]
	}
	slices.Sort(sched)
	for i := 1; i < len(sched); i++ {
		if d := sched[i] - sched[i-1]; d != slice {
			t.Fatalf("sorted scheduled times %d apart, want one slice (%d)", d, slice)
		}
	}
}

// Every mode takes exactly --permits permits from one strict schedule, logs
// each one and reports the contract's JSON.
func TestBenchModes(t *testing.T) {
	srv := redistest.Server(t)
	st := store.New(srv.Client())
	ts := httptest.NewServer(api.New(api.Options{Service: core.New(st, core.Options{})}))
	t.Cleanup(ts.Close)
	redisURL := "redis://" + srv.Addr()
	const n, rate = 400, 20000
	for _, c := range []struct {
		mode string
		args []string
	}{
		{"pool", []string{"--redis", redisURL}},
		{"direct", []string{"--redis", redisURL, "--mode", "direct"}},
		{"http", []string{"--http", ts.URL}},
	} {
		t.Run(c.mode, func(t *testing.T) {
			logPath := filepath.Join(t.TempDir(), "permits.log")
			name := "bench-" + c.mode
			args := append(c.args, "--limiter", name, "--create", `{"rate":20000,"burst":1}`,
				"--workers", "3", "--permits", strconv.Itoa(n), "--log", logPath, "--json")
			code, stdout, stderr := benchRun(context.Background(), args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			if stderr != "" {
				t.Errorf("--json run wrote to stderr: %q", stderr)
			}
			r := benchJSON(t, stdout)
			if r.Mode != c.mode || r.Workers != 3 || r.Permits != n || r.TargetRate != rate || r.Errors != 0 {
				t.Errorf("summary %+v", r)
			}
			if r.Seconds <= 0 || math.Abs(r.Rate-float64(n)/r.Seconds) > 1e-6*r.Rate {
				t.Errorf("rate %v for %d permits in %v s", r.Rate, n, r.Seconds)
			}
			if r.Lateness.P50 > r.Lateness.P99 || r.Lateness.P99 > r.Lateness.Max {
				t.Errorf("lateness %+v out of order", r.Lateness)
			}
			switch c.mode {
			case "pool":
				if r.RemoteCalls < 1 || r.RemoteCalls >= n/2 {
					t.Errorf("pool mode: %d remote calls for %d permits", r.RemoteCalls, n)
				}
			default:
				if r.RemoteCalls != n {
					t.Errorf("%s mode: %d remote calls, want one per permit (%d)", c.mode, r.RemoteCalls, n)
				}
			}
			checkBenchLog(t, logPath, n, 1e9/rate)
			w, err := st.Wait(context.Background(), name)
			if err != nil {
				t.Fatal(err)
			}
			// Direct and HTTP take exactly n; a pool hands unused permits
			// back on exit, so the store counts what was used.
			if w.Permits < n {
				t.Errorf("store counts %d permits, the bench took %d", w.Permits, n)
			}
		})
	}
}

// Without --json: progress lines on stderr while it runs, a human summary on
// stdout; --create with a spec and a second process's identical --create
// change nothing (PUT is idempotent).
func TestBenchHumanOutputAndDuration(t *testing.T) {
	srv := redistest.Server(t)
	st := store.New(srv.Client())
	url := "redis://" + srv.Addr()
	args := []string{"--redis", url, "--limiter", "human", "--create", "1000,1", "--workers", "2", "--duration", "1500ms"}
	code, stdout, stderr := benchRun(context.Background(), args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"pool mode, 2 workers", "target 1000/s", "permits", "lateness", "remote calls", "errors"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("summary lacks %q:\n%s", want, stdout)
		}
	}
	if got := strings.Count(stderr, "limitd bench: "); got != 1 {
		t.Errorf("%d progress lines in 1.5 s, want 1:\n%s", got, stderr)
	}
	info, err := st.Get(context.Background(), "human")
	if err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := benchRun(context.Background(), append(args[:len(args)-2], "--permits", "10", "--json")...); code != 0 {
		t.Fatalf("second run: exit %d: %s", code, stderr)
	}
	if again, _ := st.Get(context.Background(), "human"); again.Version != info.Version {
		t.Errorf("the same --create moved the version from %d to %d", info.Version, again.Version)
	}
}

// SIGINT (the command's context ending) stops a run early; the summary is
// still printed and the run succeeds.
func TestBenchInterruptedStillSummarizes(t *testing.T) {
	srv := redistest.Server(t)
	logPath := filepath.Join(t.TempDir(), "p.log")
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	start := time.Now()
	code, stdout, stderr := benchRun(ctx, "--redis", "redis://"+srv.Addr(), "--limiter", "intr",
		"--create", "500,1", "--duration", "1h", "--json", "--log", logPath)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v to stop", d)
	}
	r := benchJSON(t, stdout)
	if r.Permits < 10 || r.Seconds > 2 {
		t.Errorf("summary %+v", r)
	}
	if lines := benchLog(t, logPath); int64(len(lines)) != r.Permits {
		t.Errorf("%d log lines for %d permits", len(lines), r.Permits)
	}
}

// A limiter that does not exist, or a Redis that does not answer, ends the
// bench at once with one clear line.
func TestBenchSetupErrors(t *testing.T) {
	srv := redistest.Server(t)
	code, _, stderr := benchRun(context.Background(), "--redis", "redis://"+srv.Addr(), "--limiter", "absent", "--permits", "1")
	if code != 1 || !strings.Contains(stderr, `limiter "absent" does not exist`) {
		t.Errorf("absent limiter: exit %d, %q", code, stderr)
	}
	gone := redistest.Server(t)
	addr := gone.Addr()
	gone.Stop()
	code, _, stderr = benchRun(context.Background(), "--redis", "redis://"+addr, "--limiter", "x", "--create", "10", "--permits", "1")
	if code != 1 || !strings.Contains(stderr, "--create") || !strings.Contains(stderr, "redis unavailable") {
		t.Errorf("Redis down: exit %d, %q", code, stderr)
	}
}

// With Redis gone mid-run, direct mode counts errors and keeps going, and
// the run still ends on time with a summary.
func TestBenchCountsErrorsAndGoesOn(t *testing.T) {
	srv := redistest.Server(t)
	st := store.New(srv.Client())
	if _, _, err := st.Put(context.Background(), "flaky", limiter.Config{Spec: "200,1"}); err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		srv.Stop()
	}()
	start := time.Now()
	code, stdout, stderr := benchRun(context.Background(), "--redis", "redis://"+srv.Addr(), "--limiter", "flaky",
		"--mode", "direct", "--duration", "1s", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("took %v for a 1 s run", d)
	}
	r := benchJSON(t, stdout)
	if r.Errors == 0 || r.Permits == 0 || !strings.Contains(stderr, "errors; the last:") {
		t.Errorf("summary %+v, stderr %q", r, stderr)
	}
}

// Two benches sharing one limiter: each summary says what all processes
// were granted meanwhile and its own part, so that half the target does not
// read as a failure.
func TestBenchSharedSummary(t *testing.T) {
	srv := redistest.Server(t)
	args := []string{"--redis", "redis://" + srv.Addr(), "--mode", "direct", "--limiter", "shared",
		"--workers", "2", "--duration", "1s"}
	st := store.New(srv.Client())
	if _, _, err := st.Put(context.Background(), "shared", limiter.Config{Rate: 400, Burst: limiter.B(1)}); err != nil {
		t.Fatal(err)
	}
	outs := make([]string, 2)
	done := make(chan int, 2)
	for i := range outs {
		go func() {
			code, stdout, stderr := benchRun(context.Background(), args...)
			outs[i] = stdout + stderr
			done <- code
		}()
	}
	for range outs {
		if code := <-done; code != 0 {
			t.Fatalf("exit %d: %q", code, outs)
		}
	}
	for _, out := range outs {
		if !strings.Contains(out, "all processes ") || !strings.Contains(out, "granted on the limiter meanwhile") ||
			!strings.Contains(out, "(shared)") {
			t.Errorf("a shared run's summary does not say so:\n%s", out)
		}
	}
}
