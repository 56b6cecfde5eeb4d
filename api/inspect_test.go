package api_test

import (
	"testing"
	"time"

	"github.com/limitd/limitd/wire"
)

// GET on a share limiter lists its holders (what each has, wants, its
// priority and lease expiry), the sum held and the learning state, as of
// the Redis time it answers with; an expired lease is not listed, a
// returned one neither.
func TestInspectShare(t *testing.T) {
	e := newEnv(t)
	clk := &clock{e: e}
	e.must(201, "PUT", "/v1/limiters/quota", `{"kind":"share","capacity":100,"lease":"10s","learning":"0s"}`)
	a := e.ask("quota", "a", 30, 0)
	clk.advance(2 * time.Second)
	b := e.ask("quota", "b", 500, 0, "priority", 2)
	var v wire.Limiter
	e.must(200, "GET", "/v1/limiters/quota", nil).decode(t, &v)
	if v.Now != clk.ns(0) || v.Held == nil || v.Learning == nil || *v.Learning || v.InUse != nil || v.State != nil {
		t.Fatalf("share view: %+v", v)
	}
	if want := a.Gets + b.Gets; !near(*v.Held, want) || want <= 0 {
		t.Errorf("held %v, want %v (a %v + b %v)", *v.Held, want, a.Gets, b.Gets)
	}
	want := []wire.Holder{
		{ClientID: "a", Has: &a.Gets, Wants: ptr(30.0), Priority: ptr(1.0), Expires: clk.ns(8 * time.Second)},
		{ClientID: "b", Has: &b.Gets, Wants: ptr(500.0), Priority: ptr(2.0), Expires: clk.ns(10 * time.Second)},
	}
	if !sameHolders(v.Holders, want) {
		t.Errorf("holders %s, want %s", mustJSON(t, v.Holders), mustJSON(t, want))
	}
	clk.advance(9 * time.Second) // a's lease has expired, b's not
	e.must(200, "GET", "/v1/limiters/quota", nil).decode(t, &v)
	if len(v.Holders) != 1 || v.Holders[0].ClientID != "b" || !near(*v.Held, b.Gets) {
		t.Errorf("after a's lease expired: %s", mustJSON(t, v))
	}
	e.must(204, "DELETE", "/v1/limiters/quota/capacity/b", nil)
	r := e.must(200, "GET", "/v1/limiters/quota", nil)
	if got := string(mustJSON(t, r.obj(t)["holders"])); got != "[]" || r.num(t, "held") != 0 {
		t.Errorf("after b returned its lease: holders %s, %s", got, r)
	}
}

// A share limiter in learning mode says so.
func TestInspectShareLearning(t *testing.T) {
	e := newEnv(t)
	e.must(201, "PUT", "/v1/limiters/learn", `{"kind":"share","capacity":10,"learning":"1m"}`)
	e.ask("learn", "a", 5, 0)
	e.ask("learn", "b", 5, 4) // a client unknown to the state that has capacity: learning mode
	var v wire.Limiter
	e.must(200, "GET", "/v1/limiters/learn", nil).decode(t, &v)
	if v.Learning == nil || !*v.Learning {
		t.Errorf("learning = %v, want true: %s", v.Learning, mustJSON(t, v))
	}
}

// GET on a concurrency limiter lists its leased slots, earliest expiry
// first, and how many are in use.
func TestInspectConcurrency(t *testing.T) {
	e := newEnv(t)
	clk := &clock{e: e}
	r := e.must(201, "PUT", "/v1/limiters/sem", `{"kind":"concurrency","limit":3,"lease":"10s"}`)
	if got := string(mustJSON(t, r.obj(t)["holders"])); got != "[]" || r.num(t, "in_use") != 0 {
		t.Errorf("a new concurrency limiter: %s", r)
	}
	a := e.slot(200, "sem", nil)
	clk.advance(time.Second)
	b := e.slot(200, "sem", nil)
	var v wire.Limiter
	e.must(200, "GET", "/v1/limiters/sem", nil).decode(t, &v)
	want := []wire.Holder{{LeaseID: a.LeaseID, Expires: a.Expires}, {LeaseID: b.LeaseID, Expires: b.Expires}}
	if v.InUse == nil || *v.InUse != 2 || !sameHolders(v.Holders, want) || v.Held != nil || v.Learning != nil {
		t.Errorf("concurrency view %s, want holders %s", mustJSON(t, v), mustJSON(t, want))
	}
	e.must(204, "POST", "/v1/limiters/sem/release", lease(a.LeaseID))
	clk.advance(10 * time.Second) // b's lease (taken at 1s) ends at 11s: expired
	e.must(200, "GET", "/v1/limiters/sem", nil).decode(t, &v)
	if *v.InUse != 0 || len(v.Holders) != 0 {
		t.Errorf("after a release and an expiry: %s", mustJSON(t, v))
	}
}

// GET on a template counts its live instances.
func TestInspectTemplateInstances(t *testing.T) {
	e := newEnv(t)
	e.must(201, "PUT", "/v1/templates/per-user", `{"pattern":"user:*","limiter":{"rate":10,"max_backlog":"1m"},"idle_ttl":"1h"}`)
	e.must(201, "PUT", "/v1/templates/per-ip", `{"pattern":"ip:*","limiter":{"rate":10}}`)
	r := e.must(200, "GET", "/v1/templates/per-user", nil)
	if r.num(t, "instances") != 0 || r.obj(t)["instances_exact"] != true {
		t.Errorf("before any use: %s", r)
	}
	for _, n := range []string{"user:1", "user:2", "user:3", "ip:9"} {
		e.must(200, "POST", "/v1/limiters/"+n+"/acquire", nil)
	}
	r = e.must(200, "GET", "/v1/templates/per-user", nil)
	if r.num(t, "instances") != 3 || r.obj(t)["instances_exact"] != true || r.obj(t)["pattern"] != "user:*" {
		t.Errorf("after three users: %s", r)
	}
}

func ptr[T any](v T) *T { return &v }

func sameHolders(got, want []wire.Holder) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.ClientID != w.ClientID || g.LeaseID != w.LeaseID || g.Expires != w.Expires ||
			!sameNum(g.Has, w.Has) || !sameNum(g.Wants, w.Wants) || !sameNum(g.Priority, w.Priority) {
			return false
		}
	}
	return true
}

func sameNum(a, b *float64) bool { return (a == nil) == (b == nil) && (a == nil || near(*a, *b)) }
