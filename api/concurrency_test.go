package api_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd/api"
	"github.com/limitd/limitd/core"
)

// slot is the answer of a concurrency acquire (200 or 429).
type slot struct {
	Granted    bool   `json:"granted"`
	LeaseID    string `json:"lease_id"`
	Expires    int64  `json:"expires_ns"`
	InUse      int64  `json:"in_use"`
	Limit      int64  `json:"limit"`
	RetryAfter int64  `json:"retry_after_ns"`
}

func (e *env) slot(want int, name string, body any) slot {
	e.t.Helper()
	var s slot
	e.must(want, "POST", "/v1/limiters/"+name+"/acquire", body).decode(e.t, &s)
	return s
}

func lease(id string) map[string]string { return map[string]string{"lease_id": id} }

// clock moves the Redis clock and every TTL forward together, so that
// expiry is seen whether the store compares lease times with TIME or lets
// keys expire.
type clock struct {
	e   *env
	now time.Duration // since t0
}

func (c *clock) advance(d time.Duration) {
	c.now += d
	c.e.at(c.now)
	c.e.m.FastForward(d)
}

func (c *clock) ns(d time.Duration) int64 { return t0.Add(c.now + d).UnixNano() }

// A concurrency limiter of 2: two acquires are granted, the third is 429
// until a release; renewals keep a lease, an expired or released one is
// lost (404).
func TestConcurrencyLimit(t *testing.T) {
	e := newEnv(t)
	clk := &clock{e: e}
	r := e.must(201, "PUT", "/v1/limiters/pool", `{"kind":"concurrency","limit":2}`)
	if got := string(mustJSON(t, r.obj(t)["config"])); got != `{"kind":"concurrency","lease":"30s","limit":2}` {
		t.Errorf("canonical config = %s", got)
	}
	if _, ok := r.obj(t)["state"]; ok {
		t.Errorf("a concurrency limiter's view has a state: %s", r)
	}

	a := e.slot(200, "pool", nil)
	if !a.Granted || a.LeaseID == "" || a.Expires != clk.ns(30*time.Second) || a.InUse != 1 || a.Limit != 2 {
		t.Errorf("first acquire: %+v", a)
	}
	b := e.slot(200, "pool", `{}`)
	if b.InUse != 2 || b.LeaseID == a.LeaseID {
		t.Errorf("second acquire: %+v (first %+v)", b, a)
	}
	clk.advance(5 * time.Second)
	r = e.must(429, "POST", "/v1/limiters/pool/acquire", nil)
	var denied slot
	r.decode(t, &denied)
	if denied.Granted || denied.RetryAfter != 25e9 || denied.InUse != 2 || r.header.Get("Retry-After") != "25" {
		t.Errorf("third acquire: %s, Retry-After %q; want retry after 25s", r, r.header.Get("Retry-After"))
	}

	e.must(204, "POST", "/v1/limiters/pool/release", lease(a.LeaseID))
	c := e.slot(200, "pool", nil)
	if !c.Granted || c.Expires != clk.ns(30*time.Second) {
		t.Errorf("acquire after a release: %+v", c)
	}
	for _, op := range []string{"release", "renew"} {
		r = e.must(404, "POST", "/v1/limiters/pool/"+op, lease(a.LeaseID))
		if p := r.problem(t); p.Field != "lease_id" {
			t.Errorf("%s of a released lease: %+v", op, p)
		}
	}

	// b, renewed, outlives c, which expires at +35s.
	var rn struct {
		LeaseID string `json:"lease_id"`
		Expires int64  `json:"expires_ns"`
	}
	e.must(200, "POST", "/v1/limiters/pool/renew", lease(b.LeaseID)).decode(t, &rn)
	if rn.LeaseID != b.LeaseID || rn.Expires != clk.ns(30*time.Second) {
		t.Errorf("renew at +5s: %+v", rn)
	}
	clk.advance(20 * time.Second) // +25s
	e.must(200, "POST", "/v1/limiters/pool/renew", lease(b.LeaseID)).decode(t, &rn)
	if rn.Expires != clk.ns(30*time.Second) {
		t.Errorf("renew at +25s: %+v", rn)
	}
	clk.advance(15 * time.Second) // +40s: c expired at +35s
	if d := e.slot(200, "pool", nil); d.InUse != 2 {
		t.Errorf("acquire of the expired lease's slot: %+v", d)
	}
	// Its slot taken, the expired lease is lost (with a slot free, a renew
	// would register it again: Redis may have lost the slots).
	for _, op := range []string{"renew", "release"} {
		r := e.must(404, "POST", "/v1/limiters/pool/"+op, lease(c.LeaseID))
		if p := r.problem(t); p.Field != "lease_id" || !strings.Contains(p.Detail, c.LeaseID) {
			t.Errorf("%s of an expired lease: %+v", op, p)
		}
	}
	e.must(200, "POST", "/v1/limiters/pool/renew", lease(b.LeaseID))
	if s := e.slot(429, "pool", nil); s.RetryAfter != 30e9 {
		t.Errorf("denied at +40s: %+v, want retry after 30s", s)
	}

	// An unknown limiter is 404 without a field: no lease is at fault.
	if p := e.must(404, "POST", "/v1/limiters/nobody/renew", lease(b.LeaseID)).problem(t); p.Field != "" {
		t.Errorf("renew on an unknown limiter: %+v", p)
	}

	m := string(e.must(200, "GET", "/metrics", nil).body)
	for _, want := range []string{
		`limitd_slot_acquisitions_total{decision="granted",limiter="pool",template=""} 4`,
		`limitd_slot_acquisitions_total{decision="denied",limiter="pool",template=""} 2`,
		`limitd_slot_lease_events_total{event="released",limiter="pool",template=""} 1`,
		`limitd_slot_lease_events_total{event="renewed",limiter="pool",template=""} 3`,
		`limitd_slot_lease_events_total{event="lost",limiter="pool",template=""} 4`,
		// The PUT taught this process that pool is a concurrency limiter:
		// every acquire went to the slot in one round trip.
		`limitd_redis_call_duration_seconds_count{op="acquire"} 0`,
		`limitd_redis_call_duration_seconds_count{op="acquire_slot"} 6`,
		`limitd_http_requests_total{method="POST",route="/v1/limiters/{name}/acquire",status="429"} 2`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s:\n%s", want, grep(m, "slot"))
		}
	}
}

// PATCH reconfigures a concurrency limiter in place: its leases are kept.
// Other calls of the wrong kind are 409.
func TestConcurrencyPatchAndWrongKind(t *testing.T) {
	e := newEnv(t)
	e.must(201, "PUT", "/v1/limiters/c", `{"kind":"concurrency","limit":1,"lease":"1m"}`)
	a := e.slot(200, "c", nil)
	e.slot(429, "c", nil)
	if got := e.must(200, "PATCH", "/v1/limiters/c", `{"limit":3}`).num(t, "version"); got != 2 {
		t.Errorf("version after PATCH = %d", got)
	}
	if s := e.slot(200, "c", nil); s.InUse != 2 || s.Limit != 3 || s.Expires != t0.Add(time.Minute).UnixNano() {
		t.Errorf("after PATCH limit 3: %+v", s)
	}
	e.must(200, "PATCH", "/v1/limiters/c", `{"limit":1,"lease":"10s"}`)
	e.slot(429, "c", nil)
	var rn struct {
		Expires int64 `json:"expires_ns"`
	}
	e.must(200, "POST", "/v1/limiters/c/renew", lease(a.LeaseID)).decode(t, &rn)
	if rn.Expires != t0.Add(10*time.Second).UnixNano() {
		t.Errorf("renew after PATCH lease 10s: %+v", rn)
	}
	if got := string(mustJSON(t, e.must(200, "GET", "/v1/limiters/c", nil).obj(t)["config"])); got != `{"kind":"concurrency","lease":"10s","limit":1}` {
		t.Errorf("GET config = %s", got)
	}
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/v1/limiters/c/wait", ""},
		{"POST", "/v1/limiters/c/reset", ""},
		{"POST", "/v1/limiters/c/capacity", `{"client_id":"x","wants":1}`},
		{"DELETE", "/v1/limiters/c/capacity/x", ""},
		{"PATCH", "/v1/limiters/c", `{"kind":"share","capacity":1}`},
	} {
		var body any
		if c.body != "" {
			body = c.body
		}
		if p := e.must(409, c.method, c.path, body).problem(t); p.Type != "urn:limitd:problem:conflict" {
			t.Errorf("%s %s: %+v", c.method, c.path, p)
		}
	}
	// A share limiter's acquire is 409 with or without a body.
	e.must(200, "PUT", "/v1/limiters/c", `{"kind":"share","capacity":5}`)
	e.must(409, "POST", "/v1/limiters/c/acquire", nil)
	e.must(409, "POST", "/v1/limiters/c/acquire", `{"permits":1}`)
}

// Acquire dispatches on the kind as it is in Redis, whatever another
// process changed: a name this handler took for a concurrency limiter is
// asked again when the store says otherwise.
func TestConcurrencyDispatch(t *testing.T) {
	e := newEnv(t)
	other := *e // another limitd process on the same Redis
	other.reg = prometheus.NewRegistry()
	other.h = api.New(api.Options{Service: core.New(e.st, core.Options{}), Registry: other.reg})

	other.must(201, "PUT", "/v1/limiters/x", `{"kind":"concurrency","limit":1}`)
	a := e.slot(200, "x", nil) // found out through the schedule acquire's 409
	e.slot(429, "x", `{}`)
	before := e.dump()
	r := e.must(400, "POST", "/v1/limiters/x/acquire", `{"permits":1}`)
	if p := r.problem(t); p.Field != "permits" {
		t.Errorf("permits on a concurrency limiter: %+v", p)
	}
	if e.dump() != before {
		t.Error("a rejected acquire changed Redis")
	}

	// Replaced by a schedule limiter elsewhere: permits again.
	other.must(200, "PUT", "/v1/limiters/x", `{"rate":10}`)
	if r := e.must(200, "POST", "/v1/limiters/x/acquire", nil); r.obj(t)["permits"] != 1.0 {
		t.Errorf("acquire after the kind changed to schedule: %s", r)
	}
	e.must(409, "POST", "/v1/limiters/x/release", lease(a.LeaseID)) // a schedule limiter has no leases
	// Back to concurrency, then deleted elsewhere: 404.
	other.must(200, "PUT", "/v1/limiters/x", `{"kind":"concurrency","limit":1}`)
	e.slot(200, "x", nil)
	other.must(204, "DELETE", "/v1/limiters/x", nil)
	e.must(404, "POST", "/v1/limiters/x/acquire", nil)

	m := string(e.must(200, "GET", "/metrics", nil).body)
	for _, want := range []string{
		`limitd_slot_acquisitions_total{decision="granted",limiter="x",template=""} 2`,
		`limitd_slot_acquisitions_total{decision="denied",limiter="x",template=""} 1`,
		`limitd_acquire_decisions_total{decision="granted",limiter="x",template=""} 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s:\n%s", want, grep(m, "decisions_total"))
		}
	}
}

// Many callers at once: exactly limit of them get a slot.
func TestConcurrencyParallel(t *testing.T) {
	e := newEnv(t)
	e.must(201, "PUT", "/v1/limiters/p", `{"kind":"concurrency","limit":5}`)
	const callers = 40
	codes := make(chan int, callers)
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			rec := httptest.NewRecorder()
			e.h.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/limiters/p/acquire", nil))
			codes <- rec.Code
		})
	}
	wg.Wait()
	close(codes)
	n := map[int]int{}
	for c := range codes {
		n[c]++
	}
	if n[200] != 5 || n[429] != callers-5 {
		t.Errorf("answers: %v, want 5 × 200 and %d × 429", n, callers-5)
	}
}

// A client's own lease calls need only the token; config changes the admin
// token.
func TestLeaseAuth(t *testing.T) {
	e := newEnv(t, func(o *api.Options) { o.AdminToken, o.Token = adminToken, userToken })
	none := []string{"Authorization", ""}
	user := []string{"Authorization", "Bearer " + userToken}
	e.must(201, "PUT", "/v1/limiters/c", `{"kind":"concurrency","limit":5}`)
	e.must(201, "PUT", "/v1/limiters/s", `{"kind":"share","capacity":5}`)
	e.must(401, "PUT", "/v1/limiters/c", `{"kind":"concurrency","limit":6}`, user...)

	ask := map[string]any{"client_id": "a", "wants": 1}
	e.must(401, "POST", "/v1/limiters/s/capacity", ask, none...)
	e.must(200, "POST", "/v1/limiters/s/capacity", ask, user...)
	e.must(401, "DELETE", "/v1/limiters/s/capacity/a", nil, none...)
	e.must(204, "DELETE", "/v1/limiters/s/capacity/a", nil, user...)

	e.must(401, "POST", "/v1/limiters/c/acquire", nil, none...)
	var s slot
	e.must(200, "POST", "/v1/limiters/c/acquire", nil, user...).decode(t, &s)
	e.must(401, "POST", "/v1/limiters/c/renew", lease(s.LeaseID), none...)
	e.must(200, "POST", "/v1/limiters/c/renew", lease(s.LeaseID), user...)
	e.must(401, "POST", "/v1/limiters/c/release", lease(s.LeaseID), none...)
	e.must(204, "POST", "/v1/limiters/c/release", lease(s.LeaseID), user...)
}

// With Redis down, the new calls answer 503 like the others.
func TestLeasesRedisDown(t *testing.T) {
	e := newEnvRedis(t, func(ro *redis.Options) { ro.MaxRetries, ro.DialerRetries = -1, 1 })
	e.must(201, "PUT", "/v1/limiters/c", `{"kind":"concurrency","limit":5}`)
	e.must(201, "PUT", "/v1/limiters/s", `{"kind":"share","capacity":5}`)
	e.m.Close()
	for _, c := range []struct {
		method, path string
		body         any
	}{
		{"POST", "/v1/limiters/c/acquire", nil},
		{"POST", "/v1/limiters/c/renew", lease("00ff00ff00ff00ff00ff00ff00ff00ff")},
		{"POST", "/v1/limiters/c/release", lease("00ff00ff00ff00ff00ff00ff00ff00ff")},
		{"POST", "/v1/limiters/s/capacity", map[string]any{"client_id": "a", "wants": 1}},
		{"DELETE", "/v1/limiters/s/capacity/a", nil},
	} {
		r := e.must(http.StatusServiceUnavailable, c.method, c.path, c.body)
		if p := r.problem(t); p.Type != "urn:limitd:problem:unavailable" {
			t.Errorf("%s %s: %+v", c.method, c.path, p)
		}
	}
}
