package main

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/limitd/limitd/wire"
)

// A Redis setting limitd serve does not read, with LIMITD_REDIS_URL empty,
// stops the start with exit 1 and one line naming the fix: otherwise each
// process would run on an embedded Redis of its own.
func TestServeRefusesPrivateRedis(t *testing.T) {
	for _, tc := range []struct{ key, val, want string }{
		{"LIMITD_REDIS", "redis://r:6379", "limitd: LIMITD_REDIS: not a variable limitd reads, and LIMITD_REDIS_URL is empty: limitd would run on an embedded Redis no other process shares; set LIMITD_REDIS_URL=redis://host:port instead\n"},
		{"LIMITD_REDISURL", "redis://r:6379", "limitd: LIMITD_REDISURL: not a variable limitd reads, and LIMITD_REDIS_URL is empty"},
		{"LIMITD_REDIS_ADDR", "r:6379", "limitd: LIMITD_REDIS_ADDR: not a variable limitd reads, and LIMITD_REDIS_URL is empty"},
		{"LIMITD_REDIS_URI", "redis://r:6379", "limitd: LIMITD_REDIS_URI: not a variable limitd reads, and LIMITD_REDIS_URL is empty"},
		{"REDIS_URL", "r:6379", "limitd: REDIS_URL: the reference server's variable, which limitd serve does not read, and LIMITD_REDIS_URL is empty: limitd would run on an embedded Redis no other process shares; set LIMITD_REDIS_URL=redis://host:port, or run limitd ratelimit, which reads REDIS_URL\n"},
		{"REDIS_SOCKET_TYPE", "tcp", "limitd: REDIS_SOCKET_TYPE: the reference server's variable"},
		{"REDIS_AUTH", "pw", "limitd: REDIS_AUTH: the reference server's variable"},
	} {
		t.Run(tc.key, func(t *testing.T) {
			t.Setenv("LIMITD_ADDR", "127.0.0.1:0")
			t.Setenv(tc.key, tc.val)
			code, out, errOut := runCmd(t)
			if code != 1 || out != "" || !strings.HasPrefix(errOut, tc.want) || strings.Count(errOut, "\n") != 1 {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit 1 and one line starting %q", code, out, errOut, tc.want)
			}
		})
	}
}

// limitd ratelimit without REDIS_URL stops as the reference does (it has no
// embedded Redis), with one line naming the variable; with REDIS_URL it
// serves from that Redis, and says so.
func TestRatelimitNeedsRedisURL(t *testing.T) {
	t.Setenv("RUNTIME_ROOT", t.TempDir())
	for _, k := range []string{"HOST", "DEBUG_HOST", "GRPC_HOST"} {
		t.Setenv(k, "127.0.0.1")
	}
	for _, k := range []string{"PORT", "DEBUG_PORT", "GRPC_PORT"} {
		t.Setenv(k, "0")
	}
	code, out, errOut := runCmd(t, "ratelimit")
	want := "limitd: REDIS_URL: not set: limitd ratelimit counts in a Redis every replica shares (the reference would dial /var/run/nutcracker/ratelimit.sock and stop); set REDIS_URL=host:port\n"
	if code != 1 || out != "" || errOut != want {
		t.Errorf("without REDIS_URL: exit %d, stdout %q, stderr %q; want exit 1 and %q", code, out, errOut, want)
	}

	mini := miniredis.RunT(t)
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "config"), 0o755); err != nil {
		t.Fatal(err)
	}
	logs, _ := startRatelimit(t, map[string]string{"REDIS_URL": mini.Addr(), "RUNTIME_ROOT": root})
	line := startLine(t, logs.String())
	if !strings.Contains(line, "redis=redis://"+mini.Addr()) || strings.Contains(line, "embedded") {
		t.Errorf("with REDIS_URL, start line %q: want redis=redis://%s", line, mini.Addr())
	}
}

// startLine is the "limitd serving" line of logs.
func startLine(t *testing.T, logs string) string {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(logs))
	for sc.Scan() {
		if strings.Contains(sc.Text(), `msg="limitd serving"`) {
			return sc.Text()
		}
	}
	t.Fatalf("no start line in:\n%s", logs)
	return ""
}

// On the embedded Redis, the start line, /readyz and the event status say
// "embedded: not shared between processes" in their words.
func TestServeEmbeddedMarked(t *testing.T) {
	base, logs, stop := startServe(t, map[string]string{})
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("serve returned %v", err)
		}
	}()
	if line := startLine(t, logs.String()); !strings.Contains(line, `redis="embedded: not shared between processes"`) {
		t.Errorf("start line %q, want redis=\"embedded: not shared between processes\"", line)
	}
	var ready struct{ Status, Redis string }
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&ready)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || ready != (struct{ Status, Redis string }{"ready", "embedded"}) {
		t.Errorf("/readyz: %d %+v %v, want 200 ready, redis embedded", resp.StatusCode, ready, err)
	}
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err = c.Get(base + "/v1/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	var event string
	for sc.Scan() {
		l := sc.Text()
		if v, ok := strings.CutPrefix(l, "event: "); ok {
			event = v
		}
		if v, ok := strings.CutPrefix(l, "data: "); ok && event == "status" {
			var st struct{ Redis string }
			if err := json.Unmarshal([]byte(v), &st); err != nil || st.Redis != "embedded" {
				t.Errorf("status event %s, want redis embedded", v)
			}
			return
		}
	}
	t.Errorf("no status event: %v", sc.Err())
}

// limitd ctl templates names a described template (an Envoy rule) by its
// description first, its id beside.
func TestFormatTemplatesNamed(t *testing.T) {
	var ts []wire.TemplateListed
	if err := json.Unmarshal([]byte(`[{"id":"envoy.mongo-cps.caba97696b0e","pattern":"envoy.mongo-cps.caba97696b0e:*","order":1000,
		"limiter":{"kind":"window","limit":500,"period":"1s"},"version":1,"description":"mongo_cps.database_users"},
		{"id":"user","pattern":"user:*","order":10,"limiter":{"kind":"schedule","rate":5},"version":2}]`), &ts); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(formatTemplates(ts), "\n")
	if len(lines) < 3 || !strings.HasPrefix(lines[0], "NAME ") || !strings.HasPrefix(lines[1], "mongo_cps.database_users  envoy.mongo-cps.caba97696b0e ") ||
		!strings.HasPrefix(lines[2], "user ") {
		t.Errorf("templates:\n%s", strings.Join(lines, "\n"))
	}
}
