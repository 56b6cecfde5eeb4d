//go:build linux

package integration

// `limitd serve` as an operator runs it: the real binary, configured only by
// its environment, over a real redis-server, driven over plain HTTP. What is
// checked is what a user relies on: the boot file's limiters exist, they pace
// as docs/reliability.md says, a Redis restart without persistence loses no
// configuration and needs no restart of limitd, and SIGTERM stops it cleanly.
// Every name here starts with sv so that other tests of the package cannot
// clash with it.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/limitd/limitd/internal/testkit/redistest"
)

// TestMain removes the binary svBinary built once for the whole package.
func TestMain(m *testing.M) {
	code := m.Run()
	if svBin.dir != "" {
		os.RemoveAll(svBin.dir)
	}
	os.Exit(code)
}

var svBin struct {
	once      sync.Once
	dir, path string
	err       error
}

// svModuleRoot is the directory of the module's go.mod.
func svModuleRoot(t testing.TB) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	gomod := strings.TrimSpace(string(out))
	if err != nil || gomod == "" || gomod == os.DevNull {
		t.Fatalf("go env GOMOD: %q, %v", gomod, err)
	}
	return filepath.Dir(gomod)
}

// svBinary builds cmd/limitd once per test run and returns its path.
func svBinary(t testing.TB) string {
	t.Helper()
	root := svModuleRoot(t)
	svBin.once.Do(func() {
		if svBin.dir, svBin.err = os.MkdirTemp("", "limitd-integration-"); svBin.err != nil {
			return
		}
		svBin.path = filepath.Join(svBin.dir, "limitd")
		cmd := exec.Command("go", "build", "-o", svBin.path, "./cmd/limitd")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			svBin.err = fmt.Errorf("go build ./cmd/limitd: %v\n%s", err, out)
		}
	})
	if svBin.err != nil {
		t.Fatal(svBin.err)
	}
	return svBin.path
}

// svLog collects a process's stderr; the process writes while the test reads.
// It keeps the first svLogCap bytes and drops the rest, counting them: a
// benchmark of a limitd that logs every request would fill memory.
type svLog struct {
	mu      sync.Mutex
	b       bytes.Buffer
	dropped int
}

const svLogCap = 8 << 20

func (l *svLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(p)
	if keep := max(svLogCap-l.b.Len(), 0); n > keep {
		l.dropped += n - keep
		p = p[:keep]
	}
	l.b.Write(p)
	return n, nil
}

func (l *svLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dropped > 0 {
		return l.b.String() + fmt.Sprintf("\n[%d more bytes not kept]\n", l.dropped)
	}
	return l.b.String()
}

// svProc is one limitd OS process.
type svProc struct {
	t      testing.TB
	cmd    *exec.Cmd
	base   string // http://127.0.0.1:port
	stderr *svLog
	done   chan struct{} // closed when the process has exited
	err    error         // of Wait, once done
}

// svRun starts limitd with exactly env as its environment (nothing of the
// test's own environment leaks in) and returns at once.
func svRun(t testing.TB, env map[string]string, args ...string) *svProc {
	t.Helper()
	return svRunBin(t, svBinary(t), env, args...)
}

// svRunBin is svRun of the limitd binary at bin.
func svRunBin(t testing.TB, bin string, env map[string]string, args ...string) *svProc {
	t.Helper()
	p := &svProc{t: t, stderr: &svLog{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = []string{}
	for k, v := range env {
		p.cmd.Env = append(p.cmd.Env, k+"="+v)
	}
	p.cmd.Stdout, p.cmd.Stderr = p.stderr, p.stderr
	// If the test binary dies without its cleanups, take limitd with it.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("limitd output:\n%s", p.stderr)
		}
	})
	return p
}

// svServe starts limitd serve on a free port with env and waits until
// /healthz answers.
func svServe(t testing.TB, env map[string]string) *svProc {
	t.Helper()
	return svServeBin(t, svBinary(t), env)
}

// svServeBin is svServe of the limitd binary at bin.
func svServeBin(t testing.TB, bin string, env map[string]string) *svProc {
	t.Helper()
	port := redistest.FreePort(t)
	env["LIMITD_ADDR"] = "127.0.0.1:" + strconv.Itoa(port)
	p := svRunBin(t, bin, env)
	p.base = "http://" + env["LIMITD_ADDR"]
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-p.done:
			t.Fatalf("limitd exited during start-up (%v):\n%s", p.err, p.stderr)
		default:
		}
		if resp, err := http.Get(p.base + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("limitd did not answer /healthz within 10s:\n%s", p.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// wait waits up to limit for the process to exit and returns its exit code.
func (p *svProc) wait(limit time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(limit):
		p.t.Fatalf("limitd still running %v later:\n%s", limit, p.stderr)
		return -1
	}
}

var svClient = &http.Client{Timeout: 10 * time.Second}

// do sends a request with an optional JSON body and bearer token, and returns
// the status and the body.
func (p *svProc) do(method, path, token, body string) (int, []byte) {
	p.t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, p.base+path, r)
	if err != nil {
		p.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := svClient.Do(req)
	if err != nil {
		p.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// json sends a request that must answer want, and decodes the body into out.
func (p *svProc) json(method, path, token, body string, want int, out any) {
	p.t.Helper()
	code, b := p.do(method, path, token, body)
	if code != want {
		p.t.Fatalf("%s %s = %d %s, want %d", method, path, code, b, want)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			p.t.Fatalf("%s %s: %v in %s", method, path, err, b)
		}
	}
}

// eventually polls f every 50ms until it returns "" or limit passes.
func svEventually(t *testing.T, limit time.Duration, f func() string) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		msg := f()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", limit, msg)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type svAcquire struct {
	Granted bool  `json:"granted"`
	Delay   int64 `json:"delay_ns"`
	Wait    int64 `json:"wait_ns"`
	Now     int64 `json:"now_ns"`
	Version int64 `json:"version"`
}

type svWait struct {
	Wait      int64 `json:"wait_ns"`
	Delay     int64 `json:"delay_ns"`
	Allocated int64 `json:"allocated_ns"`
	Now       int64 `json:"now_ns"`
	Version   int64 `json:"version"`
}

type svView struct {
	Config struct {
		Rate float64 `json:"rate"`
	} `json:"config"`
	Version int64 `json:"version"`
	State   *struct {
		Permits   int64 `json:"permits"`
		Allocated int64 `json:"allocated_ns"`
	} `json:"state"`
}

const svAdmin = "admin-secret"

const svBoot = `limiters:
  paced: {kind: smooth, rate: 5, max_burst_seconds: 0}
  orders: {rate: 100, burst: 1}
templates:
  per-user: {pattern: "user:*", order: 10, idle_ttl: 10m, limiter: {rate: 50}}
`

func TestServe(t *testing.T) {
	redis := redistest.Server(t)
	bootPath := filepath.Join(t.TempDir(), "limitd.yaml")
	if err := os.WriteFile(bootPath, []byte(svBoot), 0o644); err != nil {
		t.Fatal(err)
	}
	p := svServe(t, map[string]string{
		"LIMITD_REDIS_URL":   "redis://" + redis.Addr(),
		"LIMITD_CONFIG":      bootPath,
		"LIMITD_ADMIN_TOKEN": svAdmin,
		"LIMITD_PREFIX":      "it",
	})
	if code, _ := p.do("GET", "/readyz", "", ""); code != http.StatusOK {
		t.Fatalf("/readyz = %d", code)
	}

	t.Run("smooth rate 5 spaces immediate acquires 0.2s apart", func(t *testing.T) {
		var a [3]svAcquire
		for i := range a {
			p.json("POST", "/v1/limiters/paced/acquire", "", `{}`, http.StatusOK, &a[i])
		}
		for i, want := range []time.Duration{0, 200 * time.Millisecond, 400 * time.Millisecond} {
			// Each caller waits for those before it, less the time that
			// passed since the first one (Redis clock): exact up to Redis
			// TIME's microsecond, and a few ms from the ideal on loopback.
			exact := int64(want) - (a[i].Now - a[0].Now)
			if d := a[i].Delay - exact; !a[i].Granted || d < -int64(time.Microsecond) || d > int64(time.Microsecond) {
				t.Errorf("acquire %d: %+v, want delay %v (%v minus the time since the first)", i, a[i], time.Duration(exact), want)
			}
			if d := time.Duration(a[i].Delay) - want; d > time.Millisecond || d < -20*time.Millisecond {
				t.Errorf("acquire %d: delay %v, want %v (−20ms…+1ms)", i, time.Duration(a[i].Delay), want)
			}
		}
	})

	var before svWait
	t.Run("schedule backlog visible in wait", func(t *testing.T) {
		p.json("POST", "/v1/limiters/orders/acquire", "", `{"permits":1}`, http.StatusOK, nil)
		time.Sleep(300 * time.Millisecond)
		p.json("GET", "/v1/limiters/orders/wait", "", "", http.StatusOK, &before)
		// Nobody claimed the 300ms of schedule after the first 10ms slice.
		if before.Wait < int64(250*time.Millisecond) || before.Delay != 0 {
			t.Errorf("after 300ms idle: %+v, want wait_ns ≥ 250ms and delay_ns 0", before)
		}
	})

	t.Run("PATCH keeps state and bumps the version", func(t *testing.T) {
		var v0, v1 svView
		p.json("GET", "/v1/limiters/orders", "", "", http.StatusOK, &v0)
		if code, body := p.do("PATCH", "/v1/limiters/orders", "", `{"rate":200}`); code != http.StatusUnauthorized {
			t.Errorf("PATCH without the admin token = %d %s, want 401", code, body)
		}
		p.json("PATCH", "/v1/limiters/orders", svAdmin, `{"rate":200}`, http.StatusOK, &v1)
		if v1.Version != v0.Version+1 || v1.Config.Rate != 200 {
			t.Errorf("PATCH: version %d → %d, rate %v; want version +1 and rate 200", v0.Version, v1.Version, v1.Config.Rate)
		}
		var after svWait
		p.json("GET", "/v1/limiters/orders/wait", "", "", http.StatusOK, &after)
		if after.Version != v1.Version || after.Allocated != before.Allocated || after.Wait < before.Wait {
			t.Errorf("state not kept across PATCH: before %+v, after %+v", before, after)
		}
	})

	t.Run("reset zeroes the backlog", func(t *testing.T) {
		if code, _ := p.do("POST", "/v1/limiters/orders/reset", "", ""); code != http.StatusUnauthorized {
			t.Errorf("reset without the admin token = %d, want 401", code)
		}
		p.json("POST", "/v1/limiters/orders/reset", svAdmin, "", http.StatusOK, nil)
		var w svWait
		p.json("GET", "/v1/limiters/orders/wait", "", "", http.StatusOK, &w)
		if w.Wait > int64(50*time.Millisecond) {
			t.Errorf("after reset: %+v, want wait_ns ≈ 0", w)
		}
		var v svView
		p.json("GET", "/v1/limiters/orders", "", "", http.StatusOK, &v)
		if v.State == nil || v.State.Permits != 1 {
			t.Errorf("after reset: state %+v, want the permit total kept (1)", v.State)
		}
	})

	t.Run("delete", func(t *testing.T) {
		p.json("DELETE", "/v1/limiters/orders", svAdmin, "", http.StatusNoContent, nil)
		p.json("GET", "/v1/limiters/orders", "", "", http.StatusNotFound, nil)
		p.json("POST", "/v1/limiters/orders/acquire", "", `{}`, http.StatusNotFound, nil)
	})

	t.Run("redis down: not ready, acquire 503", func(t *testing.T) {
		redis.Stop()
		svEventually(t, 5*time.Second, func() string {
			if code, _ := p.do("GET", "/readyz", "", ""); code != http.StatusServiceUnavailable {
				return fmt.Sprintf("/readyz = %d, want 503", code)
			}
			return ""
		})
		code, body := p.do("POST", "/v1/limiters/paced/acquire", "", `{}`)
		if code != http.StatusServiceUnavailable {
			t.Errorf("acquire with Redis down = %d %s, want 503", code, body)
		}
		if code, _ := p.do("GET", "/healthz", "", ""); code != http.StatusOK {
			t.Errorf("/healthz with Redis down = %d, want 200 (the process runs)", code)
		}
	})

	t.Run("redis back empty: boot file re-applied, no restart of limitd", func(t *testing.T) {
		redis.Restart() // same port, empty dataset
		svEventually(t, 5*time.Second, func() string {
			// Ready again only once the boot file is applied again (its
			// marker written after every limiter of it).
			if code, body := p.do("GET", "/readyz", "", ""); code != http.StatusOK {
				return fmt.Sprintf("/readyz = %d %s", code, body)
			}
			code, body := p.do("GET", "/v1/limiters/orders", "", "")
			if code != http.StatusOK {
				return fmt.Sprintf("GET the boot file's limiter = %d %s", code, body)
			}
			return ""
		})
		var a svAcquire
		p.json("POST", "/v1/limiters/paced/acquire", "", `{}`, http.StatusOK, &a)
		// A fresh limiter, which grants at once, unless limitd's floor still
		// holds it to what was granted before the loss (3 permits at 5/s:
		// the schedule's end at most 0.6 s after the first of them).
		if !a.Granted || a.Delay < 0 || a.Delay > int64(600*time.Millisecond) {
			t.Errorf("first acquire after the restart: %+v, want granted within the 0.6 s granted before the loss", a)
		}
		p.json("GET", "/v1/templates/per-user", "", "", http.StatusOK, nil)
		p.json("POST", "/v1/limiters/user:42/acquire", "", `{}`, http.StatusOK, nil)
		p.json("GET", "/readyz", "", "", http.StatusOK, nil)
		if !strings.Contains(p.stderr.String(), "applied it again") {
			t.Errorf("the re-apply was not logged:\n%s", p.stderr)
		}
		select {
		case <-p.done:
			t.Fatalf("limitd exited: %v", p.err)
		default:
		}
	})

	t.Run("SIGTERM exits 0 promptly", func(t *testing.T) {
		start := time.Now()
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code := p.wait(5 * time.Second); code != 0 {
			t.Errorf("exit code %d after SIGTERM, want 0:\n%s", code, p.stderr)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("took %v to stop", d)
		}
		if !strings.Contains(p.stderr.String(), "msg=stopped") {
			t.Errorf("no clean stop logged:\n%s", p.stderr)
		}
	})
}

// Without LIMITD_REDIS_URL limitd runs on an embedded Redis, says so loudly,
// and serves; here with the docker-compose demo's boot file and a read token.
func TestServeEmbedded(t *testing.T) {
	p := svServe(t, map[string]string{
		"LIMITD_CONFIG":     filepath.Join(svModuleRoot(t), "deploy", "limitd.yaml"),
		"LIMITD_TOKEN":      "reader",
		"LIMITD_LOG_FORMAT": "json",
	})
	if code, _ := p.do("GET", "/readyz", "", ""); code != http.StatusOK {
		t.Errorf("/readyz = %d, want 200", code)
	}
	if code, _ := p.do("GET", "/v1/limiters/demo", "", ""); code != http.StatusUnauthorized {
		t.Errorf("GET without LIMITD_TOKEN = %d, want 401", code)
	}
	var v svView
	p.json("GET", "/v1/limiters/demo", "reader", "", http.StatusOK, &v)
	if v.Config.Rate != 500 {
		t.Errorf("demo limiter of deploy/limitd.yaml: %+v", v)
	}
	if !strings.Contains(p.stderr.String(), `"level":"WARN","msg":"LIMITD_REDIS_URL is empty: using an EMBEDDED IN-MEMORY Redis`) {
		t.Errorf("no loud warning about the embedded Redis:\n%s", p.stderr)
	}
	p.cmd.Process.Signal(syscall.SIGINT)
	if code := p.wait(5 * time.Second); code != 0 {
		t.Errorf("exit code %d after SIGINT, want 0", code)
	}
}

// limitd serve runs its collector at GOGC 400 unless the environment sets
// GOGC, which then wins; /metrics shows which (go_gc_gogc_percent).
func TestServeGOGC(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want string
	}{{map[string]string{}, "go_gc_gogc_percent 400\n"}, {map[string]string{"GOGC": "150"}, "go_gc_gogc_percent 150\n"}} {
		p := svServe(t, c.env) // the embedded Redis
		code, body := p.do("GET", "/metrics", "", "")
		if code != http.StatusOK || !strings.Contains(string(body), c.want) {
			i := strings.Index(string(body), "go_gc_gogc_percent ")
			t.Errorf("GOGC in the environment: %q: /metrics = %d, want %q, has %q", c.env["GOGC"], code, c.want,
				string(body[max(i, 0):min(max(i, 0)+40, len(body))]))
		}
	}
}

// Bad configuration: a non-zero exit at once and one line on stderr naming
// the variable.
func TestServeBadConfig(t *testing.T) {
	dir := t.TempDir()
	badBoot := filepath.Join(dir, "bad.yaml")
	os.WriteFile(badBoot, []byte("limiters:\n  orders:\n    rate: 10\n    brust: 2\n"), 0o644)
	free := "127.0.0.1:" + strconv.Itoa(redistest.FreePort(t))
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"LIMITD_LOG_LEVEL": "loud"}, `limitd: LIMITD_LOG_LEVEL: must be one of debug, info, warn, error (got "loud")`},
		{map[string]string{"LIMITD_REDIS_URL": "http://example:6379"}, `limitd: LIMITD_REDIS_URL: `},
		{map[string]string{"LIMITD_CONFIG": badBoot}, `limitd: LIMITD_CONFIG: ` + badBoot + `: line 4: unknown field "brust"`},
		{map[string]string{"LIMITD_ADDR": "0.0.0.0:" + strings.Split(free, ":")[1]}, "limitd: LIMITD_ADDR: "},
	} {
		if _, ok := tc.env["LIMITD_ADDR"]; !ok {
			tc.env["LIMITD_ADDR"] = free
		}
		p := svRun(t, tc.env)
		code := p.wait(5 * time.Second)
		out := p.stderr.String()
		if code == 0 || !strings.HasPrefix(out, tc.want) || strings.Count(out, "\n") != 1 {
			t.Errorf("%v: exit %d, output %q; want a non-zero exit and one line starting %q", tc.env, code, out, tc.want)
		}
	}
}

// docker-compose.yml must be valid for docker-compose itself.
func TestDockerComposeConfig(t *testing.T) {
	bin, err := exec.LookPath("docker-compose")
	if err != nil {
		t.Skip("docker-compose not installed (apt-get install -y docker-compose): docker-compose.yml not validated")
	}
	cmd := exec.Command(bin, "-f", "docker-compose.yml", "config", "-q")
	cmd.Dir = svModuleRoot(t)
	cmd.Env = append(os.Environ(), "LIMITD_ADMIN_TOKEN=") // the file's default must do
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("docker-compose config -q: %v\n%s", err, out)
	}
}
