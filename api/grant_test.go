package api_test

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestGrantHandback(t *testing.T) {
	e := newEnv(t)
	e.must(201, "PUT", "/v1/limiters/pool", `{"kind":"schedule","rate":1000}`)
	r := e.must(200, "POST", "/v1/limiters/pool/grant", `{"permits":10,"max_wait":"1s"}`)
	var g map[string]json.RawMessage
	r.decode(t, &g)
	if got := r.num(t, "permits"); got != 10 {
		t.Errorf("permits = %d, want 10", got)
	}
	if got := r.num(t, "start_ns"); got != t0.UnixNano() {
		t.Errorf("start_ns = %d, want %d", got, t0.UnixNano())
	}
	if got := r.num(t, "end_ns"); got != t0.UnixNano()+10e6 {
		t.Errorf("end_ns = %d, want t0+10ms", got)
	}
	if got := r.num(t, "slice", "whole"); got != 1e6 {
		t.Errorf("slice.whole = %d, want 1ms", got)
	}
	if got := r.num(t, "now_ns"); got != t0.UnixNano() {
		t.Errorf("now_ns = %d", got)
	}
	if string(g["kind"]) != `"schedule"` {
		t.Errorf("kind = %s", g["kind"])
	}

	// Handing the last 4 back rewinds: the next acquire starts where the 7th
	// permit would have.
	h := e.must(200, "POST", "/v1/limiters/pool/handback", map[string]any{"grant": json.RawMessage(r.body), "permits": 4})
	if got := h.obj(t)["rewound"]; got != true {
		t.Errorf("rewound = %v, want true", got)
	}
	if got := e.must(200, "POST", "/v1/limiters/pool/acquire", nil).num(t, "start_ns"); got != t0.UnixNano()+6e6 {
		t.Errorf("start after handback = t0+%dns, want t0+6ms", got-t0.UnixNano())
	}
	// Taken since: a second handback of the same grant rewinds nothing.
	h = e.must(200, "POST", "/v1/limiters/pool/handback", map[string]any{"grant": json.RawMessage(r.body), "permits": 1})
	if got := h.obj(t)["rewound"]; got != false {
		t.Errorf("rewound after a later acquire = %v, want false", got)
	}
	// A grant the server does not know rewinds nothing.
	var other map[string]any
	r.decode(t, &other)
	other["id"] = "nope"
	if got := e.must(200, "POST", "/v1/limiters/pool/handback", map[string]any{"grant": other, "permits": 1}).obj(t)["rewound"]; got != false {
		t.Errorf("rewound of an unknown grant = %v", got)
	}
	// Another limiter's grant is 400 naming grant.id.
	e.must(201, "PUT", "/v1/limiters/pool2", `{"rate":1000}`)
	if p := e.must(400, "POST", "/v1/limiters/pool2/handback", map[string]any{"grant": json.RawMessage(r.body), "permits": 1}).problem(t); p.Field != "grant.id" {
		t.Errorf("field = %q, want grant.id", p.Field)
	}
}

func TestGrantDeniedAndErrors(t *testing.T) {
	e := newEnv(t)
	e.must(201, "PUT", "/v1/limiters/one", `{"rate":1}`)
	e.must(200, "POST", "/v1/limiters/one/grant", `{"permits":2}`)
	r := e.must(429, "POST", "/v1/limiters/one/grant", `{"permits":1,"max_wait":"500ms"}`)
	if r.header.Get("Retry-After") == "" || r.num(t, "retry_after_ns") <= 0 {
		t.Errorf("denied grant: %s %v", r, r.header)
	}
	e.must(404, "POST", "/v1/limiters/nope/grant", `{"permits":1}`)
	for _, body := range []string{`{"permits":0}`, `{}`} {
		p := e.bad("POST", "/v1/limiters/one/grant", body).problem(t)
		if p.Status != 400 || p.Field != "permits" || !strings.Contains(p.Detail, "permits") {
			t.Errorf("grant %s: %+v", body, p)
		}
	}
	g := e.must(200, "POST", "/v1/limiters/one/grant", `{"permits":3}`)
	p := e.bad("POST", "/v1/limiters/one/handback", map[string]any{"grant": json.RawMessage(g.body), "permits": 4}).problem(t)
	if p.Status != 400 || p.Field != "permits" {
		t.Errorf("handback of more than granted: %+v", p)
	}
	e.must(201, "PUT", "/v1/limiters/sem", `{"kind":"concurrency","limit":1}`)
	e.must(409, "POST", "/v1/limiters/sem/grant", `{"permits":1}`)
}
