package grpcapi

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/internal/testkit/redistest"
)

// oneRule is a domain d with one rule on key k.
func oneRule(rateLimit string, shadow bool) string {
	return fmt.Sprintf("domains:\n  - domain: d\n    descriptors:\n      - key: k\n        shadow_mode: %t\n        rate_limit: %s\n", shadow, rateLimit)
}

// change loads new rules as a reload does: their templates written, then
// the server's rules replaced.
func (e *env) change(src string) {
	e.t.Helper()
	r := compile(e.t, src)
	e.apply(r)
	e.srv.SetRules(r)
}

// flush empties Redis and writes the rules' templates again, as the boot
// keeper does when it finds Redis emptied.
func (e *env) flush() {
	e.t.Helper()
	if err := e.rdb.FlushAll(context.Background()).Err(); err != nil {
		e.t.Fatal(err)
	}
	e.apply(e.srv.rules.Load())
}

// drivenClock is the local clock of a test on miniredis, moved with Redis'
// (so that the over-limit cache's entries end with their windows); unset,
// on a real Redis, it is the real clock.
type drivenClock struct {
	mu sync.Mutex
	at time.Time
}

func (c *drivenClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at.IsZero() {
		return time.Now()
	}
	return c.at
}

func (c *drivenClock) Sleep(context.Context, time.Duration) error { return nil }

// withCache turns the over-limit cache on, on clk.
func withCache(clk *drivenClock) option {
	return func(_ *Options, c *core.Options) { c.OverLimitCache, c.Clock = 16, clk }
}

// nextSecond moves to the start of Redis' next second: on miniredis by
// moving its clock (and clk), on a real Redis by waiting for it.
func (e *env) nextSecond(clk *drivenClock) {
	e.t.Helper()
	if !e.real() {
		e.advance(time.Second)
		clk.mu.Lock()
		clk.at = e.now
		clk.mu.Unlock()
		return
	}
	now, err := e.rdb.Time(context.Background()).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	time.Sleep(now.Truncate(time.Second).Add(time.Second).Sub(now))
	for {
		if next, err := e.rdb.Time(context.Background()).Result(); err != nil || next.Unix() > now.Unix() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A rule's unit changed takes effect at once, as in the reference (whose
// keys name their unit's window): 5/HOUR with 12 hits counted, then 5/SECOND
// answers OK with 4 remaining on the very next call, with nothing of the
// hour's window left in Redis or in the process (the store's floor of the
// window's end, the over-limit cache). Redis emptied then, the window the
// process saw full stays full to its end (the floor: nothing granted is
// granted again), and the next one starts with 4 remaining.
func ruleChangeUnit(units ...string) func(*testing.T, envMaker) {
	return func(t *testing.T, newEnv envMaker) { ruleChangeUnitFrom(t, newEnv, units) }
}

func ruleChangeUnitFrom(t *testing.T, newEnv envMaker, units []string) {
	for _, from := range units {
		t.Run(from, func(t *testing.T) {
			clk := &drivenClock{}
			e := newEnv(t, oneRule("{unit: "+from+", requests_per_unit: 5}", false), withCache(clk))
			if !e.real() {
				clk.at = e.now
			}
			for i := range 12 {
				want := ok
				if i >= 5 {
					want = over
				}
				if r := e.call("d", desc("k", "v")); r.OverallCode != want {
					t.Fatalf("hit %d at 5/%s: %v, want %v", i+1, from, r.OverallCode, want)
				}
			}
			e.change(oneRule("{unit: second, requests_per_unit: 5}", false))
			e.expect(e.call("d", desc("k", "v")), ok, lim(ok, 5, second, 4, toSecond))
			for range 3 {
				e.call("d", desc("k", "v"))
			}
			e.expect(e.call("d", desc("k", "v")), ok, lim(ok, 5, second, 0, toSecond))
			e.expect(e.call("d", desc("k", "v")), over, lim(over, 5, second, 0, toSecond))
			e.nextSecond(clk)
			e.expect(e.call("d", desc("k", "v")), ok, lim(ok, 5, second, 4, toSecond))
			if !e.real() { // a real Redis' clock may pass the end of the old unit's window meanwhile
				// Back to the old unit: its window's count stands (the
				// reference's key is the same again), and so does the
				// second's on the way back.
				e.change(oneRule("{unit: "+from+", requests_per_unit: 5}", false))
				if r := e.call("d", desc("k", "v")); r.OverallCode != over {
					t.Errorf("back at 5/%s: %v, want OVER_LIMIT, its 12 hits counted", from, r)
				}
				e.change(oneRule("{unit: second, requests_per_unit: 5}", false))
				e.expect(e.call("d", desc("k", "v")), ok, lim(ok, 5, second, 3, toSecond))
			}
			e.call("d", hits(desc("k", "v"), 5))
			e.flush()
			e.expect(e.call("d", desc("k", "v")), over, lim(over, 5, second, 0, toSecond))
			e.nextSecond(clk)
			e.expect(e.call("d", desc("k", "v")), ok, lim(ok, 5, second, 4, toSecond))
		})
	}
}

// A limit changed within one unit keeps the window's count, as the
// reference's key is the same: 3 hits of 5/HOUR, then 10/HOUR leaves 6.
func ruleChangeLimit(t *testing.T, newEnv envMaker) {
	e := newEnv(t, oneRule("{unit: hour, requests_per_unit: 5}", false))
	e.call("d", hits(desc("k", "v"), 3))
	e.change(oneRule("{unit: hour, requests_per_unit: 10}", false))
	e.expect(e.call("d", desc("k", "v")), ok, lim(ok, 10, hour, 6, toHour))
	e.change(oneRule("{unit: hour, requests_per_unit: 4}", false))
	e.expect(e.call("d", desc("k", "v")), over, lim(over, 4, hour, 0, toHour))
}

// Shadow mode switched takes effect at once, either way, within one window.
func ruleChangeShadow(t *testing.T, newEnv envMaker) {
	e := newEnv(t, oneRule("{unit: minute, requests_per_unit: 2}", true), withCache(&drivenClock{}))
	e.call("d", hits(desc("k", "v"), 2))
	e.expect(e.call("d", desc("k", "v")), ok, lim(ok, 2, minute, 0, toMinute)) // shadow: the call passes
	e.change(oneRule("{unit: minute, requests_per_unit: 2}", false))
	e.expect(e.call("d", desc("k", "v")), over, lim(over, 2, minute, 0, toMinute))
	e.expect(e.call("d", desc("k", "v")), over, lim(over, 2, minute, 0, toMinute)) // the over-limit cache's
	e.change(oneRule("{unit: minute, requests_per_unit: 2}", true))
	e.expect(e.call("d", desc("k", "v")), ok, lim(ok, 2, minute, 0, toMinute))
}

func TestRuleChange(t *testing.T) {
	for name, x := range map[string]func(*testing.T, envMaker){
		"Unit": ruleChangeUnit("hour", "month", "week", "year", "day", "minute"), "Limit": ruleChangeLimit, "Shadow": ruleChangeShadow,
	} {
		t.Run(name, func(t *testing.T) { x(t, newEnv) })
	}
}

// TestRuleChangeOnRealRedis runs TestRuleChange's cases on a real
// redis-server (Redis functions, binary state and floors), HOUR→SECOND and
// MONTH→SECOND (each waits for a second of Redis' clock twice).
func TestRuleChangeOnRealRedis(t *testing.T) {
	redistest.Require(t)
	real := realEnv(redistest.Server(t))
	for name, x := range map[string]func(*testing.T, envMaker){
		"Unit": ruleChangeUnit("hour", "month"), "Limit": ruleChangeLimit, "Shadow": ruleChangeShadow,
	} {
		t.Run(name, func(t *testing.T) { x(t, real) })
	}
}
