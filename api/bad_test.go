package api_test

import (
	"strings"
	"testing"

	"github.com/limitd/limitd/api"
)

const (
	adminToken = "admin-secret"
	userToken  = "user-secret"
)

// TestBadInput sends input that breaks the contract. Each gets its 4xx as
// problem+json naming the field at fault, and changes nothing in Redis.
func TestBadInput(t *testing.T) {
	e := newEnv(t, func(o *api.Options) { o.AdminToken, o.Token = adminToken, userToken })
	e.must(201, "PUT", "/v1/limiters/sched", `{"rate":10}`)
	e.must(201, "PUT", "/v1/limiters/smooth", `{"kind":"smooth","rate":5}`)
	e.must(201, "PUT", "/v1/templates/t1", `{"pattern":"u:*","limiter":{"rate":1}}`)

	huge := `{"rate":1,"spec":"` + strings.Repeat("x", 64<<10) + `"}`
	user := []string{"Authorization", "Bearer " + userToken}
	cases := []struct {
		name, method, path string
		body               any // nil: none
		header             []string
		status             int
		field              string // "" when no one field is at fault
	}{
		// names
		{"name starts with a dash", "PUT", "/v1/limiters/-bad", `{"rate":1}`, nil, 400, "name"},
		{"name with a star", "PUT", "/v1/limiters/a*b", `{"rate":1}`, nil, 400, "name"},
		{"name too long", "PUT", "/v1/limiters/" + strings.Repeat("n", 129), `{"rate":1}`, nil, 400, "name"},
		{"name with an escape", "GET", "/v1/limiters/a%20b/wait", nil, nil, 400, "name"},
		{"template id bad", "PUT", "/v1/templates/.t", `{"pattern":"*","limiter":{"rate":1}}`, nil, 400, "id"},
		// rates and other numbers
		{"rate negative", "PUT", "/v1/limiters/x", `{"rate":-1}`, nil, 400, "rate"},
		{"rate zero", "PUT", "/v1/limiters/x", `{"rate":0}`, nil, 400, "rate"},
		{"rate missing", "PUT", "/v1/limiters/x", `{"kind":"schedule"}`, nil, 400, "rate"},
		{"rate huge", "PUT", "/v1/limiters/x", `{"rate":1e10}`, nil, 400, "rate"},
		{"rate beyond float64", "PUT", "/v1/limiters/x", `{"rate":1e400}`, nil, 400, "rate"},
		{"rate NaN as a string", "PUT", "/v1/limiters/x", `{"rate":"NaN"}`, nil, 400, "rate"},
		{"rate NaN bare", "PUT", "/v1/limiters/x", `{"rate":NaN}`, nil, 400, ""},
		{"rate as a string", "PUT", "/v1/limiters/x", `{"rate":"5"}`, nil, 400, "rate"},
		{"burst below 1", "PUT", "/v1/limiters/x", `{"rate":1,"burst":0.5}`, nil, 400, "burst"},
		{"burst word", "PUT", "/v1/limiters/x", `{"rate":1,"burst":"infinity"}`, nil, 400, "burst"},
		{"kind unknown", "PUT", "/v1/limiters/x", `{"kind":"bucket","rate":1}`, nil, 400, "kind"},
		{"kind as a number", "PUT", "/v1/limiters/x", `{"kind":1,"rate":1}`, nil, 400, "kind"},
		{"burst on smooth", "PUT", "/v1/limiters/x", `{"kind":"smooth","rate":1,"burst":2}`, nil, 400, "burst"},
		{"warmup with max_burst_seconds", "PUT", "/v1/limiters/x", `{"kind":"smooth","rate":1,"warmup":"1s","max_burst_seconds":1}`, nil, 400, "warmup"},
		{"cold_factor below 1", "PUT", "/v1/limiters/x", `{"kind":"smooth","rate":1,"warmup":"1s","cold_factor":0.5}`, nil, 400, "cold_factor"},
		{"max_burst_seconds negative", "PUT", "/v1/limiters/x", `{"kind":"smooth","rate":1,"max_burst_seconds":-1}`, nil, 400, "max_burst_seconds"},
		{"spec garbage", "PUT", "/v1/limiters/x", `{"spec":"fast"}`, nil, 400, "spec"},
		{"spec bad verb", "PUT", "/v1/limiters/x", `{"spec":"10,1.1,explode"}`, nil, 400, "spec"},
		{"spec with rate", "PUT", "/v1/limiters/x", `{"spec":"10","rate":10}`, nil, 400, "spec"},
		// durations
		{"max_backlog not a duration", "PUT", "/v1/limiters/x", `{"rate":1,"max_backlog":"10 parsecs"}`, nil, 400, "max_backlog"},
		{"max_backlog negative", "PUT", "/v1/limiters/x", `{"rate":1,"max_backlog":"-1s"}`, nil, 400, "max_backlog"},
		{"max_backlog a number", "PUT", "/v1/limiters/x", `{"rate":1,"max_backlog":10}`, nil, 400, "max_backlog"},
		{"max_backlog too long", "PUT", "/v1/limiters/x", `{"rate":1,"max_backlog":"10000h"}`, nil, 400, "max_backlog"},
		{"warmup zero-ish garbage", "PUT", "/v1/limiters/x", `{"kind":"smooth","rate":1,"warmup":"4"}`, nil, 400, "warmup"},
		// JSON shape
		{"unknown field", "PUT", "/v1/limiters/x", `{"rate":1,"rat":2}`, nil, 400, "rat"},
		{"malformed JSON", "PUT", "/v1/limiters/x", `{"rate":`, nil, 400, ""},
		{"syntax error", "PUT", "/v1/limiters/x", `{"rate":1,}`, nil, 400, ""},
		{"empty body", "PUT", "/v1/limiters/x", "", nil, 400, ""},
		{"array body", "PUT", "/v1/limiters/x", `[{"rate":1}]`, nil, 400, ""},
		{"trailing data", "PUT", "/v1/limiters/x", `{"rate":1}{"rate":2}`, nil, 400, ""},
		{"oversized body", "PUT", "/v1/limiters/x", huge, nil, 413, ""},
		{"oversized body without length", "PUT", "/v1/limiters/x", chunked(huge), nil, 413, ""},
		{"not JSON content", "PUT", "/v1/limiters/x", `rate=1`, []string{"Content-Type", "application/x-www-form-urlencoded"}, 415, ""},
		{"XML", "PUT", "/v1/limiters/x", `<rate>1</rate>`, []string{"Content-Type", "text/xml"}, 415, ""},
		// PATCH
		{"PATCH kind change", "PATCH", "/v1/limiters/sched", `{"kind":"smooth"}`, nil, 409, ""},
		{"PATCH kind change with smooth fields", "PATCH", "/v1/limiters/smooth", `{"kind":"schedule","burst":2}`, nil, 409, ""},
		{"PATCH unknown field", "PATCH", "/v1/limiters/sched", `{"speed":3}`, nil, 400, "speed"},
		{"PATCH bad rate", "PATCH", "/v1/limiters/sched", `{"rate":-5}`, nil, 400, "rate"},
		{"PATCH rate removed", "PATCH", "/v1/limiters/sched", `{"rate":null}`, nil, 400, "rate"},
		{"PATCH wrong type", "PATCH", "/v1/limiters/smooth", `{"max_burst_seconds":"1s"}`, nil, 400, "max_burst_seconds"},
		{"PATCH not an object", "PATCH", "/v1/limiters/sched", `[1]`, nil, 400, ""},
		{"PATCH null", "PATCH", "/v1/limiters/sched", `null`, nil, 400, ""},
		{"PATCH missing limiter", "PATCH", "/v1/limiters/none", `{"rate":1}`, nil, 404, ""},
		// acquire
		{"permits 0", "POST", "/v1/limiters/sched/acquire", `{"permits":0}`, user, 400, "permits"},
		{"permits negative", "POST", "/v1/limiters/sched/acquire", `{"permits":-3}`, user, 400, "permits"},
		{"permits 1e12", "POST", "/v1/limiters/sched/acquire", `{"permits":1000000000000}`, user, 400, "permits"},
		{"permits fractional", "POST", "/v1/limiters/sched/acquire", `{"permits":1.5}`, user, 400, "permits"},
		{"permits beyond int64", "POST", "/v1/limiters/sched/acquire", `{"permits":1e19}`, user, 400, "permits"},
		{"max_wait garbage", "POST", "/v1/limiters/sched/acquire", `{"max_wait":"soon"}`, user, 400, "max_wait"},
		{"max_wait a number", "POST", "/v1/limiters/sched/acquire", `{"max_wait":100}`, user, 400, "max_wait"},
		{"block a string", "POST", "/v1/limiters/sched/acquire", `{"block":"yes"}`, user, 400, "block"},
		{"acquire unknown field", "POST", "/v1/limiters/sched/acquire", `{"permit":1}`, user, 400, "permit"},
		{"acquire unknown limiter", "POST", "/v1/limiters/nobody/acquire", `{}`, user, 404, ""},
		{"wait unknown limiter", "GET", "/v1/limiters/nobody/wait", nil, user, 404, ""},
		{"reset unknown limiter", "POST", "/v1/limiters/nobody/reset", nil, nil, 404, ""},
		{"delete unknown limiter", "DELETE", "/v1/limiters/nobody", nil, nil, 404, ""},
		// list
		{"limit zero", "GET", "/v1/limiters?limit=0", nil, user, 400, "limit"},
		{"limit word", "GET", "/v1/limiters?limit=ten", nil, user, 400, "limit"},
		{"limit too big", "GET", "/v1/limiters?limit=5000", nil, user, 400, "limit"},
		{"cursor not a name", "GET", "/v1/limiters?cursor=*x", nil, user, 400, "cursor"},
		// templates
		{"template bad pattern", "PUT", "/v1/templates/t2", `{"pattern":"u/[","limiter":{"rate":1}}`, nil, 400, "pattern"},
		{"template without limiter", "PUT", "/v1/templates/t2", `{"pattern":"u:*"}`, nil, 400, "limiter"},
		{"template unknown nested field", "PUT", "/v1/templates/t2", `{"pattern":"u:*","limiter":{"rate":1,"brust":2}}`, nil, 400, "limiter.brust"},
		{"template nested wrong type", "PUT", "/v1/templates/t2", `{"pattern":"u:*","limiter":{"rate":"1"}}`, nil, 400, "limiter.rate"},
		{"template nested bad rate", "PUT", "/v1/templates/t2", `{"pattern":"u:*","limiter":{"rate":-1}}`, nil, 400, "limiter.rate"},
		{"template nested bad spec", "PUT", "/v1/templates/t2", `{"pattern":"u:*","limiter":{"spec":"x"}}`, nil, 400, "limiter.spec"},
		{"template idle_ttl zero", "PUT", "/v1/templates/t2", `{"pattern":"u:*","idle_ttl":"0s","limiter":{"rate":1}}`, nil, 400, "idle_ttl"},
		{"template id mismatch", "PUT", "/v1/templates/t2", `{"id":"t3","pattern":"u:*","limiter":{"rate":1}}`, nil, 400, "id"},
		{"template order fractional", "PUT", "/v1/templates/t2", `{"pattern":"u:*","order":1.5,"limiter":{"rate":1}}`, nil, 400, "order"},
		{"unknown template", "GET", "/v1/templates/t9", nil, user, 404, ""},
		// auth
		{"PUT without a token", "PUT", "/v1/limiters/x", `{"rate":1}`, []string{"Authorization", ""}, 401, ""},
		{"PUT with the user token", "PUT", "/v1/limiters/x", `{"rate":1}`, user, 401, ""},
		{"PATCH with a wrong token", "PATCH", "/v1/limiters/sched", `{"rate":1}`, []string{"Authorization", "Bearer nope"}, 401, ""},
		{"reset with the user token", "POST", "/v1/limiters/sched/reset", nil, user, 401, ""},
		{"DELETE template with the user token", "DELETE", "/v1/templates/t1", nil, user, 401, ""},
		{"GET without a token", "GET", "/v1/limiters/sched", nil, []string{"Authorization", ""}, 401, ""},
		{"acquire with basic auth", "POST", "/v1/limiters/sched/acquire", nil, []string{"Authorization", "Basic dXNlcjpwYXNz"}, 401, ""},
		{"acquire with an empty bearer", "POST", "/v1/limiters/sched/acquire", nil, []string{"Authorization", "Bearer "}, 401, ""},
		// routes and methods
		{"unknown route", "GET", "/v1/limits", nil, nil, 404, ""},
		{"nested too deep", "GET", "/v1/limiters/a/b/c", nil, nil, 404, ""},
		{"method not allowed", "DELETE", "/v1/limiters", nil, nil, 405, ""},
		{"POST on a limiter", "POST", "/v1/limiters/sched", `{"rate":1}`, nil, 405, ""},
	}
	if len(cases) < 30 {
		t.Fatalf("only %d cases", len(cases))
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e.t = t
			before := e.dump()
			r := e.bad(c.method, c.path, c.body, c.header...)
			if r.code != c.status {
				t.Fatalf("got %s, want %d", r, c.status)
			}
			if p := r.problem(t); p.Field != c.field {
				t.Errorf("field = %q, want %q (%s)", p.Field, c.field, p.Detail)
			}
			if after := e.dump(); after != before {
				t.Errorf("Redis changed:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
	e.t = t
	// Nothing above was a 5xx, and nothing hid behind a 200.
	m := string(e.must(200, "GET", "/metrics", nil, "Authorization", "").body)
	if strings.Contains(m, `status="5`) {
		t.Errorf("a 5xx was served:\n%s", grep(m, `status="5`))
	}
}
