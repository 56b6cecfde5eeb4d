package client_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd/client"
	"github.com/limitd/limitd/client/redisclient"
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

	c := redisclient.New(rdb)
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

// An LLM gateway's token budget: each answer's tokens are known only after
// it, so the gateway checks the budget before the work (a charge of 0
// takes nothing) and charges what the answer used after it, whatever is
// left. A window of 1,000 tokens a minute admits four answers of 300: the
// fourth takes the count past the limit, and the window refuses until it
// resets.
func ExampleLimiter_Charge() {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		panic(err)
	}
	defer m.Close()
	m.SetTime(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	limit := int64(1000)
	if _, _, err := store.New(rdb).Put(ctx, "tokens", limiter.Config{Kind: limiter.KindWindow, Limit: &limit, Period: "1m"}); err != nil {
		panic(err)
	}

	c := redisclient.New(rdb)
	defer c.Close()
	tokens, err := c.Limiter("tokens")
	if err != nil {
		panic(err)
	}
	for i := 1; i <= 5; i++ {
		check, err := tokens.Charge(ctx, 0)
		if err != nil {
			panic(err)
		}
		if !check.Granted {
			fmt.Printf("request %d: over budget for %v\n", i, time.Duration(check.Delay))
			continue
		}
		used := int64(300) // the answer's tokens, known once it is done
		d, err := tokens.Charge(ctx, used)
		if err != nil {
			panic(err)
		}
		fmt.Printf("request %d: %d tokens, %d left\n", i, d.Permits, d.Wait)
	}
	// Output:
	// request 1: 300 tokens, 700 left
	// request 2: 300 tokens, 400 left
	// request 3: 300 tokens, 100 left
	// request 4: 300 tokens, 0 left
	// request 5: over budget for 1m0s
}

// A reservation taken before work whose cost is known only after it is
// settled with what the work used: here a schedule of 100 tokens a second,
// a request that reserves its most (500) and uses 120. The 380 unused go
// back, and since nothing was taken after them, the schedule is rewound:
// the next request starts 1.2 s after the first, not 5 s.
func ExampleReservation_Settle() {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		panic(err)
	}
	defer m.Close()
	m.SetTime(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	if _, _, err := store.New(rdb).Put(ctx, "tokens", limiter.Config{Rate: 100, Burst: limiter.B(1)}); err != nil {
		panic(err)
	}

	c := redisclient.New(rdb)
	defer c.Close()
	tokens, err := c.Limiter("tokens")
	if err != nil {
		panic(err)
	}
	first, err := tokens.Reserve(ctx, 500)
	if err != nil {
		panic(err)
	}
	// ... wait out first.Delay(), do the work, count what it used ...
	if err := first.Settle(ctx, 120); err != nil {
		panic(err)
	}
	next, err := tokens.Reserve(ctx, 500)
	if err != nil {
		panic(err)
	}
	fmt.Println("next request starts after", next.Permit().Start.Sub(first.Permit().Start))
	// Output:
	// next request starts after 1.2s
}

// At most two reports run at once across every process sharing the
// "reports" semaphore; a crashed process loses its slot when its lease ends.
func ExampleClient_Semaphore() {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		panic(err)
	}
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()
	ctx := context.Background()

	limit := int64(2)
	if _, _, err := store.New(rdb).Put(ctx, "reports", limiter.Config{Kind: limiter.KindConcurrency,
		Limit: &limit, Lease: limiter.D(10 * time.Second)}); err != nil {
		panic(err)
	}
	c := redisclient.New(rdb)
	defer c.Close()
	sem, err := c.Semaphore("reports", client.WithOnLost(func(string) {
		// The lease ran out under us (the process stalled past it): stop
		// the report, someone else may hold the slot now.
	}))
	if err != nil {
		panic(err)
	}
	var releases []func()
	for range 2 {
		release, err := sem.Acquire(ctx) // renewed in the background while held
		if err != nil {
			panic(err)
		}
		releases = append(releases, release)
	}
	full, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = sem.Acquire(full)
	fmt.Println("third:", err)
	for _, release := range releases {
		release()
	}
	release, err := sem.Acquire(ctx)
	fmt.Println("after release:", err)
	release()
	// Output:
	// third: context deadline exceeded
	// after release: <nil>
}

// Three processes (here three clients of one process) divide a capacity of
// 120 requests a second by fair share, as in Doorman's worked example. Each
// uses its share as a local rate limit.
func ExampleClient_Share() {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		panic(err)
	}
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()
	ctx := context.Background()

	capacity := 120.0
	if _, _, err := store.New(rdb).Put(ctx, "backend", limiter.Config{Kind: limiter.KindShare,
		Capacity: &capacity, Algorithm: limiter.AlgorithmFair}); err != nil {
		panic(err)
	}
	var shares []*client.Share
	for _, wants := range []float64{1000, 50, 10} {
		c := redisclient.New(rdb)
		defer c.Close() // returns the capacity
		s, err := c.Share("backend", client.WithWants(wants))
		if err != nil {
			panic(err)
		}
		shares = append(shares, s)
	}
	// Each asks again every refresh interval (5s by default); here at once.
	for range 2 {
		for _, s := range shares {
			if err := s.Refresh(ctx); err != nil {
				panic(err)
			}
		}
	}
	for _, s := range shares {
		fmt.Println(s.Gets())
	}
	// The last one takes 10 requests a second: Wait paces its callers.
	if err := shares[2].Wait(ctx); err != nil {
		panic(err)
	}
	// Output:
	// 60
	// 50
	// 10
}
