package httplimit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/client/redisclient"
	"github.com/limitd/limitd/httplimit"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

// Middleware limits requests per client IP through a template: the limiter
// "ip:192.0.2.7" is made on demand from the template "ip:*".
func ExampleMiddleware() {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		panic(err)
	}
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()
	st := store.New(rdb)
	_, err := st.PutTemplate(context.Background(), limitd.Template{
		ID: "per-ip", Pattern: "ip:*", Limiter: limiter.Config{Rate: 1, Burst: limiter.B(1)},
	})
	if err != nil {
		panic(err)
	}

	c := redisclient.New(rdb)
	defer c.Close()
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })
	h := httplimit.Middleware(c, httplimit.WithLimiterPrefix("ip:"))(hello)

	for range 2 {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.RemoteAddr = "192.0.2.7:50000"
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		fmt.Println(rec.Code, rec.Header().Get("RateLimit-Policy"), rec.Header().Get("RateLimit"),
			rec.Header().Get("Retry-After"), rec.Header().Get("Content-Type"))
	}
	// Output:
	// 200 "default";q=1;w=1 "default";r=0;t=1  text/plain; charset=utf-8
	// 429 "default";q=1;w=1 "default";r=0;t=1 1 application/problem+json
}
