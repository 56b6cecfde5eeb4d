package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/limitd/limitd/limiter"
)

// exampleClock is a limiter.Clock whose time stands still until Sleep or the
// example moves it on, so that the times the examples print are exact. Real
// code leaves out WithClock and gets the monotonic clock.
type exampleClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *exampleClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *exampleClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.Advance(d)
	return nil
}

func (c *exampleClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(max(d, 0))
}

func ExampleNew() {
	// 100 permits a second; callers who fall behind catch up at 1.1 × 100/s.
	l, err := limiter.New(limiter.Config{Spec: "100,1.1"})
	if err != nil {
		fmt.Println(err)
		return
	}
	c := l.Config() // canonical: the spec is applied and defaults filled in
	fmt.Println(c.Kind, c.Rate, c.Burst)
	fmt.Println(l.Allow()) // a new schedule grants its first permit at once

	_, err = limiter.New(limiter.Config{Kind: limiter.KindSmooth, Rate: 0})
	fmt.Println(errors.Is(err, limiter.ErrInvalid), err)
	// Output:
	// schedule 100 1.1
	// true
	// true rate: must be ≥ 1e-6 and ≤ 1e9 permits per second (got 0)
}

func ExampleLimiter_Wait() {
	// A load generator: 10 operations a second, catching up at 20/s after a
	// stall. Latency is measured from when each operation was scheduled, so a
	// stall in the system under test shows up as lateness instead of hiding.
	clock := &exampleClock{}
	l, err := limiter.New(limiter.Config{Spec: "10,2"}, limiter.WithClock(clock))
	if err != nil {
		fmt.Println(err)
		return
	}
	t0 := clock.Now()
	for op := range 6 {
		if op == 2 {
			clock.Advance(time.Second) // the system under test stalls
		}
		p, err := l.Wait(context.Background())
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("op %d: scheduled %v, started %v, late %v\n",
			op, p.Scheduled.Sub(t0), p.Start.Sub(t0), p.Lateness)
	}
	// Output:
	// op 0: scheduled 0s, started 0s, late 0s
	// op 1: scheduled 100ms, started 100ms, late 0s
	// op 2: scheduled 200ms, started 1.1s, late 900ms
	// op 3: scheduled 300ms, started 1.15s, late 850ms
	// op 4: scheduled 400ms, started 1.2s, late 800ms
	// op 5: scheduled 500ms, started 1.25s, late 750ms
}

func ExampleLimiter_Reserve() {
	clock := &exampleClock{}
	l, err := limiter.New(limiter.Config{Spec: "10,1"}, limiter.WithClock(clock))
	if err != nil {
		fmt.Println(err)
		return
	}
	first, _ := l.Reserve(1)
	batch, _ := l.Reserve(5) // the caller pays later: the batch waits for first only
	fmt.Println(first.Delay(), batch.Delay(), batch.Permit().Permits)

	clock.Advance(40 * time.Millisecond)
	fmt.Println(batch.Delay())

	// Hand the batch back. Nothing was reserved after it, so the schedule is
	// rewound and the next caller gets its slot.
	batch.Cancel()
	next, _ := l.Reserve(1)
	fmt.Println(next.Delay())

	_, err = l.Reserve(0)
	fmt.Println(errors.Is(err, limiter.ErrInvalid))
	// Output:
	// 0s 100ms 5
	// 60ms
	// 60ms
	// true
}

func ExampleParseSpec() {
	for _, s := range []string{"523", "12000,1.1,restart", "1.5K;inf", "5000/min", "2^20"} {
		sp, err := limiter.ParseSpec(s)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Printf("%-19q → rate %.6g/s, burst %v, verb %s\n", s, sp.Rate, sp.Burst, sp.Verb)
	}
	_, err := limiter.ParseSpec("100,0.5")
	fmt.Println(err)
	// Output:
	// "523"               → rate 523/s, burst 1.1, verb start
	// "12000,1.1,restart" → rate 12000/s, burst 1.1, verb restart
	// "1.5K;inf"          → rate 1500/s, burst +Inf, verb start
	// "5000/min"          → rate 83.3333/s, burst 1.1, verb start
	// "2^20"              → rate 1.04858e+06/s, burst 1.1, verb start
	// burst: must be a number ≥ 1 and ≤ 1e6, or "inf" (got "0.5")
}

func ExampleLimiter_SetConfig() {
	clock := &exampleClock{}
	l, err := limiter.New(limiter.Config{Spec: "10,1"}, limiter.WithClock(clock))
	if err != nil {
		fmt.Println(err)
		return
	}
	t0 := clock.Now()
	wait := func() limiter.Permit {
		p, _ := l.Wait(context.Background())
		return p
	}
	starts := func() (d [3]time.Duration) {
		for i := range d {
			d[i] = wait().Start.Sub(t0)
		}
		return d
	}
	fmt.Println(starts())

	// Ramp up live: the schedule is kept and later permits cost the new slice.
	if err := l.SetConfig(limiter.Config{Spec: "20,1"}); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(starts())

	// After a stall, the restart verb forfeits the backlog instead of
	// reporting every later permit as late.
	clock.Advance(time.Second)
	fmt.Println("backlog", l.Stats().Backlog)
	if err := l.SetConfig(limiter.Config{Spec: "20,1,restart"}); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("backlog", l.Stats().Backlog, "late", wait().Lateness)

	fmt.Println(l.SetConfig(limiter.Config{Spec: "0"}), "— the config is unchanged:", l.Config().Rate)
	// Output:
	// [0s 100ms 200ms]
	// [300ms 350ms 400ms]
	// backlog 950ms
	// backlog 0s late 0s
	// rate: must be ≥ 1e-6 and ≤ 1e9 permits per second (got 0) — the config is unchanged: 20
}

// A calendar window in a zone: the day of the spring clock change in Berlin
// is 23 hours long.
func ExampleCalendarWindow() {
	berlin, _ := time.LoadLocation("Europe/Berlin")
	noon := time.Date(2025, 3, 30, 12, 0, 0, 0, berlin)
	start, end, err := limiter.CalendarWindow(limiter.Day, "Europe/Berlin", noon.UnixNano())
	if err != nil {
		panic(err)
	}
	fmt.Println(time.Unix(0, start).In(berlin), time.Duration(end-start))
	// Output: 2025-03-30 00:00:00 +0100 CET 23h0m0s
}

// A window limiter of 3 permits a minute: a refused request is told when its
// window resets.
func ExampleParams_Acquire_window() {
	limit := int64(3)
	p, err := limiter.Compile(limiter.Config{Kind: limiter.KindWindow, Limit: &limit, Period: "1m"})
	if err != nil {
		panic(err)
	}
	var s limiter.State
	now := time.Date(2025, 1, 1, 12, 0, 45, 0, time.UTC).UnixNano()
	r, _ := p.Acquire(&s, now, 3, 0)
	fmt.Println(r.Granted, r.Wait)
	r, _ = p.Acquire(&s, now, 1, limiter.Forever)
	fmt.Println(r.Granted, time.Duration(r.RetryAfter))
	// Output:
	// true 0
	// false 15s
}

// A charge records usage after the fact: a schedule of 10 permits a second
// charged 25 goes 2.5 s into debt, which a later acquire waits out; the
// charge itself is never refused, and says whether it fitted.
func ExampleParams_Charge() {
	p, err := limiter.Compile(limiter.Config{Rate: 10, Burst: limiter.B(1)})
	if err != nil {
		panic(err)
	}
	var s limiter.State
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC).UnixNano()
	r, _ := p.Charge(&s, now, 25, 0)
	fmt.Println(r.Granted, time.Duration(r.Delay))
	r, _ = p.Charge(&s, now, 5, 0) // in debt: taken all the same
	fmt.Println(r.Granted, time.Duration(r.Delay))
	r, _ = p.Acquire(&s, now, 1, limiter.Forever)
	fmt.Println(time.Duration(r.Delay))
	// Output:
	// true 2.5s
	// false 3s
	// 3s
}
