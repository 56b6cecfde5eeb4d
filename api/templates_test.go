package api_test

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestTemplates(t *testing.T) {
	e := newEnv(t)
	body := `{"pattern":"user:*","order":10,"idle_ttl":"10m","limiter":{"kind":"smooth","rate":5}}`
	r := e.must(201, "PUT", "/v1/templates/per-user", body)
	if r.header.Get("Location") != "/v1/templates/per-user" {
		t.Errorf("Location = %q", r.header.Get("Location"))
	}
	tpl := r.obj(t)
	if tpl["id"] != "per-user" || tpl["pattern"] != "user:*" || tpl["idle_ttl"] != "10m0s" || r.num(t, "version") < 1 {
		t.Errorf("template: %s", r)
	}
	version := r.num(t, "version")
	// The same again: 200, nothing changes; what GET answers can be PUT back.
	got := e.must(200, "GET", "/v1/templates/per-user", nil)
	if r := e.must(200, "PUT", "/v1/templates/per-user", got.body); r.num(t, "version") != version {
		t.Errorf("version moved on an equal PUT: %s", r)
	}
	var list struct {
		Templates []map[string]any `json:"templates"`
	}
	e.must(200, "GET", "/v1/templates", nil).decode(t, &list)
	if len(list.Templates) != 1 || list.Templates[0]["id"] != "per-user" {
		t.Errorf("list: %v", list)
	}

	// A name matching the template gets its own smooth limiter at rate 5.
	for i, want := range []int64{0, 2e8, 4e8} {
		if got := e.must(200, "POST", "/v1/limiters/user:42/acquire", nil).num(t, "delay_ns"); got != want {
			t.Errorf("user:42 acquire %d: delay %d, want %d", i, got, want)
		}
	}
	if got := e.must(200, "GET", "/v1/limiters/user:42/wait", nil).num(t, "allocated_ns"); got != 6e8 {
		t.Errorf("user:42 allocated_ns = %d", got)
	}
	if got := e.must(200, "POST", "/v1/limiters/user:7/acquire", nil).num(t, "delay_ns"); got != 0 {
		t.Errorf("user:7 shares state with user:42: delay %d", got)
	}
	// An instance reads like a limiter, with its template and state's TTL.
	inst := e.must(200, "GET", "/v1/limiters/user:42", nil)
	if o := inst.obj(t); o["template"] != "per-user" || o["name"] != "user:42" {
		t.Errorf("GET user:42: %s", inst.body)
	}
	if ttl := inst.num(t, "ttl_ns"); ttl <= 0 || ttl > int64(10*time.Minute) {
		t.Errorf("GET user:42: ttl_ns %d, want in (0, 10m]", ttl)
	}
	if got := inst.num(t, "state", "allocated_ns"); got != 6e8 {
		t.Errorf("GET user:42: allocated_ns %d, want 6e8", got)
	}
	fresh := e.must(200, "GET", "/v1/limiters/user:none", nil) // no state yet: a fresh one, TTL 0
	if fresh.num(t, "ttl_ns") != 0 || fresh.num(t, "state", "allocated_ns") != 0 {
		t.Errorf("GET user:none: %s", fresh.body)
	}
	e.must(404, "GET", "/v1/limiters/nobody", nil) // no limiter, no template

	// A limiter of a matching name comes first: schedule rate 1000.
	e.must(201, "PUT", "/v1/limiters/user:vip", `{"rate":1000}`)
	e.must(200, "POST", "/v1/limiters/user:vip/acquire", nil)
	if got := e.must(200, "POST", "/v1/limiters/user:vip/acquire", nil).num(t, "delay_ns"); got != 1e6 {
		t.Errorf("user:vip second delay = %d, want 1ms (its own schedule)", got)
	}

	// Metrics count instances under the template id, never their names.
	e.sampled1()
	m := string(e.must(200, "GET", "/metrics", nil).body)
	for _, want := range []string{
		`limitd_acquire_decisions_total{decision="granted",limiter="",template="per-user"} 4`,
		`limitd_acquire_decisions_total{decision="granted",limiter="user:vip",template=""} 2`,
		`limitd_limiter_backlog_seconds{limiter="user:vip"} 0`,
		`limitd_http_requests_total{method="POST",route="/v1/limiters/{name}/acquire",status="200"} 6`,
		`limitd_redis_call_duration_seconds_count{op="acquire"} 6`,
		`limitd_errors_total{type="not-found"} 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if regexp.MustCompile(`user:(42|7)`).MatchString(m) {
		t.Errorf("an instance name is in the metrics:\n%s", grep(m, "user:"))
	}

	e.must(204, "DELETE", "/v1/templates/per-user", nil)
	e.must(404, "GET", "/v1/templates/per-user", nil)
	e.must(404, "DELETE", "/v1/templates/per-user", nil)
	e.must(404, "POST", "/v1/limiters/user:42/acquire", nil)
	e.must(200, "POST", "/v1/limiters/user:vip/acquire", nil)
}

func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
