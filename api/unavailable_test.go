package api_test

import (
	"context"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd/api"
)

// With Redis down, readiness and every store call answer 503 problem+json
// with a clear detail; once Redis is back the same handler recovers.
func TestRedisDown(t *testing.T) {
	// Fail fast while Redis is down; go-redis' default retries and dial
	// attempts take about 1.7 s per request here.
	e := newEnvRedis(t, func(ro *redis.Options) { ro.MaxRetries, ro.DialerRetries = -1, 1 })
	e.must(201, "PUT", "/v1/limiters/r", `{"rate":100}`)
	e.must(200, "POST", "/v1/limiters/r/acquire", nil)

	e.m.Close()
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/readyz", ""},
		{"POST", "/v1/limiters/r/acquire", `{"permits":1}`},
		{"POST", "/v1/limiters/r/charge", `{"permits":300}`},
		{"POST", "/v1/acquire", `{"requests":[{"name":"r"},{"name":"user:1","permits":0}]}`},
		{"GET", "/v1/limiters/r/wait", ""},
		{"GET", "/v1/limiters/r", ""},
		{"PUT", "/v1/limiters/r", `{"rate":200}`},
		{"GET", "/v1/limiters", ""},
		{"GET", "/v1/templates", ""},
	} {
		var body any
		if c.body != "" {
			body = c.body
		}
		r := e.must(503, c.method, c.path, body)
		p := r.problem(t)
		if p.Type != "urn:limitd:problem:unavailable" || !strings.Contains(p.Detail, "Redis is unavailable") {
			t.Errorf("%s %s: %+v", c.method, c.path, p)
		}
		if r.header.Get("Retry-After") == "" {
			t.Errorf("%s %s: no Retry-After", c.method, c.path)
		}
	}
	e.must(200, "GET", "/healthz", nil) // the process still runs
	m := string(e.must(200, "GET", "/metrics", nil).body)
	if !strings.Contains(m, `limitd_errors_total{type="unavailable"} 9`) {
		t.Errorf("unavailable errors not counted:\n%s", grep(m, "limitd_errors_total"))
	}

	if err := e.m.Restart(); err != nil {
		t.Fatalf("restarting miniredis: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for e.do("GET", "/readyz", nil).code != 200 {
		if time.Now().After(deadline) {
			t.Fatal("/readyz did not recover")
		}
		time.Sleep(20 * time.Millisecond)
	}
	r := e.must(200, "POST", "/v1/limiters/r/acquire", nil)
	if r.num(t, "version") != 1 {
		t.Errorf("after recovery: %s", r)
	}
}

// A request that outlives RequestTimeout is a 503 of type timeout.
func TestRequestTimeout(t *testing.T) {
	var slow atomic.Bool // while set, no read from Redis returns
	dial := func(ro *redis.Options) {
		ro.ContextTimeoutEnabled = true // as store.NewClient's: a deadline bounds each read
		ro.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			return slowConn{c, &slow, new(atomic.Int64)}, err
		}
	}
	e := newEnvRedis(t, dial, func(o *api.Options) { o.RequestTimeout = 500 * time.Millisecond })
	e.must(201, "PUT", "/v1/limiters/slow", `{"rate":100}`)
	e.must(201, "PUT", "/v1/limiters/slots", `{"kind":"concurrency","limit":2}`)
	e.must(200, "POST", "/v1/limiters/slots/acquire", nil) // now known as a concurrency limiter
	slow.Store(true)
	// An acquire's context has no timer (core.AcquireRequest.Deadline):
	// the rate decision and a concurrency limiter's slot both end by it.
	for _, name := range []string{"slow", "slots"} {
		r := e.must(503, "POST", "/v1/limiters/"+name+"/acquire", nil)
		if p := r.problem(t); p.Type != "urn:limitd:problem:timeout" || !strings.Contains(p.Detail, "500ms") {
			t.Errorf("%s: timeout problem: %+v", name, p)
		}
	}
	slow.Store(false)
}

// slowConn is a connection whose reads, while slow is set, get nothing from
// Redis until their deadline, as if Redis never answered.
type slowConn struct {
	net.Conn
	slow     *atomic.Bool
	deadline *atomic.Int64 // the read deadline, Unix ns; 0: none
}

func (c slowConn) SetDeadline(t time.Time) error {
	c.setRead(t)
	return c.Conn.SetDeadline(t)
}

func (c slowConn) SetReadDeadline(t time.Time) error {
	c.setRead(t)
	return c.Conn.SetReadDeadline(t)
}

func (c slowConn) setRead(t time.Time) {
	if t.IsZero() {
		c.deadline.Store(0)
	} else {
		c.deadline.Store(t.UnixNano())
	}
}

func (c slowConn) Read(b []byte) (int, error) {
	for c.slow.Load() {
		if d := c.deadline.Load(); d != 0 && time.Now().UnixNano() >= d {
			return 0, os.ErrDeadlineExceeded
		}
		time.Sleep(time.Millisecond)
	}
	return c.Conn.Read(b)
}

// A limiter whose state a newer limitd wrote (a packed layout these scripts
// do not read) is a 503 naming UNKNOWN LAYOUT, for that limiter alone: the
// others, readiness and the event stream's samples of the others are not
// affected, and the state is left as it was.
func TestUnknownLayout(t *testing.T) {
	e := newEnv(t)
	e.must(201, "PUT", "/v1/limiters/newer", `{"rate":100}`)
	e.must(201, "PUT", "/v1/limiters/other", `{"rate":100}`)
	e.must(200, "POST", "/v1/limiters/newer/acquire", nil)
	var key string
	for _, k := range e.m.Keys() {
		if v, err := e.m.Get(k); err == nil && strings.Contains(k, "{newer}") && strings.HasPrefix(v, "1 ") {
			key = k // the state: code 1, then the layout's number (text in miniredis)
		}
	}
	if key == "" {
		t.Fatalf("no state key for newer among %v", e.m.Keys())
	}
	v, _ := e.m.Get(key)
	f := strings.Fields(v)
	f[1] = "99"
	newer := strings.Join(f, " ")
	if err := e.m.Set(key, newer); err != nil {
		t.Fatal(err)
	}
	r := e.must(503, "POST", "/v1/limiters/newer/acquire", nil)
	if p := r.problem(t); !strings.Contains(p.Detail, "UNKNOWN LAYOUT") || strings.Contains(p.Detail, "Redis is unavailable") {
		t.Errorf("problem %+v, want the condition UNKNOWN LAYOUT", p)
	}
	e.must(200, "POST", "/v1/limiters/other/acquire", nil)
	e.must(200, "GET", "/readyz", nil)
	// The event stream goes on sampling the others (newer comes first in
	// name order), with no error event: Redis is not down.
	events, stop := e.stream("/v1/events?interval=100ms")
	defer stop()
	for range 3 {
		ev := next(t, events, func(ev sseEvent) bool { return ev.name == "state" || ev.name == "error" })
		if ev.name != "state" || !strings.Contains(ev.data, `"name":"other"`) {
			t.Fatalf("event %s %s, want other's state", ev.name, ev.data)
		}
	}
	if got, _ := e.m.Get(key); got != newer {
		t.Errorf("the newer state was rewritten: %q", got)
	}
}
