package api_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd/api"
	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/store"
)

// Serve the API over a store, create a smooth limiter at 5 permits/s and take
// three permits at one instant: each caller is told to wait 200ms longer
// than the one before.
func ExampleNew() {
	mr := miniredis.NewMiniRedis() // use a real Redis: redis.NewClient(...)
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	mr.SetTime(time.Unix(1_750_000_000, 0)) // a clock that stands still, for exact output
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	srv := httptest.NewServer(api.New(api.Options{Service: core.New(store.New(rdb), core.Options{}), AdminToken: "s3cret"}))
	defer srv.Close()

	call := func(method, path, body string) {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer s3cret")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		fmt.Print(resp.StatusCode, " ", string(b))
	}
	call("PUT", "/v1/limiters/guava", `{"kind":"smooth","rate":5}`)
	for range 3 {
		call("POST", "/v1/limiters/guava/acquire", `{"permits":1}`)
	}
	call("PATCH", "/v1/limiters/guava", `{"rate":10}`)
	// Output:
	// 201 {"name":"guava","config":{"kind":"smooth","rate":5,"max_burst_seconds":1,"initial_permits":0},"version":1,"state":{"wait_ns":0,"delay_ns":0,"idle_ns":0,"allocated_ns":0,"now_ns":1750000000000000000,"version":1,"permits":0,"lateness_total_ns":0,"started":true},"totals":{"granted_calls":0,"granted_permits":0,"refused_calls":0,"refused_permits":0}}
	// 200 {"granted":true,"permits":1,"delay_ns":0,"scheduled_ns":1750000000000000000,"start_ns":1750000000000000000,"lateness_ns":0,"wait_ns":0,"version":1,"now_ns":1750000000000000000}
	// 200 {"granted":true,"permits":1,"delay_ns":200000000,"scheduled_ns":1750000000200000000,"start_ns":1750000000200000000,"lateness_ns":0,"wait_ns":0,"version":1,"now_ns":1750000000000000000}
	// 200 {"granted":true,"permits":1,"delay_ns":400000000,"scheduled_ns":1750000000400000000,"start_ns":1750000000400000000,"lateness_ns":0,"wait_ns":0,"version":1,"now_ns":1750000000000000000}
	// 200 {"name":"guava","config":{"kind":"smooth","rate":10,"max_burst_seconds":1,"initial_permits":0},"version":2,"state":{"wait_ns":0,"delay_ns":600000000,"idle_ns":0,"allocated_ns":600000000,"now_ns":1750000000000000000,"version":2,"permits":3,"lateness_total_ns":0,"started":true},"totals":{"granted_calls":0,"granted_permits":0,"refused_calls":0,"refused_permits":0}}
}
