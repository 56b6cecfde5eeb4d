package api_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/limitd/limitd/wire"
)

// ask asks limiter name for capacity on behalf of a client.
func (e *env) ask(name, client string, wants, has float64, more ...any) wire.CapacityLease {
	e.t.Helper()
	body := map[string]any{"client_id": client, "wants": wants, "has": has}
	for i := 0; i+1 < len(more); i += 2 {
		body[more[i].(string)] = more[i+1]
	}
	var l wire.CapacityLease
	e.must(200, "POST", "/v1/limiters/"+name+"/capacity", body).decode(e.t, &l)
	return l
}

func near(a, b float64) bool { return math.Abs(a-b) < 0.005 }

// Doorman's worked example (doc/algorithms.md): a capacity of 120 among three
// clients wanting 1000, 50 and 10, each asking in turn. Proportional share
// gives 69.69, 40.31 and 10 once every client is known; fair share 60, 50
// and 10. What the clients hold never adds up to more than the capacity.
func TestShareDoormanExample(t *testing.T) {
	e := newEnv(t)
	r := e.must(201, "PUT", "/v1/limiters/doorman", `{"kind":"share","capacity":120,"algorithm":"proportional_share"}`)
	if _, ok := r.obj(t)["state"]; ok {
		t.Errorf("a share limiter's view has a state: %s", r)
	}
	cfg := string(mustJSON(t, r.obj(t)["config"]))
	for _, want := range []string{`"kind":"share"`, `"capacity":120`, `"algorithm":"proportional_share"`, `"lease":"1m0s"`, `"refresh_interval":"5s"`, `"learning":"1m0s"`} {
		if !strings.Contains(cfg, want) {
			t.Errorf("canonical share config %s lacks %s", cfg, want)
		}
	}
	clients := []struct {
		id    string
		wants float64
	}{{"a", 1000}, {"b", 50}, {"c", 10}}
	has := map[string]float64{}
	round := func() []wire.CapacityLease {
		t.Helper()
		var out []wire.CapacityLease
		for _, c := range clients {
			l := e.ask("doorman", c.id, c.wants, has[c.id])
			has[c.id] = l.Gets
			var sum float64
			for _, h := range has {
				sum += h
			}
			if sum > 120+1e-9 {
				t.Errorf("after %s asked: clients hold %v, more than 120", c.id, has)
			}
			if l.Learning {
				t.Errorf("%s: learning mode in a limiter that lost nothing: %+v", c.id, l)
			}
			out = append(out, l)
		}
		return out
	}
	check := func(algorithm string, got []wire.CapacityLease, want ...float64) {
		t.Helper()
		for i, l := range got {
			if !near(l.Gets, want[i]) {
				t.Errorf("%s: %s gets %.4f, want %.2f", algorithm, clients[i].id, l.Gets, want[i])
			}
		}
	}

	first := round()
	if first[0].Gets != 120 || first[0].Expires != t0.Add(time.Minute).UnixNano() || first[0].Refresh != 5e9 || first[0].Version != 1 {
		t.Errorf("the first client alone: %+v", first[0])
	}
	got := round()
	check("proportional_share", got, 69.69, 40.31, 10)
	if !near(got[2].SafeCapacity, 40) { // capacity / clients
		t.Errorf("safe_capacity with 3 clients = %v, want 40", got[2].SafeCapacity)
	}

	// PATCH keeps the clients' leases; the algorithm changes.
	r = e.must(200, "PATCH", "/v1/limiters/doorman", `{"algorithm":"fair_share"}`)
	if r.num(t, "version") != 2 {
		t.Errorf("version after PATCH: %s", r)
	}
	round()
	got = round()
	check("fair_share", got, 60, 50, 10)
	if got[0].Version != 2 {
		t.Errorf("lease version = %d, want 2", got[0].Version)
	}

	m := string(e.must(200, "GET", "/metrics", nil).body)
	for _, want := range []string{
		`limitd_capacity_decisions_total{decision="full",limiter="doorman",template=""} 5`,
		`limitd_capacity_decisions_total{decision="partial",limiter="doorman",template=""} 5`,
		`limitd_capacity_decisions_total{decision="none",limiter="doorman",template=""} 2`,
		`limitd_redis_call_duration_seconds_count{op="capacity"} 12`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s:\n%s", want, grep(m, "capacity"))
		}
	}
}

// DELETE .../capacity/{client_id} frees a client's capacity at once; an
// expired lease frees it too.
func TestShareReturnCapacity(t *testing.T) {
	e := newEnv(t)
	e.must(201, "PUT", "/v1/limiters/pool", `{"kind":"share","capacity":100,"lease":"10s","refresh_interval":"2s"}`)
	if l := e.ask("pool", "a", 100, 0); l.Gets != 100 || l.Refresh != 2e9 || l.Expires != t0.Add(10*time.Second).UnixNano() {
		t.Errorf("a alone: %+v", l)
	}
	if l := e.ask("pool", "b", 100, 0); l.Gets != 0 {
		t.Errorf("b while a holds everything: %+v", l)
	}
	e.must(204, "DELETE", "/v1/limiters/pool/capacity/a", nil)
	if l := e.ask("pool", "b", 100, 0); l.Gets != 100 {
		t.Errorf("b after a returned its capacity: %+v", l)
	}
	r := e.must(404, "DELETE", "/v1/limiters/pool/capacity/a", nil)
	if p := r.problem(t); p.Field != "client_id" || !strings.Contains(p.Detail, `"a"`) {
		t.Errorf("returning twice: %+v", p)
	}
	if p := e.must(404, "DELETE", "/v1/limiters/nobody/capacity/a", nil).problem(t); p.Field != "" {
		t.Errorf("an unknown limiter is not the client's fault: %+v", p)
	}

	// b's lease runs out after 10s: c gets everything.
	e.at(11 * time.Second)
	e.m.FastForward(11 * time.Second)
	if l := e.ask("pool", "c", 100, 0); l.Gets != 100 {
		t.Errorf("c after b's lease expired: %+v", l)
	}

	// Priority weighs a claim: 3 against 1 splits 75/25 under fair share.
	e.must(201, "PUT", "/v1/limiters/weighted", `{"kind":"share","capacity":100}`)
	has := map[string]float64{}
	for range 2 {
		for _, c := range []struct {
			id   string
			prio float64
		}{{"x", 3}, {"y", 0}} {
			has[c.id] = e.ask("weighted", c.id, 100, has[c.id], "priority", c.prio).Gets
		}
	}
	if !near(has["x"], 75) || !near(has["y"], 25) {
		t.Errorf("priorities 3 and 0 (= 1): %v, want x 75, y 25", has)
	}

	// A limiter deleted and created again has lost its state: a client
	// reporting capacity it does not know of puts it in learning mode, and
	// gets back what it has.
	e.must(204, "DELETE", "/v1/limiters/weighted", nil)
	e.must(201, "PUT", "/v1/limiters/weighted", `{"kind":"share","capacity":100}`)
	if l := e.ask("weighted", "x", 100, 75, "priority", 3); !l.Learning || l.Gets != 75 {
		t.Errorf("x after the state was lost: %+v, want learning with 75", l)
	}
	m := string(e.must(200, "GET", "/metrics", nil).body)
	if !strings.Contains(m, `limitd_capacity_decisions_total{decision="learning",limiter="weighted",template=""} 1`) {
		t.Errorf("learning not counted:\n%s", grep(m, "limitd_capacity_decisions_total"))
	}
}

// A share limiter is asked for capacity, not permits: acquire, wait and reset
// are 409, and capacity on a schedule limiter is 409 too. PUT, GET, PATCH,
// list and DELETE work as for any limiter.
func TestShareWrongKind(t *testing.T) {
	e := newEnv(t)
	e.must(201, "PUT", "/v1/limiters/s", `{"kind":"share","capacity":10,"safe_capacity":2,"algorithm":"static"}`)
	e.must(201, "PUT", "/v1/limiters/sched", `{"rate":10}`)
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/limiters/s/acquire", ""},
		{"POST", "/v1/limiters/s/acquire", `{"permits":2}`},
		{"GET", "/v1/limiters/s/wait", ""},
		{"POST", "/v1/limiters/s/reset", ""},
		{"POST", "/v1/limiters/s/release", `{"lease_id":"00ff00ff00ff00ff00ff00ff00ff00ff"}`},
		{"POST", "/v1/limiters/s/renew", `{"lease_id":"00ff00ff00ff00ff00ff00ff00ff00ff"}`},
		{"POST", "/v1/limiters/sched/capacity", `{"client_id":"a","wants":1}`},
		{"DELETE", "/v1/limiters/sched/capacity/a", ""},
	} {
		var body any
		if c.body != "" {
			body = c.body
		}
		r := e.must(409, c.method, c.path, body)
		if p := r.problem(t); p.Type != "urn:limitd:problem:conflict" {
			t.Errorf("%s %s: %+v", c.method, c.path, p)
		}
	}
	// static with a safe capacity: everyone gets up to 2.
	if l := e.ask("s", "a", 5, 0); l.Gets != 2 || l.SafeCapacity != 2 {
		t.Errorf("static: %+v", l)
	}
	r := e.must(200, "GET", "/v1/limiters/s", nil)
	if got := string(mustJSON(t, r.obj(t)["config"])); !strings.Contains(got, `"safe_capacity":2`) || !strings.Contains(got, `"algorithm":"static"`) {
		t.Errorf("GET config = %s", got)
	}
	if _, ok := r.obj(t)["state"]; ok {
		t.Errorf("GET of a share limiter has a state: %s", r)
	}
	e.must(200, "PATCH", "/v1/limiters/s", `{"capacity":20,"safe_capacity":null}`)
	if got := string(mustJSON(t, e.must(200, "GET", "/v1/limiters/s", nil).obj(t)["config"])); strings.Contains(got, "safe_capacity") || !strings.Contains(got, `"capacity":20`) {
		t.Errorf("after PATCH: %s", got)
	}
	e.must(409, "PATCH", "/v1/limiters/s", `{"kind":"concurrency","limit":3}`)
	list := e.must(200, "GET", "/v1/limiters", nil).obj(t)["limiters"].([]any)
	if len(list) != 2 {
		t.Errorf("list: %v", list)
	}
	e.must(204, "DELETE", "/v1/limiters/s", nil)
	e.must(404, "POST", "/v1/limiters/s/capacity", `{"client_id":"a","wants":1}`)
}
