package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/limitd/limitd/api"
)

func TestPutGetLimiter(t *testing.T) {
	e := newEnv(t)
	r := e.must(201, "PUT", "/v1/limiters/orders", `{"kind":"schedule","rate":1000,"burst":1.1,"max_backlog":"10s"}`)
	if got := r.header.Get("Location"); got != "/v1/limiters/orders" {
		t.Errorf("Location = %q", got)
	}
	var v struct {
		Name    string          `json:"name"`
		Config  json.RawMessage `json:"config"`
		Version int64           `json:"version"`
		State   map[string]any  `json:"state"`
	}
	r.decode(t, &v)
	if v.Name != "orders" || v.Version != 1 || string(v.Config) != `{"kind":"schedule","rate":1000,"burst":1.1,"max_backlog":"10s"}` {
		t.Errorf("view = %s", r.body)
	}
	if v.State["started"] != false || v.State["now_ns"] != float64(t0.UnixNano()) {
		t.Errorf("state = %v", v.State)
	}

	// The same config again changes nothing: 200, same version.
	r = e.must(200, "PUT", "/v1/limiters/orders", `{"kind":"schedule","rate":1000,"burst":1.1,"max_backlog":"10s"}`)
	if got := r.num(t, "version"); got != 1 {
		t.Errorf("version after an equal PUT = %d, want 1", got)
	}
	// A spec is the same config written differently: canonical config, no change.
	e.must(201, "PUT", "/v1/limiters/spec", `{"spec":"12000,1.1"}`)
	if got := e.must(200, "PUT", "/v1/limiters/spec", `{"rate":12000}`).num(t, "version"); got != 1 {
		t.Errorf("version after PUT of the spec's canonical config = %d, want 1", got)
	}
	if got := e.must(200, "GET", "/v1/limiters/spec", nil).obj(t)["config"]; fmt.Sprint(got) != "map[burst:1.1 kind:schedule rate:12000]" {
		t.Errorf("config of spec 12000,1.1 = %v", got)
	}
	// A new rate reconfigures (version 2); another kind replaces (version 3).
	if got := e.must(200, "PUT", "/v1/limiters/orders", `{"rate":2000}`).num(t, "version"); got != 2 {
		t.Errorf("version after a new rate = %d, want 2", got)
	}
	r = e.must(200, "PUT", "/v1/limiters/orders", `{"kind":"smooth","rate":5}`)
	if got := r.num(t, "version"); got != 3 {
		t.Errorf("version after a kind change = %d, want 3", got)
	}
	if got := string(mustJSON(t, r.obj(t)["config"])); got != `{"initial_permits":0,"kind":"smooth","max_burst_seconds":1,"rate":5}` {
		t.Errorf("canonical smooth config = %s", got)
	}
	e.must(404, "GET", "/v1/limiters/nope", nil)
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Guava's RateLimiterTest: rate 5 gives R0.00, R0.20, R0.20; at one instant
// the delays add up to 0, 200ms, 400ms.
func TestSmoothRateFive(t *testing.T) {
	e := newEnv(t)
	e.must(201, "PUT", "/v1/limiters/guava", map[string]any{"kind": "smooth", "rate": 5})
	for i, want := range []int64{0, 2e8, 4e8} {
		r := e.must(200, "POST", "/v1/limiters/guava/acquire", map[string]any{"permits": 1})
		if got := r.num(t, "delay_ns"); got != want {
			t.Errorf("acquire %d: delay_ns = %d, want %d", i, got, want)
		}
		if got := r.num(t, "start_ns"); got != t0.UnixNano()+want {
			t.Errorf("acquire %d: start_ns = %d, want %d", i, got, t0.UnixNano()+want)
		}
		if got := r.num(t, "now_ns"); got != t0.UnixNano() {
			t.Errorf("acquire %d: now_ns = %d", i, got)
		}
	}
	// After the 600 ms paid for, a caller waits 0 again.
	e.at(600 * time.Millisecond)
	if got := e.must(200, "POST", "/v1/limiters/guava/acquire", nil).num(t, "delay_ns"); got != 0 {
		t.Errorf("delay after catching up = %d", got)
	}
}

// A schedule's backlog is the time allocated that nobody claimed; /wait shows
// it once time passes, PATCH keeps it, reset zeroes it.
func TestScheduleBacklogPatchReset(t *testing.T) {
	e := newEnv(t)
	e.must(201, "PUT", "/v1/limiters/sched", `{"rate":10,"burst":1.1}`)
	r := e.must(200, "POST", "/v1/limiters/sched/acquire", `{}`)
	if r.num(t, "delay_ns") != 0 || r.num(t, "scheduled_ns") != t0.UnixNano() || r.num(t, "wait_ns") != 0 || r.num(t, "version") != 1 {
		t.Fatalf("first acquire: %s", r)
	}
	r = e.must(200, "GET", "/v1/limiters/sched/wait", nil)
	if r.num(t, "wait_ns") != 0 || r.num(t, "delay_ns") != 1e8 {
		t.Errorf("wait at once: %s", r)
	}

	e.at(time.Second) // 1 s on, 100 ms of it used: 900 ms behind schedule
	r = e.must(200, "GET", "/v1/limiters/sched/wait", nil)
	want := map[string]int64{"wait_ns": 9e8, "delay_ns": 0, "allocated_ns": 1e8, "idle_ns": 0, "permits": 1, "now_ns": t0.Add(time.Second).UnixNano(), "version": 1}
	for k, w := range want {
		if got := r.num(t, k); got != w {
			t.Errorf("wait after 1s: %s = %d, want %d", k, got, w)
		}
	}

	// PATCH: a new rate keeps the schedule (and its backlog); version + 1.
	r = e.must(200, "PATCH", "/v1/limiters/sched", `{"rate":20}`, "Content-Type", "application/merge-patch+json")
	if r.num(t, "version") != 2 || r.num(t, "config", "rate") != 20 || r.obj(t)["config"].(map[string]any)["burst"] != 1.1 {
		t.Errorf("patched view: %s", r)
	}
	if r.num(t, "state", "wait_ns") != 9e8 || r.num(t, "state", "allocated_ns") != 1e8 || r.num(t, "state", "permits") != 1 {
		t.Errorf("PATCH lost state: %s", r)
	}
	// max_backlog caps the backlog; null removes the cap again.
	r = e.must(200, "PATCH", "/v1/limiters/sched", `{"max_backlog":"500ms"}`)
	if r.num(t, "state", "wait_ns") != 5e8 || r.num(t, "version") != 3 {
		t.Errorf("after max_backlog 500ms: %s", r)
	}
	r = e.must(200, "PATCH", "/v1/limiters/sched", `{"max_backlog":null}`)
	if _, ok := r.obj(t)["config"].(map[string]any)["max_backlog"]; ok || r.num(t, "version") != 4 {
		t.Errorf("max_backlog null did not remove it: %s", r)
	}
	// A spec replaces rate and burst.
	r = e.must(200, "PATCH", "/v1/limiters/sched", `{"spec":"200,1.5"}`)
	if r.num(t, "config", "rate") != 200 || r.obj(t)["config"].(map[string]any)["burst"] != 1.5 {
		t.Errorf("after spec patch: %s", r)
	}

	// reset: a new schedule from now, no backlog, totals kept.
	e.at(3 * time.Second)
	r = e.must(200, "POST", "/v1/limiters/sched/reset", nil)
	if r.num(t, "wait_ns") != 0 || r.num(t, "allocated_ns") != 1e8 || r.num(t, "permits") != 1 {
		t.Errorf("after reset: %s", r)
	}
	r = e.must(200, "POST", "/v1/limiters/sched/acquire", nil)
	if r.num(t, "scheduled_ns") != t0.Add(3*time.Second).UnixNano() || r.num(t, "delay_ns") != 0 {
		t.Errorf("first acquire after reset: %s", r)
	}
}

func TestPatchSmooth(t *testing.T) {
	e := newEnv(t)
	e.must(201, "PUT", "/v1/limiters/s", `{"kind":"smooth","rate":2}`)
	// warmup excludes max_burst_seconds, which the patch removes.
	r := e.must(200, "PATCH", "/v1/limiters/s", `{"warmup":"4s"}`)
	cfg := r.obj(t)["config"].(map[string]any)
	if cfg["warmup"] != "4s" || cfg["cold_factor"] != 3.0 || cfg["max_burst_seconds"] != nil {
		t.Errorf("after warmup patch: %s", r)
	}
	r = e.must(200, "PATCH", "/v1/limiters/s", `{"max_burst_seconds":2}`)
	cfg = r.obj(t)["config"].(map[string]any)
	if cfg["warmup"] != nil || cfg["cold_factor"] != nil || cfg["max_burst_seconds"] != 2.0 {
		t.Errorf("after max_burst_seconds patch: %s", r)
	}
	r = e.bad("PATCH", "/v1/limiters/s", `{"kind":"schedule"}`)
	if r.code != 409 {
		t.Errorf("kind change: %s", r)
	}
	e.must(404, "PATCH", "/v1/limiters/missing", `{"rate":1}`)
}

func TestDeleteLimiter(t *testing.T) {
	e := newEnv(t)
	e.must(201, "PUT", "/v1/limiters/gone", `{"rate":1}`)
	e.must(200, "POST", "/v1/limiters/gone/acquire", nil)
	e.must(204, "DELETE", "/v1/limiters/gone", nil)
	for _, c := range [][2]string{{"GET", ""}, {"POST", "/acquire"}, {"GET", "/wait"}, {"POST", "/reset"}, {"DELETE", ""}} {
		r := e.must(404, c[0], "/v1/limiters/gone"+c[1], nil)
		if p := r.problem(t); !strings.Contains(p.Detail, "gone") || p.Type != "urn:limitd:problem:not-found" {
			t.Errorf("%s: %+v", c, p)
		}
	}
	for _, k := range e.m.Keys() {
		if strings.Contains(k, "{gone}") {
			t.Errorf("key %s left after DELETE", k)
		}
	}
}

func TestListPagination(t *testing.T) {
	e := newEnv(t)
	for i := 1; i <= 5; i++ {
		e.must(201, "PUT", fmt.Sprintf("/v1/limiters/a%d", i), map[string]any{"rate": i})
	}
	type page struct {
		Limiters []struct {
			Name    string         `json:"name"`
			Config  map[string]any `json:"config"`
			Version int64          `json:"version"`
		} `json:"limiters"`
		Next string `json:"next"`
	}
	var names []string
	cursor, pages := "", 0
	for {
		var p page
		e.must(200, "GET", "/v1/limiters?limit=2&cursor="+cursor, nil).decode(t, &p)
		pages++
		for _, l := range p.Limiters {
			names = append(names, l.Name)
			if l.Version != 1 || l.Config["rate"] == nil {
				t.Errorf("item %+v", l)
			}
		}
		if p.Next == "" {
			break
		}
		cursor = p.Next
	}
	if got := strings.Join(names, ","); got != "a1,a2,a3,a4,a5" || pages != 3 {
		t.Errorf("pages = %d, names = %s", pages, got)
	}
	var all page
	e.must(200, "GET", "/v1/limiters", nil).decode(t, &all)
	if len(all.Limiters) != 5 || all.Next != "" {
		t.Errorf("default page: %+v", all)
	}
	// An empty store lists [] (not null).
	e2 := newEnv(t)
	if r := e2.must(200, "GET", "/v1/limiters", nil); !bytes.Contains(r.body, []byte(`"limiters":[]`)) {
		t.Errorf("empty list: %s", r)
	}
}

func TestAcquireDenied(t *testing.T) {
	e := newEnv(t)
	e.must(201, "PUT", "/v1/limiters/one", `{"kind":"smooth","rate":1}`)
	e.must(200, "POST", "/v1/limiters/one/acquire", nil)
	if d := e.must(200, "POST", "/v1/limiters/one/acquire", nil).num(t, "delay_ns"); d != 1e9 {
		t.Errorf("second delay = %d", d)
	}
	// The third would wait 2 s; max_wait 500ms: denied, 1.5 s too early.
	r := e.must(429, "POST", "/v1/limiters/one/acquire", `{"max_wait":"500ms"}`)
	if r.num(t, "retry_after_ns") != 15e8 || r.obj(t)["granted"] != false || r.num(t, "delay_ns") != 2e9 {
		t.Errorf("denied: %s", r)
	}
	if got := r.header.Get("Retry-After"); got != "2" {
		t.Errorf("Retry-After = %q, want 2 (1.5 s rounded up)", got)
	}
	// A denied request changed nothing: with max_wait 2s it is granted at 2 s.
	if d := e.must(200, "POST", "/v1/limiters/one/acquire", `{"max_wait":"2s","permits":1}`).num(t, "delay_ns"); d != 2e9 {
		t.Errorf("delay after a denial = %d", d)
	}
	// A negative max_wait is 0 (Guava): denied at once.
	if r := e.do("POST", "/v1/limiters/one/acquire", `{"max_wait":"-1s"}`); r.code != 429 || r.header.Get("Retry-After") != "3" {
		t.Errorf("negative max_wait: %s %v", r, r.header)
	}
}

func TestAcquireBlock(t *testing.T) {
	e := newEnv(t)
	e.must(201, "PUT", "/v1/limiters/b", `{"kind":"smooth","rate":5}`)
	e.must(200, "POST", "/v1/limiters/b/acquire", `{"block":true}`)
	start := time.Now()
	r := e.must(200, "POST", "/v1/limiters/b/acquire", `{"block":true}`)
	if el := time.Since(start); el < 200*time.Millisecond {
		t.Errorf("block:true answered after %v, before the 200ms delay", el)
	}
	if r.num(t, "delay_ns") != 2e8 {
		t.Errorf("blocked grant: %s", r)
	}
	// block with max_wait: a 5 s delay is over 100ms: denied at once. (The
	// bound is liveness: a server that slept the delay would answer after
	// 5 s.)
	e.must(201, "PUT", "/v1/limiters/b5", `{"kind":"smooth","rate":0.2}`)
	e.must(200, "POST", "/v1/limiters/b5/acquire", `{"block":true}`)
	start = time.Now()
	r = e.must(429, "POST", "/v1/limiters/b5/acquire", `{"block":true,"max_wait":"100ms"}`)
	if el := time.Since(start); el >= 2500*time.Millisecond {
		t.Errorf("denied block answered after %v, as if it had waited the delay", el)
	}
	if r.num(t, "delay_ns") != 5e9 {
		t.Errorf("denied block: %s", r)
	}
}

// A blocking acquire never outlives the request timeout: it asks only for a
// delay it can wait out, and is refused at once for a longer one. (A server
// that waited first would answer after the 2 s timeout at the earliest: the
// bound leaves a busy machine room below that.)
func TestAcquireBlockBoundedByTimeout(t *testing.T) {
	e := newEnv(t, func(o *api.Options) { o.RequestTimeout = 2 * time.Second })
	e.must(201, "PUT", "/v1/limiters/slow", `{"kind":"smooth","rate":0.2}`)
	e.must(200, "POST", "/v1/limiters/slow/acquire", nil)
	start := time.Now()
	r := e.must(429, "POST", "/v1/limiters/slow/acquire", `{"block":true}`)
	if el := time.Since(start); el > 1500*time.Millisecond {
		t.Errorf("answered after %v", el)
	}
	if r.num(t, "delay_ns") != 5e9 {
		t.Errorf("denied: %s", r)
	}
}

func TestHealthReadyOpenAPI(t *testing.T) {
	e := newEnv(t)
	if r := e.must(200, "GET", "/healthz", nil); string(r.body) != "{\"status\":\"ok\"}\n" {
		t.Errorf("healthz: %s", r)
	}
	e.must(200, "GET", "/readyz", nil)
	r := e.must(200, "GET", "/openapi.yaml", nil)
	if !bytes.Equal(r.body, openapiFile()) || r.header.Get("Content-Type") != "application/yaml" {
		t.Errorf("/openapi.yaml is not the embedded spec (%s)", r.header.Get("Content-Type"))
	}
}

func TestRequestIDAndAccessLog(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	e := newEnv(t, func(o *api.Options) { o.Logger, o.AccessLog = log, api.AccessLogAll })
	r := e.must(404, "GET", "/v1/limiters/x", nil, "X-Request-Id", "req-123")
	if got := r.header.Get("X-Request-Id"); got != "req-123" {
		t.Errorf("X-Request-Id = %q, want the client's", got)
	}
	r = e.must(200, "GET", "/healthz", nil, "X-Request-Id", "bad id\nwith newline")
	if got := r.header.Get("X-Request-Id"); got == "" || strings.ContainsAny(got, " \n") {
		t.Errorf("X-Request-Id = %q, want a fresh one", got)
	}
	var line struct {
		Msg, Method, Route, Path, Problem, RequestID string
		Status                                       int
		Latency                                      int64
	}
	first, _, _ := bytes.Cut(buf.Bytes(), []byte("\n"))
	if err := json.Unmarshal(bytes.ReplaceAll(first, []byte(`"request_id"`), []byte(`"RequestID"`)), &line); err != nil {
		t.Fatalf("log line %s: %v", first, err)
	}
	if line.Msg != "http request" || line.Method != "GET" || line.Route != "/v1/limiters/{name}" || line.Status != 404 ||
		line.RequestID != "req-123" || line.Problem != "not-found" || line.Latency <= 0 {
		t.Errorf("access log line: %s", first)
	}
}

// LIMITD_ACCESS_LOG: off logs no request, errors those answered with a
// problem (not a 429 refusal), all every one; probes never.
func TestAccessLogModes(t *testing.T) {
	for _, tc := range []struct {
		mode api.AccessLog
		want []string // "method route status" of each line
	}{
		{api.AccessLogOff, nil},
		{api.AccessLogErrors, []string{"GET /v1/limiters/{name} 404", "GET unmatched 404"}},
		{api.AccessLogAll, []string{"PUT /v1/limiters/{name} 201", "POST /v1/limiters/{name}/acquire 200",
			"POST /v1/limiters/{name}/acquire 429", "GET /v1/limiters/{name} 404", "GET unmatched 404"}},
	} {
		var buf bytes.Buffer
		log := slog.New(slog.NewJSONHandler(&buf, nil))
		e := newEnv(t, func(o *api.Options) { o.Logger, o.AccessLog = log, tc.mode })
		e.must(200, "GET", "/healthz", nil)
		e.must(200, "GET", "/readyz", nil)
		e.must(201, "PUT", "/v1/limiters/one", `{"kind":"smooth","rate":1}`)
		e.must(200, "POST", "/v1/limiters/one/acquire", nil)
		e.must(429, "POST", "/v1/limiters/one/acquire", `{"max_wait":"0s"}`)
		e.must(404, "GET", "/v1/limiters/missing", nil)
		e.bad("GET", "/nowhere", nil)
		var got []string
		for line := range strings.Lines(buf.String()) {
			var l struct {
				Msg, Method, Route string
				Status             int
			}
			if err := json.Unmarshal([]byte(line), &l); err != nil || l.Msg != "http request" && l.Msg != "config change" {
				t.Fatalf("%s: log line %s (%v)", tc.mode, line, err)
			}
			if l.Msg == "config change" { // the audit line (TestAuditLog), whatever the access log
				continue
			}
			got = append(got, fmt.Sprintf("%s %s %d", l.Method, l.Route, l.Status))
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: logged %q, want %q", tc.mode, got, tc.want)
		}
	}
}

func TestParseAccessLog(t *testing.T) {
	for in, want := range map[string]api.AccessLog{"off": api.AccessLogOff, "errors": api.AccessLogErrors, "ALL": api.AccessLogAll} {
		if got, err := api.ParseAccessLog(in); got != want || err != nil {
			t.Errorf("ParseAccessLog(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := api.ParseAccessLog("verbose"); err == nil || err.Error() != `must be one of off, errors, all (got "verbose")` {
		t.Errorf("ParseAccessLog(verbose): %v", err)
	}
}

func TestMethodNotAllowedAndUnknownRoute(t *testing.T) {
	e := newEnv(t)
	r := e.bad("DELETE", "/v1/limiters", nil)
	if r.code != http.StatusMethodNotAllowed || r.header.Get("Allow") == "" {
		t.Errorf("405: %s %v", r, r.header)
	}
	if r := e.bad("GET", "/v2/nothing", nil); r.code != 404 || r.problem(t).Type != "urn:limitd:problem:not-found" {
		t.Errorf("unknown route: %s", r)
	}
}
