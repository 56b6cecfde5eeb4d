package httplimit_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/limitd/limitd/client"
	"github.com/limitd/limitd/client/redisclient"
	"github.com/limitd/limitd/httplimit"
	"github.com/limitd/limitd/internal/testkit/storetest"
)

type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
}

func checkDenied(t *testing.T, rec *httptest.ResponseRecorder) {
	t.Helper()
	if rec.Code != http.StatusTooManyRequests {
		t.Fatalf("status %d, want 429 (body %s)", rec.Code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json", ct)
	}
	if ra := rec.Header().Get("Retry-After"); ra != "1" {
		t.Fatalf("Retry-After %q, want 1 (500ms rounded up)", ra)
	}
	var p problem
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Fatalf("body %s: %v", rec.Body, err)
	}
	if p.Status != 429 || p.Type == "" || p.Title == "" || p.Detail == "" {
		t.Fatalf("problem %+v: want type, title, status 429 and detail", p)
	}
	if got := rec.Header().Get("RateLimit"); got != `"default";r=0;t=1` {
		t.Fatalf("RateLimit on a 429 = %q", got)
	}
}

func TestMiddlewareLimitsPerIP(t *testing.T) {
	m, _, st := storetest.Mini(t)
	clk := newSteppedClock(m)
	template(t, st, "per-ip", "ip:*", 2) // one request per 500ms per IP
	c := clk.client(st)
	defer c.Close()
	h := httplimit.Middleware(c, httplimit.WithLimiterPrefix("ip:"))(okHandler)

	rec := get(h, "192.0.2.7:4711", nil)
	if rec.Code != http.StatusOK || rec.Body.String() != "ok" {
		t.Fatalf("first request: %d %s", rec.Code, rec.Body)
	}
	if got := rec.Header().Get("RateLimit-Policy"); got != `"default";q=2;w=1` {
		t.Fatalf("RateLimit-Policy = %q", got)
	}
	if got := rec.Header().Get("RateLimit"); got != `"default";r=0;t=1` {
		t.Fatalf("RateLimit = %q, want r=0 (permits are spaced) t=1 (500ms, rounded up)", got)
	}
	checkDenied(t, get(h, "192.0.2.7:4712", nil)) // same IP, other port
	// Another client has a limit of its own.
	if rec := get(h, "[2001:db8::1]:80", nil); rec.Code != http.StatusOK {
		t.Fatalf("another IP: %d", rec.Code)
	}
	for name, want := range map[string]int64{"ip:192.0.2.7": 1, "ip:2001:db8::1": 1} {
		if w := permitsOf(t, st, name); w < want {
			t.Fatalf("limiter %s: %d permits, want ≥ %d", name, w, want)
		}
	}
	clk.step(t, 499*time.Millisecond)
	if rec := get(h, "192.0.2.7:4711", nil); rec.Code != http.StatusTooManyRequests {
		t.Fatalf("1ms before the next permit: %d, want 429", rec.Code)
	}
	clk.step(t, time.Millisecond)
	if rec := get(h, "192.0.2.7:4711", nil); rec.Code != http.StatusOK {
		t.Fatalf("after one slice: %d", rec.Code)
	}
}

func TestMiddlewareKeysAndPolicy(t *testing.T) {
	_, rdb, st := storetest.Mini(t)
	template(t, st, "per-key", "key:*", 2)
	c := redisclient.New(rdb)
	defer c.Close()
	h := httplimit.Middleware(c, httplimit.KeyByHeader("X-API-Key"), httplimit.WithLimiterPrefix("key:"),
		httplimit.WithPolicy("api", 120, time.Minute))(okHandler)

	// Keys that are no valid limiter names, and keys that differ only in
	// the characters replaced, get limiters of their own.
	for _, key := range []string{"abc", "a b", "a/b", "ä", "", string(make([]byte, 300))} {
		rec := get(h, "192.0.2.1:1", map[string]string{"X-API-Key": key})
		if rec.Code != http.StatusOK {
			t.Fatalf("first request with key %q: %d %s", key, rec.Code, rec.Body)
		}
		if got := rec.Header().Get("RateLimit-Policy"); got != `"api";q=120;w=60` {
			t.Fatalf("RateLimit-Policy = %q", got)
		}
	}
	if rec := get(h, "192.0.2.1:1", map[string]string{"X-API-Key": "a b"}); rec.Code != http.StatusTooManyRequests {
		t.Fatalf("second request with key \"a b\": %d, want 429", rec.Code)
	}

	// A custom key function.
	hf := httplimit.Middleware(c, httplimit.KeyFunc(func(r *http.Request) string { return "key:" + r.URL.Query().Get("user") }))(okHandler)
	req := func(user string) int {
		r := httptest.NewRequest(http.MethodGet, "/?user="+user, nil)
		rec := httptest.NewRecorder()
		hf.ServeHTTP(rec, r)
		return rec.Code
	}
	if a, b, a2 := req("ann"), req("bob"), req("ann"); a != 200 || b != 200 || a2 != 429 {
		t.Fatalf("by user: ann %d, bob %d, ann again %d; want 200 200 429", a, b, a2)
	}
}

func TestMiddlewareWithoutLimiterIsAnError(t *testing.T) {
	_, rdb, _ := storetest.Mini(t)
	c := redisclient.New(rdb)
	h := httplimit.Middleware(c, httplimit.WithLimiterPrefix("nothing:"))(okHandler)
	rec := get(h, "192.0.2.1:1", nil)
	if rec.Code != http.StatusInternalServerError || rec.Header().Get("Content-Type") != "application/problem+json" {
		t.Fatalf("no limiter for the key: %d %q, want 500 problem+json", rec.Code, rec.Header().Get("Content-Type"))
	}
	_ = c.Close()
	rec = get(h, "192.0.2.1:1", nil)
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("closed client: %d, want 503", rec.Code)
	}
}

// The middleware keeps a bounded number of handles: evicted ones are closed,
// handing their unused permits back.
func TestMiddlewareEvictsHandles(t *testing.T) {
	_, rdb, st := storetest.Mini(t)
	template(t, st, "per-ip", "ip:*", 2)
	c := redisclient.New(rdb)
	defer c.Close()
	h := httplimit.Middleware(c, httplimit.WithLimiterPrefix("ip:"), httplimit.WithMaxKeys(2))(okHandler)
	for i := range 3 {
		if rec := get(h, fmt.Sprintf("192.0.2.%d:1", i), nil); rec.Code != http.StatusOK {
			t.Fatalf("request %d: %d", i, rec.Code)
		}
	}
	// 192.0.2.0's handle was evicted: the permit its pool held went back.
	if w := permitsOf(t, st, "ip:192.0.2.0"); w != 1 {
		t.Fatalf("evicted key's limiter counts %d permits, want 1 (the one used)", w)
	}
	// It comes back with a new handle, and its limit held meanwhile.
	if rec := get(h, "192.0.2.0:1", nil); rec.Code != http.StatusTooManyRequests {
		t.Fatalf("evicted key right after: %d, want 429", rec.Code)
	}
}

// Many requests over more keys than handles, concurrently: evictions race
// with requests, which must never see a closed handle.
func TestMiddlewareConcurrentEvictions(t *testing.T) {
	_, rdb, st := storetest.Server(t)
	template(t, st, "per-ip", "ip:*", 1000)
	c := redisclient.New(rdb)
	defer c.Close()
	h := httplimit.Middleware(c, httplimit.WithLimiterPrefix("ip:"), httplimit.WithMaxKeys(3))(okHandler)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				rec := get(h, fmt.Sprintf("198.51.100.%d:1", (g+i)%10), nil)
				if rec.Code != http.StatusOK && rec.Code != http.StatusTooManyRequests {
					t.Errorf("status %d: %s", rec.Code, rec.Body)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestEchoMiddleware(t *testing.T) {
	_, rdb, st := storetest.Mini(t)
	template(t, st, "per-ip", "ip:*", 2)
	c := redisclient.New(rdb)
	defer c.Close()
	e := echo.New()
	e.Use(httplimit.EchoMiddleware(c, httplimit.WithLimiterPrefix("ip:")))
	var calls int
	e.GET("/thing", func(ec echo.Context) error {
		calls++
		return ec.String(http.StatusOK, "ok")
	})
	rec := get(e, "203.0.113.9:1", nil)
	if rec.Code != http.StatusOK || rec.Body.String() != "ok" {
		t.Fatalf("first request: %d %s", rec.Code, rec.Body)
	}
	if got := rec.Header().Get("RateLimit-Policy"); got != `"default";q=2;w=1` {
		t.Fatalf("RateLimit-Policy = %q", got)
	}
	if got := rec.Header().Get("RateLimit"); got != `"default";r=0;t=1` {
		t.Fatalf("RateLimit = %q", got)
	}
	checkDenied(t, get(e, "203.0.113.9:1", nil))
	if calls != 1 {
		t.Fatalf("handler ran %d times, want 1", calls)
	}
	// Keyed by header, prefix and policy as for net/http.
	e2 := echo.New()
	e2.Use(httplimit.EchoMiddleware(c, httplimit.KeyByHeader("X-API-Key"), httplimit.WithLimiterPrefix("ip:k"),
		httplimit.WithPolicy("p", 5, 10*time.Second)))
	e2.GET("/thing", func(ec echo.Context) error { return ec.NoContent(http.StatusNoContent) })
	rec = get(e2, "203.0.113.9:1", map[string]string{"X-API-Key": "secret"})
	if rec.Code != http.StatusNoContent || rec.Header().Get("RateLimit-Policy") != `"p";q=5;w=10` {
		t.Fatalf("keyed by header: %d %q", rec.Code, rec.Header().Get("RateLimit-Policy"))
	}
	if w := permitsOf(t, st, "ip:ksecret"); w < 1 {
		t.Fatalf("limiter ip:ksecret counts %d permits", w)
	}
}

// Under a pessimistic fallback an unreachable Redis refuses requests with
// 429 until the next retry; the default safe fallback lets them through at
// the local rate.
func TestMiddlewareRedisDown(t *testing.T) {
	srv, rdb, st := storetest.Server(t)
	template(t, st, "per-ip", "ip:*", 1000)
	c := redisclient.New(rdb, client.WithFallback(client.FallbackPessimistic), client.WithRetryInterval(2*time.Second))
	defer c.Close()
	h := httplimit.Middleware(c, httplimit.WithLimiterPrefix("ip:"))(okHandler)
	if rec := get(h, "192.0.2.1:1", nil); rec.Code != http.StatusOK {
		t.Fatalf("Redis up: %d", rec.Code)
	}
	srv.Stop()
	var rec *httptest.ResponseRecorder
	if !eventually(10*time.Second, func() bool {
		rec = get(h, "192.0.2.1:1", nil)
		return rec.Code == http.StatusTooManyRequests && rec.Header().Get("Retry-After") == "2"
	}) {
		t.Fatalf("Redis down, pessimistic: %d Retry-After %q, want 429 with Retry-After 2 (the retry interval)",
			rec.Code, rec.Header().Get("Retry-After"))
	}
}
