package api_test

import (
	"strings"
	"testing"
)

// POST /v1/acquire: all or nothing over limiters and template instances,
// checks with permits 0, and faults naming the request at fault.
func TestAcquireAllHTTP(t *testing.T) {
	e := newEnv(t)
	e.must(201, "PUT", "/v1/limiters/a", `{"rate":1,"burst":1}`)
	e.must(201, "PUT", "/v1/limiters/b", `{"kind":"smooth","rate":1,"initial_permits":2}`)
	e.must(201, "PUT", "/v1/templates/u", `{"pattern":"u:*","limiter":{"rate":1,"burst":1}}`)

	var v struct {
		Granted bool             `json:"granted"`
		Results []map[string]any `json:"results"`
	}
	r := e.must(200, "POST", "/v1/acquire", `{"requests":[{"name":"a"},{"name":"b","permits":2},{"name":"u:1","permits":0}],"max_wait":"0s"}`)
	r.decode(t, &v)
	if !v.Granted || len(v.Results) != 3 || v.Results[1]["permits"] != 2.0 || v.Results[2]["permits"] != 0.0 {
		t.Fatalf("granted call: %s", r.body)
	}
	// a owes 1 s: refused, and b and u:1 are left as they were.
	before := e.dump()
	r = e.must(429, "POST", "/v1/acquire", `{"requests":[{"name":"u:1"},{"name":"a"}],"max_wait":"0s"}`)
	r.decode(t, &v)
	if v.Granted || v.Results[0]["granted"] != true || v.Results[1]["granted"] != false || r.header.Get("Retry-After") != "1" {
		t.Errorf("refused call: %s %v", r.body, r.header)
	}
	if after := e.dump(); after != before {
		t.Errorf("a refused call changed Redis:\n%s\nwant\n%s", after, before)
	}
	// Faults: the field, 404, 409; nothing taken.
	e.must(201, "PUT", "/v1/limiters/sem", `{"kind":"concurrency","limit":1}`)
	for _, c := range []struct {
		body  string
		code  int
		field string
	}{
		{`{"requests":[{"name":"u:2"},{"name":"b"},{"name":"bad name"}]}`, 400, "requests[2].name"},
		{`{"requests":[{"name":"u:2"},{"nam":"b"}]}`, 400, "requests[1].nam"},
		{`{"requests":[{"name":"u:2"},{"permits":1}]}`, 400, "requests[1].name"},
		{`{"requests":[{"name":"u:2","permits":-1}]}`, 400, "requests[0].permits"},
		{`{"requests":[{"name":"u:2"},{"name":"u:2"}]}`, 400, "requests[1].name"},
		{`{"requests":[]}`, 400, "requests"},
		{`{"requests":[{"name":"u:2"},{"name":"nobody"}]}`, 404, ""},
		{`{"requests":[{"name":"u:2"},{"name":"sem"}]}`, 409, ""},
	} {
		before := e.dump()
		r := e.bad("POST", "/v1/acquire", c.body)
		if r.code != c.code {
			t.Errorf("%s: %s, want %d", c.body, r, c.code)
			continue
		}
		if p := r.problem(t); c.field != "" && p.Field != c.field {
			t.Errorf("%s: field %q, want %q", c.body, p.Field, c.field)
		}
		if after := e.dump(); after != before {
			t.Errorf("%s changed Redis", c.body)
		}
	}
}

// Shadow mode: the config field round-trips, a refusal is 200 marked shadow
// (single and several limiters), and /metrics counts decision="shadow".
func TestShadowHTTP(t *testing.T) {
	e := newEnv(t)
	r := e.must(201, "PUT", "/v1/limiters/s", `{"rate":1,"burst":1,"shadow":true}`)
	if cfg := r.obj(t)["config"].(map[string]any); cfg["shadow"] != true {
		t.Errorf("config after PUT: %v", cfg)
	}
	e.must(200, "POST", "/v1/limiters/s/acquire", `{"max_wait":"0s"}`)
	r = e.must(200, "POST", "/v1/limiters/s/acquire", `{"max_wait":"0s"}`)
	var a struct {
		Granted bool  `json:"granted"`
		Shadow  bool  `json:"shadow"`
		Retry   int64 `json:"retry_after_ns"`
		Permits int64 `json:"permits"`
	}
	r.decode(t, &a)
	if !a.Granted || !a.Shadow || a.Retry <= 0 || a.Permits != 1 {
		t.Errorf("shadow refusal: %s", r.body)
	}
	r = e.must(200, "POST", "/v1/acquire", `{"requests":[{"name":"s"}],"max_wait":"0s"}`)
	if !strings.Contains(string(r.body), `"shadow":true`) {
		t.Errorf("shadow refusal in /v1/acquire: %s", r.body)
	}
	// PATCH turns it off: refused.
	r = e.must(200, "PATCH", "/v1/limiters/s", `{"shadow":null}`, "Content-Type", "application/merge-patch+json")
	if cfg := r.obj(t)["config"].(map[string]any); cfg["shadow"] != nil {
		t.Errorf("config after PATCH: %v", cfg)
	}
	e.must(429, "POST", "/v1/limiters/s/acquire", `{"max_wait":"0s"}`)
	m := string(e.must(200, "GET", "/metrics", nil).body)
	if !strings.Contains(m, `limitd_permits_total{decision="shadow",limiter="s",template=""} 2`) {
		t.Errorf("metrics lack 2 shadow permits:\n%s", m)
	}
	e.must(200, "PATCH", "/v1/limiters/s", `{"shadow":true}`, "Content-Type", "application/merge-patch+json")
	if cfg := e.must(200, "GET", "/v1/limiters/s", nil).obj(t)["config"].(map[string]any); cfg["shadow"] != true {
		t.Errorf("config after PATCH back: %v", cfg)
	}
}

// A concurrency limiter in shadow mode: a refused slot is 200 without a
// lease.
func TestShadowSlotHTTP(t *testing.T) {
	e := newEnv(t)
	e.must(201, "PUT", "/v1/limiters/sem", `{"kind":"concurrency","limit":1,"shadow":true}`)
	e.must(200, "POST", "/v1/limiters/sem/acquire", nil)
	r := e.must(200, "POST", "/v1/limiters/sem/acquire", nil)
	o := r.obj(t)
	if o["shadow"] != true || o["lease_id"] != nil || o["in_use"] != 1.0 {
		t.Errorf("shadow slot: %s", r.body)
	}
	m := string(e.must(200, "GET", "/metrics", nil).body)
	if !strings.Contains(m, `limitd_slot_acquisitions_total{decision="shadow",limiter="sem",template=""} 1`) {
		t.Errorf("metrics lack the shadow slot:\n%s", m)
	}
}
