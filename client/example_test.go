package client_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd/client"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

// An application's own test can run the client against miniredis, an
// in-process Redis: no server to start, and the Redis clock, which limitd's
// scripts read, under the test's control. Here it stands still, so the
// scheduled times are exact.
func Example_testAgainstMiniredis() {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		panic(err)
	}
	defer m.Close()
	m.SetTime(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()
	ctx := context.Background()

	// What limitd's HTTP API or boot file does in production: create the
	// limiters (strict: burst 1).
	st := store.New(rdb)
	for name, rate := range map[string]float64{"partner-api": 1, "reports": 100} {
		if _, _, err := st.Put(ctx, name, limiter.Config{Rate: rate, Burst: limiter.B(1)}); err != nil {
			panic(err)
		}
	}

	c := client.New(rdb)
	api, err := c.Limiter("partner-api")
	if err != nil {
		panic(err)
	}
	// Allow never waits for a permit: at 1/s, one of five calls in a row
	// gets through.
	allowed := 0
	for range 5 {
		if api.Allow() {
			allowed++
		}
	}
	fmt.Println("allowed:", allowed)

	// Wait blocks until the permit's start and tells when it was due on the
	// shared schedule.
	reports, err := c.Limiter("reports")
	if err != nil {
		panic(err)
	}
	for range 3 {
		p, err := reports.Wait(ctx)
		if err != nil {
			panic(err)
		}
		fmt.Println("report due at", p.Scheduled.UTC().Format("15:04:05.000"))
	}

	// A deadline before the next permit's start fails at once, taking nothing.
	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	_, err = api.Wait(short)
	fmt.Println("deadline:", errors.Is(err, limiter.ErrDeadline))

	// Close hands the permits the pools still hold back to the schedule:
	// Redis counts exactly those used.
	if err := c.Close(); err != nil {
		panic(err)
	}
	for _, name := range []string{"partner-api", "reports"} {
		w, err := st.Wait(ctx, name)
		if err != nil {
			panic(err)
		}
		fmt.Println(name, "permits:", w.Permits)
	}
	// Output:
	// allowed: 1
	// report due at 00:00:00.000
	// report due at 00:00:00.010
	// report due at 00:00:00.020
	// deadline: true
	// partner-api permits: 1
	// reports permits: 3
}
