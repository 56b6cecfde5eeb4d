package api_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitd/limitd/api"
	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/store"
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
	handBack(t, e, e, r)
	// Taken since: a second handback of the same grant rewinds nothing.
	if e.handback(r, 1) {
		t.Error("rewound after a later acquire, want not")
	}
	// An id that is no grant token is 400 naming grant.id.
	var other map[string]any
	r.decode(t, &other)
	other["id"] = "nope"
	if p := e.must(400, "POST", "/v1/limiters/pool/handback", map[string]any{"grant": other, "permits": 1}).problem(t); p.Field != "grant.id" {
		t.Errorf("field of an unknown grant = %q, want grant.id", p.Field)
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

// A grant carries what its handback needs: another server over the same
// Redis (a replica behind a load balancer, or this one restarted) takes its
// handback and rewinds the schedule.
func TestHandbackToAnotherReplica(t *testing.T) {
	e := newEnv(t)
	other := &env{t: t, m: e.m, rdb: e.rdb, st: e.st, reg: prometheus.NewRegistry()}
	other.h = api.New(api.Options{Service: core.New(store.New(e.rdb), core.Options{}), Registry: other.reg})
	e.must(201, "PUT", "/v1/limiters/pool", `{"rate":1000}`)
	r := e.must(200, "POST", "/v1/limiters/pool/grant", `{"permits":10}`)
	// The next acquire goes through the replica that took the handback:
	// the issuing one still holds the grant's end as its floor
	// (store/floors.go) and starts no permit before it, which never grants
	// more, only forgoes the rewind there.
	handBack(t, other, other, r)
	// Handed back once: the same handback again, anywhere, changes nothing.
	if e.handback(r, 4) {
		t.Error("rewound a grant handed back already")
	}
}

// handback hands the last permits of grant g (POST .../grant's answer on
// limiter pool) back through e and reports whether they were rewound.
func (e *env) handback(g *reply, permits int) bool {
	e.t.Helper()
	h := e.must(200, "POST", "/v1/limiters/pool/handback", map[string]any{"grant": json.RawMessage(g.body), "permits": permits})
	return h.obj(e.t)["rewound"] == true
}

// handBack hands the last 4 of a 10-permit grant of pool (1000/s, taken at
// t0) back through to, which must rewind them: the next acquire, through
// next, starts where the 7th permit would have.
func handBack(t *testing.T, to, next *env, g *reply) {
	t.Helper()
	if !to.handback(g, 4) {
		t.Error("handback not rewound, want rewound")
	}
	if got := next.must(200, "POST", "/v1/limiters/pool/acquire", nil).num(t, "start_ns"); got != t0.UnixNano()+6e6 {
		t.Errorf("start after handback = t0+%dns, want t0+6ms", got-t0.UnixNano())
	}
}

// A garbled grant id is 400 naming grant.id: never a 500, never a handback.
func TestHandbackGarbledToken(t *testing.T) {
	e := newEnv(t)
	e.must(201, "PUT", "/v1/limiters/pool", `{"rate":1000}`)
	r := e.must(200, "POST", "/v1/limiters/pool/grant", `{"permits":10}`)
	var g map[string]any
	r.decode(t, &g)
	id := g["id"].(string)
	state := func() any {
		return e.must(200, "GET", "/v1/limiters/pool/wait", nil).obj(t)["allocated_ns"]
	}
	want := state()
	ids := []string{"", "g1.", "g1.!!!!", strings.Repeat("x", 300), id + "A", id[:len(id)-1], strings.Replace(id, "g1.", "g2.", 1)}
	for i := len("g1."); i < len(id); i++ {
		b := []byte(id)
		b[i] ^= 1
		ids = append(ids, string(b))
	}
	for _, bad := range ids {
		g["id"] = bad
		res := e.bad("POST", "/v1/limiters/pool/handback", map[string]any{"grant": g, "permits": 4})
		if res.code != 400 || res.problem(t).Field != "grant.id" {
			t.Errorf("id %q: got %s, want 400 naming grant.id", bad, res)
		}
	}
	if got := state(); got != want {
		t.Errorf("allocated_ns after garbled handbacks = %v, want %v", got, want)
	}
}
