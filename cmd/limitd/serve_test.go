package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"go.uber.org/goleak"

	"github.com/limitd/limitd/internal/testkit/logtest"
)

// startServe runs serve in the background and returns its base URL, its logs
// and a function that stops it and returns serve's error.
func startServe(t *testing.T, env map[string]string) (base string, logs *logtest.Buffer, stop func() error) {
	t.Helper()
	if env["LIMITD_ADDR"] == "" {
		env["LIMITD_ADDR"] = "127.0.0.1:0"
	}
	logs = &logtest.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan net.Addr, 1)
	errc := make(chan error, 1)
	go func() { errc <- serve(ctx, env, logs, func(a net.Addr) { addrc <- a }, nil) }()
	select {
	case a := <-addrc:
		base = "http://" + a.String()
	case err := <-errc:
		cancel()
		t.Fatalf("serve: %v\n%s", err, logs)
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatalf("serve did not start:\n%s", logs)
	}
	stopped := false
	stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		select {
		case err := <-errc:
			return err
		case <-time.After(15 * time.Second):
			t.Fatalf("serve did not stop:\n%s", logs)
			return nil
		}
	}
	t.Cleanup(func() { stop() })
	return base, logs, stop
}

// get returns the status of GET url; the client keeps no idle connections, so
// that goleak sees no transport goroutines.
func get(t *testing.T, url string) int {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func waitStatus(t *testing.T, url string, want int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got := get(t, url)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s = %d, want %d within %v", url, got, want, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// With no LIMITD_REDIS_URL, serve runs on an embedded Redis, says so loudly,
// applies the boot file, and stops every goroutine it started on shutdown.
func TestServeEmbedded(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	base, logs, stop := startServe(t, map[string]string{"LIMITD_CONFIG": writeFile(t, "boot.yaml", exampleBoot)})
	if got := get(t, base+"/healthz"); got != http.StatusOK {
		t.Errorf("/healthz = %d", got)
	}
	if got := get(t, base+"/readyz"); got != http.StatusOK {
		t.Errorf("/readyz = %d", got)
	}
	if got := get(t, base+"/v1/limiters/orders"); got != http.StatusOK {
		t.Errorf("GET the boot file's limiter = %d, want 200", got)
	}
	if err := stop(); err != nil {
		t.Fatalf("serve returned %v", err)
	}
	l := logs.String()
	for _, want := range []string{"level=WARN msg=\"LIMITD_REDIS_URL is empty: using an EMBEDDED IN-MEMORY Redis", "applied the boot file", "limitd serving", "stopped"} {
		if !strings.Contains(l, want) {
			t.Errorf("logs lack %q:\n%s", want, l)
		}
	}
}

// Redis down at boot is not fatal: limitd serves (not ready) and applies the
// boot file once Redis answers.
func TestServeRedisDownAtBoot(t *testing.T) {
	mini := miniredis.RunT(t)
	addr := mini.Addr()
	mini.Close()
	base, logs, stop := startServe(t, map[string]string{
		"LIMITD_REDIS_URL": "redis://" + addr, "LIMITD_CONFIG": writeFile(t, "boot.yaml", exampleBoot),
		"LIMITD_LOG_FORMAT": "json",
	})
	waitStatus(t, base+"/readyz", http.StatusServiceUnavailable, 5*time.Second)
	if err := mini.Restart(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !mini.Exists("limitd:boot") {
		if time.Now().After(deadline) {
			t.Fatalf("boot file not applied after Redis came back:\n%s", logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitStatus(t, base+"/readyz", http.StatusOK, 5*time.Second)
	// The keeper says Redis is back at the end of the check that applied the
	// file; stopping before that check ends would cut it short.
	for !strings.Contains(logs.String(), `"msg":"redis is back; the boot configuration is in place"`) {
		if time.Now().After(deadline) {
			break // the check below says what is missing
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	l := logs.String()
	if !strings.Contains(l, `"msg":"could not apply the boot file; it will be applied once Redis answers"`) ||
		!strings.Contains(l, `"msg":"redis is back; the boot configuration is in place"`) ||
		!strings.Contains(l, `"msg":"applied the boot file"`) || strings.Contains(l, "redis lost") {
		t.Errorf("logs:\n%s", l)
	}
}

// The access log is off by default; LIMITD_ACCESS_LOG=all logs every
// request but the probes; the startup line stays.
func TestServeAccessLog(t *testing.T) {
	for _, tc := range []struct {
		env    map[string]string
		logged bool
	}{{map[string]string{}, false}, {map[string]string{"LIMITD_ACCESS_LOG": "all"}, true}} {
		base, logs, stop := startServe(t, tc.env)
		get(t, base+"/healthz")
		get(t, base+"/readyz")
		if got := get(t, base+"/v1/limiters/missing"); got != http.StatusNotFound {
			t.Errorf("GET a missing limiter = %d", got)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		l := logs.String()
		if !strings.Contains(l, "limitd serving") || strings.Contains(l, "/healthz") || strings.Contains(l, "/readyz") ||
			strings.Contains(l, `msg="http request"`) != tc.logged ||
			tc.logged && !strings.Contains(l, `route=/v1/limiters/{name} path=/v1/limiters/missing status=404`) {
			t.Errorf("%v: logs:\n%s", tc.env, l)
		}
	}
}

func TestServeAddrInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	err = serve(context.Background(), map[string]string{"LIMITD_ADDR": ln.Addr().String()}, io.Discard, nil, nil)
	if err == nil || !strings.HasPrefix(err.Error(), "LIMITD_ADDR: listen tcp "+ln.Addr().String()) {
		t.Errorf("err = %v", err)
	}
}

// The startup line names the Redis as store.RedactURL writes it (store's
// TestRedactURL holds the cases of what it hides), or says it is embedded.
func TestRedisTargetHidesPassword(t *testing.T) {
	for in, want := range map[string]string{
		"":                         "embedded: not shared between processes",
		"redis://:s3cret@r:6379/0": "redis://:xxxxx@r:6379/0",
	} {
		if got := redisTarget(in); got != want {
			t.Errorf("redisTarget(%q) = %q, want %q", in, got, want)
		}
	}
}

// The startup line shows whatever LIMITD_LOG_LEVEL is; the rest of the info
// lines (shutting down, stopped) follow the level.
func TestServeStartupLineAlwaysShown(t *testing.T) {
	for _, level := range []string{"warn", "error"} {
		_, logs, stop := startServe(t, map[string]string{"LIMITD_LOG_LEVEL": level})
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		l := logs.String()
		if !strings.Contains(l, `msg="limitd serving"`) || strings.Contains(l, `msg=stopped`) {
			t.Errorf("LIMITD_LOG_LEVEL=%s: logs:\n%s", level, l)
		}
	}
}

// Redis unreachable from the start: said once at the start, and the 503s
// that follow are logged once, not per request.
func TestServeRedisDownSaidOnce(t *testing.T) {
	mini := miniredis.RunT(t)
	addr := mini.Addr()
	mini.Close()
	base, logs, stop := startServe(t, map[string]string{"LIMITD_REDIS_URL": "redis://" + addr})
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	start := time.Now()
	for range 20 {
		resp, err := c.Post(base+"/v1/limiters/x/acquire", "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("acquire with Redis down = %d, want 503", resp.StatusCode)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// A line per 10 s window of failures: one, unless the machine took longer.
	most := 1 + int(time.Since(start)/(10*time.Second))
	l := logs.String()
	if n := strings.Count(l, `msg="request failed"`); strings.Count(l, "redis unavailable at start") != 1 || n < 1 || n > most {
		t.Errorf("logs of 20 requests while Redis is down (at most %d failure lines):\n%s", most, l)
	}
}

// LIMITD_SHADOW_MODE=true: every limiter lets its refusals through, and the
// log says so at the start.
func TestServeShadowMode(t *testing.T) {
	boot := writeFile(t, "boot.yaml", "limiters:\n  strict: {rate: 0.001, burst: 1}\n")
	base, logs, _ := startServe(t, map[string]string{"LIMITD_CONFIG": boot, "LIMITD_SHADOW_MODE": "true"})
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for i := range 2 {
		resp, err := c.Post(base+"/v1/limiters/strict/acquire", "application/json", strings.NewReader(`{"max_wait":"0s"}`))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || strings.Contains(string(b), `"shadow":true`) != (i == 1) {
			t.Errorf("acquire %d: %d %s", i, resp.StatusCode, b)
		}
	}
	if !strings.Contains(logs.String(), "LIMITD_SHADOW_MODE=true") {
		t.Errorf("no shadow mode warning:\n%s", logs)
	}
}

// A boot file is validated whole before anything is written.
func TestBootFileNothingHalfApplied(t *testing.T) {
	mini := miniredis.RunT(t)
	src := "limiters:\n  a: {rate: 10}\n  b: {rate: 10}\n  z: {rate: -1}\n"
	path := writeFile(t, "boot.yaml", src)
	err := serve(context.Background(), map[string]string{
		"LIMITD_ADDR": "127.0.0.1:0", "LIMITD_REDIS_URL": "redis://" + mini.Addr(), "LIMITD_CONFIG": path,
	}, &logtest.Buffer{}, nil, nil)
	if err == nil || !strings.HasPrefix(err.Error(), "LIMITD_CONFIG: "+path+": line 4: limiters.z.rate:") {
		t.Fatalf("err = %v", err)
	}
	if keys := mini.Keys(); len(keys) != 0 {
		t.Errorf("a bad boot file wrote %v", keys)
	}
}

// exampleBoot is the boot file of limitd help serve, as internal/boot's
// tests parse it.
var exampleBoot = func() string {
	b, err := os.ReadFile(filepath.Join(moduleRoot, "internal", "boot", "testdata", "example.yaml"))
	if err != nil {
		panic(err)
	}
	return string(b)
}()
