package api_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitd/limitd/api"
	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/internal/testkit/redistest"
)

// A window limiter's answers add limit, remaining and reset_ns; a refusal
// says when the window resets. Windows start at whole minutes since the
// epoch: t0 + 20 s is one.
func TestWindowAcquire(t *testing.T) {
	e := newEnv(t)
	r := e.must(201, "PUT", "/v1/limiters/w", `{"kind":"window","limit":3,"period":"60s"}`)
	if got := r.obj(t)["config"].(map[string]any)["period"]; got != "1m0s" {
		t.Errorf("canonical period %v", got)
	}
	if w := e.must(200, "GET", "/v1/limiters/w/wait", nil); w.num(t, "remaining") != 3 || w.num(t, "limit") != 3 ||
		w.num(t, "reset_ns") != 20e9 || w.num(t, "reset_at_ns") != w.num(t, "now_ns")+20e9 {
		t.Errorf("a fresh window resets at the end of the window now, t0 + 20 s: %s", w)
	}
	if v := e.must(200, "GET", "/v1/limiters/w", nil); v.num(t, "state", "reset_ns") != 20e9 ||
		v.num(t, "state", "reset_at_ns") != v.num(t, "state", "now_ns")+20e9 {
		t.Errorf("a fresh window's view: %s", v)
	}
	e.at(35 * time.Second)
	g := e.must(200, "POST", "/v1/limiters/w/acquire", `{"permits":2}`)
	if g.num(t, "limit") != 3 || g.num(t, "remaining") != 1 || g.num(t, "reset_ns") != 45e9 ||
		g.num(t, "delay_ns") != 0 || g.num(t, "wait_ns") != 0 || g.num(t, "reset_at_ns") != g.num(t, "now_ns")+45e9 {
		t.Errorf("granted: %s", g)
	}
	d := e.must(429, "POST", "/v1/limiters/w/acquire", `{"permits":2,"max_wait":"1h"}`)
	if d.num(t, "retry_after_ns") != 45e9 || d.num(t, "remaining") != 1 || d.num(t, "reset_ns") != 45e9 {
		t.Errorf("denied: %s", d)
	}
	if got := d.header.Get("Retry-After"); got != "45" {
		t.Errorf("Retry-After %q", got)
	}
	w := e.must(200, "GET", "/v1/limiters/w/wait", nil)
	if w.num(t, "remaining") != 1 || w.num(t, "reset_ns") != 45e9 || w.num(t, "delay_ns") != 0 || w.num(t, "wait_ns") != 0 {
		t.Errorf("wait: %s", w)
	}
	// more than the limit is a 400 naming permits
	if p := e.bad("POST", "/v1/limiters/w/acquire", `{"permits":4}`); p.code != 400 || p.problem(t).Field != "permits" {
		t.Errorf("4 of 3: %s", p)
	}
	e.at(80 * time.Second) // a new window
	if g := e.must(200, "POST", "/v1/limiters/w/acquire", `{"permits":3}`); g.num(t, "remaining") != 0 || g.num(t, "reset_ns") != 60e9 {
		t.Errorf("a new window: %s", g)
	}
	// the pretty form says the same
	if d := e.must(429, "POST", "/v1/limiters/w/acquire?pretty", nil); !strings.Contains(string(d.body), "\n") || d.num(t, "limit") != 3 {
		t.Errorf("pretty: %s", d)
	}
}

func TestWindowBadConfig(t *testing.T) {
	e := newEnv(t)
	for body, field := range map[string]string{
		`{"kind":"window","period":"1m"}`:                               "limit",
		`{"kind":"window","limit":-1,"period":"1m"}`:                    "limit",
		`{"kind":"window","limit":4294967296,"period":"1m"}`:            "limit",
		`{"kind":"window","limit":5,"period":"fortnight"}`:              "period",
		`{"kind":"window","limit":5,"period":"month","sliding":true}`:   "sliding",
		`{"kind":"window","limit":5,"period":"day","zone":"Mars/Base"}`: "zone",
		`{"kind":"window","limit":5,"period":"1m","rate":3}`:            "rate",
	} {
		r := e.bad("PUT", "/v1/limiters/bad", body)
		if r.code != 400 || r.problem(t).Field != field {
			t.Errorf("%s: %s, want 400 naming %s", body, r, field)
		}
	}
	e.must(404, "GET", "/v1/limiters/bad", nil)
}

// A template of kind window makes a window per key.
func TestWindowTemplate(t *testing.T) {
	e := newEnv(t)
	e.must(201, "PUT", "/v1/templates/per-user", `{"pattern":"user:*","limiter":{"kind":"window","limit":2,"period":"1s","sliding":true}}`)
	for _, u := range []string{"user:a", "user:b"} {
		e.must(200, "POST", "/v1/limiters/"+u+"/acquire", `{"permits":2}`)
		d := e.must(429, "POST", "/v1/limiters/"+u+"/acquire", nil)
		// the next window, 1 µs in: the 2 weigh ⌊2 · (1 s − 1 µs) / 1 s⌋ = 1
		if d.num(t, "limit") != 2 || d.num(t, "retry_after_ns") != 1e9+1e3 {
			t.Errorf("%s: %s", u, d)
		}
	}
	// half a window later the previous one's 2 weigh 1: one more fits
	e.at(1500 * time.Millisecond)
	if g := e.must(200, "POST", "/v1/limiters/user:a/acquire", nil); g.num(t, "remaining") != 0 {
		t.Errorf("sliding: %s", g)
	}
}

// A blocking acquire that a window refuses waits until the window resets
// (on the service's clock, which here moves the Redis clock) and asks again.
func TestWindowBlock(t *testing.T) {
	e := newEnv(t)
	clock := redistest.NewMiniClock(e.m, t0)
	e.h = api.New(api.Options{Service: core.New(e.st, core.Options{Clock: clock}), Registry: prometheus.NewRegistry()})
	e.must(201, "PUT", "/v1/limiters/b", `{"kind":"window","limit":1,"period":"10s"}`)
	e.must(200, "POST", "/v1/limiters/b/acquire", nil)
	e.must(429, "POST", "/v1/limiters/b/acquire", `{"block":true,"max_wait":"5s"}`) // resets in 10 s
	if clock.Slept != 0 {
		t.Errorf("slept %v for a retry beyond max_wait", clock.Slept)
	}
	g := e.must(200, "POST", "/v1/limiters/b/acquire", `{"block":true,"max_wait":"15s"}`)
	if clock.Slept != 10*time.Second || g.num(t, "reset_ns") != 10e9 || g.num(t, "now_ns") != t0.Add(10*time.Second).UnixNano() {
		t.Errorf("slept %v: %s", clock.Slept, g)
	}
}

// A window in several limits at once (POST /v1/acquire): its answer carries
// limit, remaining and reset_ns as its own acquire's does; a check (permits
// 0) takes nothing; a refusal by another limiter leaves its count as it was;
// shadow mode lets its refusal through.
func TestWindowAcquireAll(t *testing.T) {
	e := newEnv(t)
	e.must(201, "PUT", "/v1/limiters/w", `{"kind":"window","limit":3,"period":"60s"}`)
	e.must(201, "PUT", "/v1/limiters/a", `{"rate":1,"burst":1}`)
	e.at(35 * time.Second)
	var v struct {
		Granted bool             `json:"granted"`
		Results []map[string]any `json:"results"`
	}
	e.must(200, "POST", "/v1/acquire", `{"requests":[{"name":"w","permits":2},{"name":"a"}],"max_wait":"0s"}`).decode(t, &v)
	if w := v.Results[0]; !v.Granted || w["limit"] != 3.0 || w["remaining"] != 1.0 || w["reset_ns"] != 45e9 {
		t.Fatalf("granted: %+v", v)
	}
	e.must(200, "POST", "/v1/acquire", `{"requests":[{"name":"w","permits":0}]}`).decode(t, &v)
	if w := v.Results[0]; !v.Granted || w["remaining"] != 1.0 {
		t.Errorf("check: %+v", v)
	}
	before := e.dump()
	e.must(429, "POST", "/v1/acquire", `{"requests":[{"name":"w"},{"name":"a"}],"max_wait":"0s"}`).decode(t, &v)
	if w := v.Results[0]; v.Granted || w["granted"] != true || w["remaining"] != 0.0 || v.Results[1]["granted"] != false {
		t.Errorf("refused by a: %+v", v)
	}
	if after := e.dump(); after != before {
		t.Errorf("a refused call changed Redis:\n%s\nwant\n%s", after, before)
	}
	e.must(429, "POST", "/v1/acquire", `{"requests":[{"name":"w","permits":2}]}`).decode(t, &v)
	if w := v.Results[0]; v.Granted || w["retry_after_ns"] != 45e9 || w["remaining"] != 1.0 {
		t.Errorf("refused by w: %+v", v)
	}
	e.must(200, "PATCH", "/v1/limiters/w", `{"shadow":true}`)
	e.must(200, "POST", "/v1/acquire", `{"requests":[{"name":"w","permits":2}]}`).decode(t, &v)
	if w := v.Results[0]; !v.Granted || w["shadow"] != true {
		t.Errorf("shadow: %+v", v)
	}
}
