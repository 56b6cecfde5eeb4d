package store_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

// exampleRedis starts an in-memory Redis whose clock stands still at a fixed
// time, so that the examples' output is exact. A real deployment passes a
// client for its Redis (see store.NewClient).
func exampleRedis() (*miniredis.Miniredis, redis.UniversalClient) {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		panic(err)
	}
	m.SetTime(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	return m, redis.NewClient(&redis.Options{Addr: m.Addr()})
}

// Many workers share one strict schedule of 5 permits a second: each learns
// when its permit is due and waits until then.
func Example() {
	m, rdb := exampleRedis()
	defer m.Close()
	defer rdb.Close()
	ctx := context.Background()

	s := store.New(rdb)
	if _, _, err := s.Put(ctx, "orders", limiter.Config{Spec: "5,1"}); err != nil {
		panic(err)
	}
	for range 3 {
		d, err := s.Acquire(ctx, "orders", 1, limitd.Forever)
		if err != nil {
			panic(err)
		}
		fmt.Println("start in", time.Duration(d.Delay))
		// A real worker would time.Sleep(time.Duration(d.Delay)) here.
	}
	// Output:
	// start in 0s
	// start in 200ms
	// start in 400ms
}

// Put is idempotent: the same config changes nothing, a new one of the same
// kind reconfigures in place (the schedule carries on), another kind starts
// afresh. Each change bumps the version.
func ExampleStore_Put() {
	m, rdb := exampleRedis()
	defer m.Close()
	defer rdb.Close()
	ctx := context.Background()
	s := store.New(rdb)

	put := func(c limiter.Config) {
		info, created, err := s.Put(ctx, "api", c)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s rate %v: version %d, created %v\n", info.Config.Kind, info.Config.Rate, info.Version, created)
	}
	put(limiter.Config{Rate: 100})
	put(limiter.Config{Spec: "100,1.1"}) // the same config, written differently
	put(limiter.Config{Rate: 200})
	put(limiter.Config{Kind: limiter.KindSmooth, Rate: 50})

	_, _, err := s.Put(ctx, "api", limiter.Config{Rate: 0})
	var fe *limiter.FieldError
	fmt.Println(errors.Is(err, store.ErrInvalid), errors.As(err, &fe) && fe.Field == "rate")
	// Output:
	// schedule rate 100: version 1, created true
	// schedule rate 100: version 1, created false
	// schedule rate 200: version 2, created false
	// smooth rate 50: version 3, created false
	// true true
}

// A caller that may wait at most 100 ms is told when to come back instead.
func ExampleStore_Acquire() {
	m, rdb := exampleRedis()
	defer m.Close()
	defer rdb.Close()
	ctx := context.Background()
	s := store.New(rdb)
	if _, _, err := s.Put(ctx, "search", limiter.Config{Rate: 5, Burst: limiter.B(1)}); err != nil {
		panic(err)
	}

	d, _ := s.Acquire(ctx, "search", 2, limitd.Forever) // 2 permits: 400 ms of schedule
	fmt.Println(d.Granted, time.Duration(d.Delay))
	d, _ = s.Acquire(ctx, "search", 1, 100*time.Millisecond)
	fmt.Println(d.Granted, "retry after", time.Duration(d.RetryAfter))

	m.SetTime(time.Date(2030, 1, 1, 0, 0, 0, 350e6, time.UTC)) // 350 ms later
	d, _ = s.Acquire(ctx, "search", 1, 100*time.Millisecond)
	fmt.Println(d.Granted, time.Duration(d.Delay))

	_, err := s.Acquire(ctx, "unknown", 1, limitd.Forever)
	fmt.Println(errors.Is(err, store.ErrNotFound))
	// Output:
	// true 0s
	// false retry after 300ms
	// true 50ms
	// true
}

// Templates create limiters on demand: every user gets their own 10/s
// schedule the first time the name is used.
func ExampleStore_PutTemplate() {
	m, rdb := exampleRedis()
	defer m.Close()
	defer rdb.Close()
	ctx := context.Background()
	s := store.New(rdb)

	_, err := s.PutTemplate(ctx, limitd.Template{
		ID: "per-user", Pattern: "user:*", IdleTTL: limiter.D(10 * time.Minute),
		Limiter: limiter.Config{Rate: 10, Burst: limiter.B(1)},
	})
	if err != nil {
		panic(err)
	}
	for _, name := range []string{"user:ann", "user:ann", "user:bob", "guest"} {
		d, err := s.Acquire(ctx, name, 1, limitd.Forever)
		if err != nil {
			fmt.Println(name, err)
			continue
		}
		fmt.Println(name, "start in", time.Duration(d.Delay))
	}
	// Output:
	// user:ann start in 0s
	// user:ann start in 100ms
	// user:bob start in 0s
	// guest limiter "guest": not found
}

// A charge takes what a caller's work used, whatever is left: here 1,500
// tokens of a budget of 1,000 a minute. The window counts past its limit,
// and a check (a charge of 0) answers "over" until the window resets.
func ExampleStore_Charge() {
	m, rdb := exampleRedis()
	defer m.Close()
	defer rdb.Close()
	ctx := context.Background()

	s := store.New(rdb)
	limit := int64(1000)
	if _, _, err := s.Put(ctx, "tokens", limiter.Config{Kind: limiter.KindWindow, Limit: &limit, Period: "1m"}); err != nil {
		panic(err)
	}
	d, err := s.Charge(ctx, "tokens", 1500)
	if err != nil {
		panic(err)
	}
	fmt.Println("charged", d.Permits, "within the budget:", d.Granted)
	d, err = s.Charge(ctx, "tokens", 0)
	if err != nil {
		panic(err)
	}
	fmt.Println("next request within the budget:", d.Granted, "for", time.Duration(d.Delay))
	// Output:
	// charged 1500 within the budget: false
	// next request within the budget: false for 1m0s
}
