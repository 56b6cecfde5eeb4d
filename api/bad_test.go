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
	e.must(201, "PUT", "/v1/limiters/share", `{"kind":"share","capacity":120}`)
	e.must(201, "PUT", "/v1/limiters/conc", `{"kind":"concurrency","limit":1}`)
	e.must(200, "POST", "/v1/limiters/conc/acquire", nil) // full: a renew of an unknown lease cannot take a slot

	huge := `{"rate":1,"spec":"` + strings.Repeat("x", 64<<10) + `"}`
	user := []string{"Authorization", "Bearer " + userToken}
	none := []string{"Authorization", ""}
	long := strings.Repeat("c", 200)
	capURL, known := "/v1/limiters/share/capacity", `{"lease_id":"0123456789abcdef0123456789abcdef"}`
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
		// max_reserve (default 1m): 601 permits of a 10/s limiter take more
		{"permits beyond max_reserve", "POST", "/v1/limiters/sched/acquire", `{"permits":601}`, user, 400, "permits"},
		{"grant beyond max_reserve", "POST", "/v1/limiters/sched/grant", `{"permits":601}`, user, 400, "permits"},
		{"permits beyond max_reserve on a template", "POST", "/v1/limiters/u:9/acquire", `{"permits":61}`, user, 400, "permits"},
		{"max_reserve zero", "PUT", "/v1/limiters/x", `{"rate":1,"max_reserve":"0s"}`, nil, 400, "max_reserve"},
		{"max_reserve too long", "PUT", "/v1/limiters/x", `{"rate":1,"max_reserve":"10000h"}`, nil, 400, "max_reserve"},
		{"max_reserve on share", "PUT", "/v1/limiters/x", `{"kind":"share","capacity":1,"max_reserve":"1s"}`, nil, 400, "max_reserve"},
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
		// share: capacity
		{"capacity wants negative", "POST", capURL, `{"client_id":"a","wants":-1}`, user, 400, "wants"},
		{"capacity wants NaN as a string", "POST", capURL, `{"client_id":"a","wants":"NaN"}`, user, 400, "wants"},
		{"capacity wants beyond float64", "POST", capURL, `{"client_id":"a","wants":1e400}`, user, 400, "wants"},
		{"capacity wants as a string", "POST", capURL, `{"client_id":"a","wants":"5"}`, user, 400, "wants"},
		{"capacity wants missing", "POST", capURL, `{"client_id":"a"}`, user, 400, "wants"},
		{"capacity wants null", "POST", capURL, `{"client_id":"a","wants":null}`, user, 400, "wants"},
		{"capacity wants an object", "POST", capURL, `{"client_id":"a","wants":{"n":1}}`, user, 400, "wants"},
		{"capacity has negative", "POST", capURL, `{"client_id":"a","wants":1,"has":-0.5}`, user, 400, "has"},
		{"capacity has Infinity as a string", "POST", capURL, `{"client_id":"a","wants":1,"has":"Infinity"}`, user, 400, "has"},
		{"capacity has beyond float64", "POST", capURL, `{"client_id":"a","wants":1,"has":-1e999}`, user, 400, "has"},
		{"capacity priority negative", "POST", capURL, `{"client_id":"a","wants":1,"priority":-2}`, user, 400, "priority"},
		{"capacity priority over 1e6", "POST", capURL, `{"client_id":"a","wants":1,"priority":1e7}`, user, 400, "priority"},
		{"capacity priority a word", "POST", capURL, `{"client_id":"a","wants":1,"priority":"high"}`, user, 400, "priority"},
		{"capacity client_id missing", "POST", capURL, `{"wants":1}`, user, 400, "client_id"},
		{"capacity client_id empty", "POST", capURL, `{"client_id":"","wants":1}`, user, 400, "client_id"},
		{"capacity client_id 200 chars", "POST", capURL, `{"client_id":"` + long + `","wants":1}`, user, 400, "client_id"},
		{"capacity client_id with a space", "POST", capURL, `{"client_id":"a b","wants":1}`, user, 400, "client_id"},
		{"capacity client_id a number", "POST", capURL, `{"client_id":7,"wants":1}`, user, 400, "client_id"},
		{"capacity unknown field", "POST", capURL, `{"client_id":"a","wants":1,"want":2}`, user, 400, "want"},
		{"capacity empty body", "POST", capURL, "", user, 400, ""},
		{"capacity array body", "POST", capURL, `[{"client_id":"a","wants":1}]`, user, 400, ""},
		{"capacity bad name", "POST", "/v1/limiters/-s/capacity", `{"client_id":"a","wants":1}`, user, 400, "name"},
		{"capacity unknown limiter", "POST", "/v1/limiters/nobody/capacity", `{"client_id":"a","wants":1}`, user, 404, ""},
		{"capacity on a schedule limiter", "POST", "/v1/limiters/sched/capacity", `{"client_id":"a","wants":1}`, user, 409, ""},
		{"capacity on a concurrency limiter", "POST", "/v1/limiters/conc/capacity", `{"client_id":"a","wants":1}`, user, 409, ""},
		{"capacity without a token", "POST", capURL, `{"client_id":"a","wants":1}`, none, 401, ""},
		{"return capacity client_id 200 chars", "DELETE", capURL + "/" + long, nil, user, 400, "client_id"},
		{"return capacity client_id bad", "DELETE", capURL + "/.a", nil, user, 400, "client_id"},
		{"return capacity not held", "DELETE", capURL + "/ghost", nil, user, 404, "client_id"},
		{"return capacity unknown limiter", "DELETE", "/v1/limiters/nobody/capacity/a", nil, user, 404, ""},
		{"return capacity on a schedule limiter", "DELETE", "/v1/limiters/sched/capacity/a", nil, user, 409, ""},
		// concurrency: acquire, release, renew
		{"acquire on share", "POST", "/v1/limiters/share/acquire", nil, user, 409, ""},
		{"acquire on share with permits", "POST", "/v1/limiters/share/acquire", `{"permits":2}`, user, 409, ""},
		{"slot acquire with permits", "POST", "/v1/limiters/conc/acquire", `{"permits":1}`, user, 400, "permits"},
		{"slot acquire with max_wait", "POST", "/v1/limiters/conc/acquire", `{"max_wait":"1s"}`, user, 400, "max_wait"},
		{"slot acquire with block", "POST", "/v1/limiters/conc/acquire", `{"block":false}`, user, 400, "block"},
		{"slot acquire unknown field", "POST", "/v1/limiters/conc/acquire", `{"lease":"1m"}`, user, 400, "lease"},
		{"release unknown lease_id", "POST", "/v1/limiters/conc/release", known, user, 404, "lease_id"},
		{"renew unknown lease_id", "POST", "/v1/limiters/conc/renew", known, user, 404, "lease_id"},
		{"release lease_id missing", "POST", "/v1/limiters/conc/release", `{}`, user, 400, "lease_id"},
		{"release empty body", "POST", "/v1/limiters/conc/release", nil, user, 400, "lease_id"},
		{"release lease_id a number", "POST", "/v1/limiters/conc/release", `{"lease_id":12}`, user, 400, "lease_id"},
		{"release lease_id 200 chars", "POST", "/v1/limiters/conc/release", `{"lease_id":"` + strings.Repeat("a", 200) + `"}`, user, 400, "lease_id"},
		{"renew lease_id not hex", "POST", "/v1/limiters/conc/renew", `{"lease_id":"lease-1"}`, user, 400, "lease_id"},
		{"renew lease_id empty", "POST", "/v1/limiters/conc/renew", `{"lease_id":""}`, user, 400, "lease_id"},
		{"renew lease_id null", "POST", "/v1/limiters/conc/renew", `{"lease_id":null}`, user, 400, "lease_id"},
		{"renew unknown field", "POST", "/v1/limiters/conc/renew", `{"lease_id":"00","ttl":"1m"}`, user, 400, "ttl"},
		{"renew lease_id short", "POST", "/v1/limiters/conc/renew", `{"lease_id":"0123456789abcdef"}`, user, 400, "lease_id"},
		{"renew lease_id upper case", "POST", "/v1/limiters/conc/renew", `{"lease_id":"0123456789ABCDEF0123456789ABCDEF"}`, user, 400, "lease_id"},
		{"renew not JSON", "POST", "/v1/limiters/conc/renew", `lease_id=00`, append([]string{"Content-Type", "text/plain"}, user...), 415, ""},
		{"release on a schedule limiter", "POST", "/v1/limiters/sched/release", known, user, 409, ""},
		{"renew on a share limiter", "POST", "/v1/limiters/share/renew", known, user, 409, ""},
		{"renew unknown limiter", "POST", "/v1/limiters/nobody/renew", known, user, 404, ""},
		{"release bad name", "POST", "/v1/limiters/a*/release", known, user, 400, "name"},
		{"release without a token", "POST", "/v1/limiters/conc/release", known, none, 401, ""},
		{"wait on concurrency", "GET", "/v1/limiters/conc/wait", nil, user, 409, ""},
		{"reset on share", "POST", "/v1/limiters/share/reset", nil, nil, 409, ""},
		// share and concurrency configs
		{"share capacity zero", "PUT", "/v1/limiters/x", `{"kind":"share","capacity":0}`, nil, 400, "capacity"},
		{"share capacity missing", "PUT", "/v1/limiters/x", `{"kind":"share"}`, nil, 400, "capacity"},
		{"share capacity negative", "PUT", "/v1/limiters/x", `{"kind":"share","capacity":-5}`, nil, 400, "capacity"},
		{"share capacity a string", "PUT", "/v1/limiters/x", `{"kind":"share","capacity":"120"}`, nil, 400, "capacity"},
		{"share algorithm unknown", "PUT", "/v1/limiters/x", `{"kind":"share","capacity":1,"algorithm":"fairest"}`, nil, 400, "algorithm"},
		{"share refresh_interval over lease", "PUT", "/v1/limiters/x", `{"kind":"share","capacity":1,"lease":"10s","refresh_interval":"20s"}`, nil, 400, "refresh_interval"},
		{"share safe_capacity over capacity", "PUT", "/v1/limiters/x", `{"kind":"share","capacity":1,"safe_capacity":2}`, nil, 400, "safe_capacity"},
		{"share learning negative", "PUT", "/v1/limiters/x", `{"kind":"share","capacity":1,"learning":"-1s"}`, nil, 400, "learning"},
		{"share lease not a duration", "PUT", "/v1/limiters/x", `{"kind":"share","capacity":1,"lease":60}`, nil, 400, "lease"},
		{"rate on share", "PUT", "/v1/limiters/x", `{"kind":"share","capacity":1,"rate":5}`, nil, 400, "rate"},
		{"limit on share", "PUT", "/v1/limiters/x", `{"kind":"share","capacity":1,"limit":5}`, nil, 400, "limit"},
		{"concurrency lease zero", "PUT", "/v1/limiters/x", `{"kind":"concurrency","limit":1,"lease":"0s"}`, nil, 400, "lease"},
		{"concurrency limit missing", "PUT", "/v1/limiters/x", `{"kind":"concurrency"}`, nil, 400, "limit"},
		{"concurrency limit zero", "PUT", "/v1/limiters/x", `{"kind":"concurrency","limit":0}`, nil, 400, "limit"},
		{"concurrency limit fractional", "PUT", "/v1/limiters/x", `{"kind":"concurrency","limit":1.5}`, nil, 400, "limit"},
		{"concurrency limit huge", "PUT", "/v1/limiters/x", `{"kind":"concurrency","limit":10000000}`, nil, 400, "limit"},
		{"capacity on concurrency", "PUT", "/v1/limiters/x", `{"kind":"concurrency","limit":1,"capacity":3}`, nil, 400, "capacity"},
		{"lease on schedule", "PUT", "/v1/limiters/x", `{"rate":1,"lease":"1s"}`, nil, 400, "lease"},
		{"PATCH share capacity negative", "PATCH", "/v1/limiters/share", `{"capacity":-1}`, nil, 400, "capacity"},
		{"PATCH share capacity removed", "PATCH", "/v1/limiters/share", `{"capacity":null}`, nil, 400, "capacity"},
		{"PATCH concurrency limit a string", "PATCH", "/v1/limiters/conc", `{"limit":"2"}`, nil, 400, "limit"},
		{"PATCH concurrency rate", "PATCH", "/v1/limiters/conc", `{"rate":5}`, nil, 400, "rate"},
		{"PATCH share to concurrency", "PATCH", "/v1/limiters/share", `{"kind":"concurrency","limit":1}`, nil, 409, ""},
		{"PATCH schedule to share", "PATCH", "/v1/limiters/sched", `{"kind":"share"}`, nil, 409, ""},
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
		{"template of a share limiter", "PUT", "/v1/templates/t2", `{"pattern":"s:*","limiter":{"kind":"share","capacity":1}}`, nil, 400, "limiter.kind"},
		{"template of a concurrency limiter", "PUT", "/v1/templates/t2", `{"pattern":"c:*","limiter":{"kind":"concurrency","limit":1}}`, nil, 400, "limiter.kind"},
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
