package api_test

import (
	"strings"
	"testing"
	"time"
)

// The token budget of an LLM gateway: a window of 1,000 permits a minute,
// each request checked before its work and charged 300 after. Exactly four
// requests are admitted in the minute (the fourth takes the count to 1,200,
// past the limit); one request of 1,500 uses a minute up alone; the budget
// comes back when the window resets. The check is a charge of 0, or an
// acquire of one permit without waiting (which then counts 301 a request).
// Windows start at whole minutes: t0 + 20 s is one.
func TestChargeBudget(t *testing.T) {
	for _, check := range []string{"charge 0", "acquire"} {
		t.Run(check, func(t *testing.T) {
			e := newEnv(t)
			e.must(201, "PUT", "/v1/limiters/tokens", `{"kind":"window","limit":1000,"period":"1m"}`)
			admit := func() bool {
				t.Helper()
				if check == "acquire" {
					return e.do("POST", "/v1/limiters/tokens/acquire", `{"permits":1,"max_wait":"0s"}`).code == 200
				}
				r := e.must(200, "POST", "/v1/limiters/tokens/charge", `{"permits":0}`)
				return r.obj(t)["within"] == true
			}
			minute := func(start time.Duration, cost string) int { // start: a window's
				t.Helper()
				admitted := 0
				for i := range 10 {
					e.at(start + time.Duration(i)*5*time.Second)
					if !admit() {
						continue
					}
					admitted++
					r := e.must(200, "POST", "/v1/limiters/tokens/charge", `{"permits":`+cost+`}`)
					if r.num(t, "limit") != 1000 || r.num(t, "reset_ns") != int64(60*time.Second-time.Duration(i)*5*time.Second) {
						t.Errorf("charge %d of the minute: %s", admitted, r)
					}
				}
				return admitted
			}
			if n := minute(20*time.Second, "300"); n != 4 {
				t.Errorf("requests of 300 admitted in a minute: %d, want 4", n)
			}
			w := e.must(200, "GET", "/v1/limiters/tokens/wait", nil)
			if w.num(t, "remaining") != 0 || w.num(t, "reset_ns") != 15e9 {
				t.Errorf("after the minute's requests: %s", w)
			}
			if n := minute(80*time.Second, "1500"); n != 1 {
				t.Errorf("requests of 1,500 admitted in a minute: %d, want 1", n)
			}
			e.at(140 * time.Second) // the window resets at its end
			if !admit() {
				t.Error("the next window does not admit")
			}
		})
	}
}

// A charge of a schedule limiter: taken whatever is left, the debt said in
// delay_ns; a check says whether a request would be granted now.
func TestChargeSchedule(t *testing.T) {
	e := newEnv(t)
	e.must(201, "PUT", "/v1/limiters/s", `{"rate":100,"burst":1}`) // 10 ms a permit
	r := e.must(200, "POST", "/v1/limiters/s/charge", `{"permits":300}`)
	if o := r.obj(t); o["within"] != true || r.num(t, "permits") != 300 || r.num(t, "delay_ns") != 3e9 ||
		r.num(t, "wait_ns") != 0 || r.num(t, "now_ns") != t0.UnixNano() || o["limit"] != nil {
		t.Errorf("charge 300: %s", r)
	}
	if r := e.must(200, "POST", "/v1/limiters/s/charge", `{"permits":0}`); r.obj(t)["within"] != false || r.num(t, "delay_ns") != 3e9 {
		t.Errorf("check in debt: %s", r)
	}
	if d := e.must(429, "POST", "/v1/limiters/s/acquire", `{"max_wait":"1s"}`); d.num(t, "retry_after_ns") != 2e9 {
		t.Errorf("acquire in debt: %s", d)
	}
	e.at(time.Second)
	if r := e.must(200, "POST", "/v1/limiters/s/charge", `{"permits":100}`); r.obj(t)["within"] != false || r.num(t, "delay_ns") != 3e9 {
		t.Errorf("charge in debt a second later: %s", r)
	}
	m := string(e.must(200, "GET", "/metrics", nil).body)
	for _, want := range []string{`limitd_acquire_decisions_total{decision="charged",limiter="s",template=""} 3`,
		`limitd_permits_total{decision="charged",limiter="s",template=""} 400`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s:\n%s", want, grep(m, "charged"))
		}
	}
}

// Bad input is a 400 naming permits; a missing limiter 404; share and
// concurrency limiters 409 naming their kind.
func TestChargeErrors(t *testing.T) {
	e := newEnv(t)
	e.must(201, "PUT", "/v1/limiters/s", `{"rate":1}`)
	e.must(201, "PUT", "/v1/limiters/sh", `{"kind":"share","capacity":10}`)
	e.must(201, "PUT", "/v1/limiters/c", `{"kind":"concurrency","limit":2}`)
	for _, body := range []string{`{}`, `{"permits":-1}`, `{"permits":1125899906842625}`, `{"permits":1125900}`, `{"permits":1.5}`} {
		if r := e.bad("POST", "/v1/limiters/s/charge", body); r.code != 400 || r.problem(t).Field != "permits" {
			t.Errorf("%s: %s, want 400 naming permits", body, r)
		}
	}
	if r := e.bad("POST", "/v1/limiters/s/charge", `{"permits":1,"max_wait":"1s"}`); r.code != 400 {
		t.Errorf("an unknown field: %s", r)
	}
	e.must(404, "POST", "/v1/limiters/nope/charge", `{"permits":1}`)
	for name, kind := range map[string]string{"sh": "share", "c": "concurrency"} {
		if r := e.must(409, "POST", "/v1/limiters/"+name+"/charge", `{"permits":1}`); !strings.Contains(r.problem(t).Detail, "of kind "+kind) {
			t.Errorf("charge of a %s limiter: %s", kind, r)
		}
	}
	if w := e.must(200, "GET", "/v1/limiters/s/wait", nil); w.num(t, "permits") != 0 {
		t.Errorf("bad charges took permits: %s", w)
	}
}

// A grant settled with what its work used: fewer hands the rest back (the
// schedule rewound), more charges the excess; a window gives its count back.
func TestChargeSettle(t *testing.T) {
	e := newEnv(t)
	e.must(201, "PUT", "/v1/limiters/s", `{"rate":100,"burst":1}`) // 10 ms a permit
	g := e.must(200, "POST", "/v1/limiters/s/grant", `{"permits":10}`)
	r := e.must(200, "POST", "/v1/limiters/s/charge", `{"permits":4,"grant":`+string(g.body)+`}`)
	if o := r.obj(t); o["rewound"] != true || r.num(t, "handed_back") != 6 || r.num(t, "permits") != 0 || r.num(t, "delay_ns") != 40e6 {
		t.Errorf("settled with 4 of 10: %s", r)
	}
	g = e.must(200, "POST", "/v1/limiters/s/grant", `{"permits":10}`)
	r = e.must(200, "POST", "/v1/limiters/s/charge", `{"permits":15,"grant":`+string(g.body)+`}`)
	if o := r.obj(t); o["rewound"] != false || r.num(t, "handed_back") != 0 || r.num(t, "permits") != 5 || r.num(t, "delay_ns") != 190e6 || o["within"] != false {
		t.Errorf("settled with 15 of 10: %s", r)
	}
	if w := e.must(200, "GET", "/v1/limiters/s/wait", nil); w.num(t, "permits") != 19 {
		t.Errorf("after settling 4 and 15: %s", w)
	}
	// a grant of another limiter is bad input naming grant.id
	e.must(201, "PUT", "/v1/limiters/other", `{"rate":100}`)
	if p := e.bad("POST", "/v1/limiters/other/charge", `{"permits":1,"grant":`+string(g.body)+`}`); p.code != 400 || p.problem(t).Field != "grant.id" {
		t.Errorf("a grant of another limiter: %s", p)
	}

	e.must(201, "PUT", "/v1/limiters/w", `{"kind":"window","limit":10,"period":"1m"}`)
	g = e.must(200, "POST", "/v1/limiters/w/grant", `{"permits":8}`)
	r = e.must(200, "POST", "/v1/limiters/w/charge", `{"permits":3,"grant":`+string(g.body)+`}`)
	if r.num(t, "handed_back") != 5 || r.num(t, "remaining") != 7 || r.obj(t)["rewound"] != true {
		t.Errorf("a window's grant settled with 3 of 8: %s", r)
	}
}

// A window of limit 0 refuses every request, as a window: limit, remaining
// and reset_ns, and a retry at the window's end.
func TestWindowDenyAll(t *testing.T) {
	e := newEnv(t)
	e.must(201, "PUT", "/v1/limiters/deny", `{"kind":"window","limit":0,"period":"1m"}`)
	d := e.must(429, "POST", "/v1/limiters/deny/acquire", nil)
	if d.num(t, "limit") != 0 || d.num(t, "remaining") != 0 || d.num(t, "reset_ns") != 20e9 || d.num(t, "retry_after_ns") != 20e9 {
		t.Errorf("acquire of a deny-all window: %s", d)
	}
	if r := e.must(200, "POST", "/v1/limiters/deny/charge", `{"permits":0}`); r.obj(t)["within"] != true || r.num(t, "limit") != 0 {
		t.Errorf("check of a deny-all window: %s", r)
	}
}
