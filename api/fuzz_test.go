package api_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/limitd/limitd/api"
)

// FuzzHandlers sends arbitrary JSON bodies to the endpoints that take one.
// Whatever the body, the answer is never a 5xx (but 503) and always JSON
// that openapi.yaml allows. `go test` runs the seed corpus.
func FuzzHandlers(f *testing.F) {
	for _, s := range []struct {
		op   uint8
		body string
	}{
		{0, `{"rate":5}`},
		{0, `{"kind":"smooth","rate":2,"warmup":"4s","cold_factor":3}`},
		{0, `{"kind":"smooth","rate":5,"max_burst_seconds":0,"initial_permits":1e300}`},
		{0, `{"spec":"12000,1.1,restart"}`},
		{0, `{"spec":"1/h;inf"}`},
		{0, `{"rate":1e-7}`},
		{0, `{"rate":1e9,"burst":"inf","max_backlog":"0s"}`},
		{0, `{"rate":1,"burst":1e6,"max_backlog":"312h"}`},
		{0, `{"rate":5,"rate":"x"}`},
		{0, `{"kind":null,"rate":null}`},
		{0, `[]`},
		{0, `null`},
		{0, `"x"`},
		{0, "\x00"},
		{0, `{"a":{"b":[1,{"c":null}]}}`},
		{1, `{"rate":20}`},
		{1, `{"rate":null}`},
		{1, `{"kind":"smooth"}`},
		{1, `{"spec":"100,1.5"}`},
		{1, `{"max_backlog":"1ns"}`},
		{1, `{"burst":{"x":1}}`},
		{1, `{}`},
		{2, ``},
		{2, `{}`},
		{2, `{"permits":3,"max_wait":"1ms","block":true}`},
		{2, `{"permits":9223372036854775807}`},
		{2, `{"permits":-9223372036854775808,"max_wait":"-9223372036854775807ns"}`},
		{2, `{"max_wait":"2562047h47m16.854775807s"}`},
		{2, `{"block":true}`},
		{3, `{"pattern":"u:*","limiter":{"rate":1}}`},
		{3, `{"pattern":"*","order":-9223372036854775808,"idle_ttl":"1ns","limiter":{"kind":"smooth","rate":1e9}}`},
		{3, `{"pattern":"[","limiter":{}}`},
		{0, `{"kind":"share","capacity":1e308,"algorithm":"none","lease":"1ns","learning":"0s"}`},
		{0, `{"kind":"concurrency","limit":1000000,"lease":"312h"}`},
		{4, `{"client_id":"a","wants":1e308,"has":1e308,"priority":1e6}`},
		{4, `{"client_id":"a","wants":1,"priority":1e308}`},
		{4, `{"client_id":"a","wants":0,"has":0,"priority":0}`},
		{4, `{"client_id":"a","wants":5e-324}`},
		{4, `{"client_id":"` + "\u00e9" + `","wants":1}`},
		{4, `{"client_id":null,"wants":-0}`},
		{5, `{"lease_id":"00"}`},
		{5, `{"lease_id":"` + strings.Repeat("f", 32) + `"}`},
		{5, `{"lease_id":["x"]}`},
		{6, ``},
		{6, `{}`},
		{6, `{"permits":1}`},
	} {
		f.Add(s.op, s.body)
	}
	e := newEnv(f, func(o *api.Options) { o.RequestTimeout = 100 * time.Millisecond })
	e.must(201, "PUT", "/v1/limiters/fz", `{"rate":1000}`)
	e.must(201, "PUT", "/v1/limiters/fz-share", `{"kind":"share","capacity":100}`)
	e.must(201, "PUT", "/v1/limiters/fz-conc", `{"kind":"concurrency","limit":3,"lease":"1s"}`)
	ops := []struct{ method, path string }{
		{"PUT", "/v1/limiters/fz-put"},
		{"PATCH", "/v1/limiters/fz"},
		{"POST", "/v1/limiters/fz/acquire"},
		{"PUT", "/v1/templates/fz-t"},
		{"POST", "/v1/limiters/fz-share/capacity"},
		{"POST", "/v1/limiters/fz-conc/renew"},
		{"POST", "/v1/limiters/fz-conc/acquire"},
	}
	f.Fuzz(func(t *testing.T, op uint8, body string) {
		e.t = t
		o := ops[int(op)%len(ops)]
		r := e.bad(o.method, o.path, body)
		if r.code >= 500 && r.code != 503 {
			t.Fatalf("%s %s %q: %s", o.method, o.path, body, r)
		}
		if r.code != 204 && !json.Valid(r.body) {
			t.Fatalf("%s %s %q: not JSON: %s", o.method, o.path, body, r)
		}
		// Keep the PATCH target a schedule limiter for the next input.
		if o.method == "PATCH" && r.code == 200 {
			e.bad("PUT", "/v1/limiters/fz", `{"rate":1000}`)
		}
	})
}
