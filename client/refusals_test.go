package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/client"
	"github.com/limitd/limitd/client/redisclient"
	"github.com/limitd/limitd/internal/testkit/redistest"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

// rfWrites counts the totals commands (HINCRBY, ZINCRBY, PEXPIRE) a Redis
// client sent and Redis answered, in pipelines and alone: what a refusal
// flush wrote.
type rfWrites struct {
	mu  sync.Mutex
	cmd map[string]int
}

func rfCounting(rdb *redis.Client) *rfWrites {
	w := &rfWrites{cmd: map[string]int{}}
	rdb.AddHook(redistest.TripHook{After: w.add})
	return w
}

func (w *rfWrites) add(_ context.Context, cmds []redis.Cmder) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range cmds {
		switch n := strings.ToLower(c.Name()); n {
		case "hincrby", "zincrby", "pexpire":
			w.cmd[n]++
		}
	}
}

func (w *rfWrites) total() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, c := range w.cmd {
		n += c
	}
	return n
}

// take returns the counts so far, by command and in all, and starts over.
func (w *rfWrites) take() (map[string]int, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	out, n := w.cmd, 0
	for _, c := range out {
		n += c
	}
	w.cmd = map[string]int{}
	return out, n
}

// rfTotals reads a limiter's totals.
func rfTotals(t *testing.T, st *store.Store, name string) limitd.Counts {
	t.Helper()
	c, err := st.Totals(context.Background(), []string{name})
	if err != nil {
		t.Fatal(err)
	}
	return c[0]
}

// rfFlush moves the driven clock a second on once the client's flusher
// waits on it, so that it flushes.
func rfFlush(t *testing.T, clk *ctClock) {
	t.Helper()
	if !ctEventually(10*time.Second, func() bool { return clk.Pending() > 0 }) {
		t.Fatal("no flush timer pending")
	}
	clk.Advance(time.Second)
}

// A client over Redis counts what it refuses, by limiter and by template
// instance, and a flush a second later (on the client's clock) adds it to
// the totals a limitd server's ledger writes: Allow false, a Wait past its
// deadline, a refused Reserve and direct Acquire, a semaphore poll that
// found no slot. What it granted it does not write (Redis recorded it).
func TestRefusalsFlushedEverySecond(t *testing.T) {
	clk, rdb, st := ctDriven(t)
	ctx := context.Background()
	ctPut(t, st, "orders", limiter.Config{Rate: 1.0 / 60})
	one, three := int64(1), int64(3)
	ctPut(t, st, "daily", limiter.Config{Kind: limiter.KindWindow, Limit: &three, Period: "1h"})
	ctPut(t, st, "reports", limiter.Config{Kind: limiter.KindConcurrency, Limit: &one, Lease: limiter.D(time.Hour)})
	if _, err := st.PutTemplate(ctx, limitd.Template{ID: "per-user", Pattern: "user:*", Limiter: limiter.Config{Rate: 1}}); err != nil {
		t.Fatal(err)
	}
	c := redisclient.New(rdb, client.WithClock(clk))
	defer c.Close()

	orders, err := c.Limiter("orders")
	if err != nil {
		t.Fatal(err)
	}
	if !orders.Allow() {
		t.Fatal("the first permit of a fresh limiter refused")
	}
	for range 3 { // the next permit is a minute away on the driven clock
		if orders.Allow() {
			t.Fatal("a second permit at 1/min allowed at the same instant")
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second) // a deadline (wall clock) before the next permit
	if _, err := orders.Wait(wctx); !errors.Is(err, limiter.ErrDeadline) {
		t.Fatalf("Wait past its deadline: %v, want ErrDeadline", err)
	}
	cancel()
	user, err := c.Limiter("user:7")
	if err != nil {
		t.Fatal(err)
	}
	if !user.Allow() || user.Allow() {
		t.Fatal("user:7 at 1/s: want its first permit allowed, the second refused")
	}
	if d, err := c.Acquire(ctx, "daily", 1, 0); err != nil || !d.Granted {
		t.Fatalf("the window's first acquire: %+v, %v", d, err)
	}
	if d, err := c.Acquire(ctx, "daily", 3, 0); err != nil || d.Granted {
		t.Fatalf("3 more of a window of 3: %+v, %v", d, err)
	}
	daily, err := c.Limiter("daily")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := daily.Reserve(ctx, 3); !errors.Is(err, client.ErrRefused) {
		t.Fatalf("Reserve of a full window: %v, want ErrRefused", err)
	}
	sem, err := c.Semaphore("reports")
	if err != nil {
		t.Fatal(err)
	}
	release, err := sem.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond) // the poll's pause runs on the driven clock: ctx ends it
	if _, err := sem.Acquire(sctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a second slot of 1: %v", err)
	}
	cancel()
	release()

	if got := rfTotals(t, st, "orders"); !got.IsZero() {
		t.Fatalf("orders' totals before a flush: %+v", got)
	}
	w := rfCounting(rdb)
	rfFlush(t, clk)
	want := map[string]limitd.Counts{
		"orders":  {RefusedCalls: 4, RefusedPermits: 4}, // 3 Allow, 1 Wait
		"daily":   {RefusedCalls: 2, RefusedPermits: 6}, // Acquire of 3, Reserve of 3
		"reports": {RefusedCalls: 1, RefusedPermits: 1}, // one poll found the slot taken
	}
	if !ctEventually(10*time.Second, func() bool { return w.total() > 0 }) { // Redis answered the flush
		t.Fatal("no flush")
	}
	for name, w := range want {
		if got := rfTotals(t, st, name); got != w {
			t.Errorf("%s: totals %+v, want %+v", name, got, w)
		}
	}
	if got := rfTotals(t, st, "user:7"); !got.IsZero() {
		t.Errorf("an instance has no totals of its own: %+v", got)
	}
	if got, err := st.TemplateTotals(ctx, "per-user"); err != nil || got != (limitd.Counts{RefusedCalls: 1, RefusedPermits: 1}) {
		t.Errorf("per-user's totals %+v, %v: want user:7's refusal", got, err)
	}
	if _, top, err := st.Top(ctx, "per-user", true, 10, 1); err != nil || fmt.Sprint(top) != "[{user:7 1 0}]" {
		t.Errorf("per-user's instances by refused %v, %v", top, err)
	}

}

// A flush costs Redis what a server's ledger's does, whatever the
// refusals: per template 2 HINCRBY and a PEXPIRE, and at most 100 ZINCRBY
// and a PEXPIRE for its busiest instances by refused permits (none by
// granted: the client writes no grants).
func TestRefusalsFlushBounded(t *testing.T) {
	clk, rdb, st := ctDriven(t)
	ctx := context.Background()
	one := int64(1)
	if _, err := st.PutTemplate(ctx, limitd.Template{ID: "per-ip", Pattern: "ip:*",
		Limiter: limiter.Config{Kind: limiter.KindWindow, Limit: &one, Period: "1h"}}); err != nil {
		t.Fatal(err)
	}
	c := redisclient.New(rdb, client.WithClock(clk))
	defer c.Close()
	const instances = 300
	for i := range instances {
		name := fmt.Sprint("ip:", i)
		for j := range i%3 + 2 { // the first granted, 1 to 3 refused
			d, err := c.Acquire(ctx, name, 1, 0)
			if err != nil || d.Granted != (j == 0) {
				t.Fatalf("%s, acquire %d: %+v, %v", name, j, d, err)
			}
		}
	}
	w := rfCounting(rdb)
	rfFlush(t, clk)
	if !ctEventually(10*time.Second, func() bool { return w.total() > 0 }) {
		t.Fatal("no flush")
	}
	got, err := st.TemplateTotals(ctx, "per-ip")
	if err != nil {
		t.Fatal(err)
	}
	if want := (limitd.Counts{RefusedCalls: 600, RefusedPermits: 600}); got != want {
		t.Errorf("per-ip's totals %+v, want %+v", got, want)
	}
	by, n := w.take()
	if want := map[string]int{"hincrby": 2, "zincrby": 100, "pexpire": 2}; fmt.Sprint(by) != fmt.Sprint(want) {
		t.Errorf("a flush of %d instances' refusals wrote %v (%d commands), want %v", instances, by, n, want)
	}
	_, top, err := st.Top(ctx, "per-ip", true, 200, 1)
	if err != nil || len(top) != 100 || top[0].Refused != 3 || top[99].Refused != 3 {
		t.Errorf("the busiest instances: %d of them (%v), %v; want the 100 refused 3 times", len(top), top, err)
	}
}

// WithoutRefusalCounts: the client writes nothing, flush after flush and
// on Close.
func TestRefusalCountsOff(t *testing.T) {
	clk, rdb, st := ctDriven(t)
	ctPut(t, st, "orders", limiter.Config{Rate: 1})
	w := rfCounting(rdb)
	c := redisclient.New(rdb, client.WithClock(clk), client.WithoutRefusalCounts())
	l, err := c.Limiter("orders")
	if err != nil {
		t.Fatal(err)
	}
	if !l.Allow() || l.Allow() {
		t.Fatal("at 1/s: want the first permit allowed, the second refused")
	}
	for range 3 {
		clk.Advance(time.Second)
		if l.Allow() {
			l.Allow()
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if got := rfTotals(t, st, "orders"); !got.IsZero() {
		t.Errorf("totals %+v with counting off", got)
	}
	if by, n := w.take(); n != 0 {
		t.Errorf("with counting off the client wrote %v", by)
	}
}

// Close adds what was refused since the last flush, a closed handle's
// included, before it returns; the flusher stops with it.
func TestRefusalsCloseFlushesTheRest(t *testing.T) {
	clk, rdb, st := ctDriven(t)
	ctPut(t, st, "orders", limiter.Config{Rate: 1})
	ctPut(t, st, "billing", limiter.Config{Rate: 1})
	c := redisclient.New(rdb, client.WithClock(clk))
	for _, name := range []string{"orders", "billing"} {
		l, err := c.Limiter(name)
		if err != nil {
			t.Fatal(err)
		}
		if !l.Allow() || l.Allow() || l.Allow() {
			t.Fatalf("%s at 1/s: want the first permit allowed, the next two refused", name)
		}
		if name == "billing" {
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := rfTotals(t, st, "orders"); !got.IsZero() {
		t.Fatalf("totals before Close, no flush yet: %+v", got)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"orders", "billing"} {
		if got := rfTotals(t, st, name); got != (limitd.Counts{RefusedCalls: 2, RefusedPermits: 2}) {
			t.Errorf("%s after Close: %+v, want 2 refusals", name, got)
		}
	}
	if n := clk.Pending(); n != 0 {
		t.Errorf("%d timers still pending after Close: the flusher did not stop", n)
	}
}

// Refusals counted by many goroutines while flushes run are each added
// once.
func TestRefusalsConcurrent(t *testing.T) {
	clk, rdb, st := ctDriven(t)
	ctPut(t, st, "orders", limiter.Config{Rate: 1.0 / 3600}) // the flushes' seconds bring no permit
	c := redisclient.New(rdb, client.WithClock(clk))
	l, err := c.Limiter("orders")
	if err != nil {
		t.Fatal(err)
	}
	if !l.Allow() {
		t.Fatal("the first permit refused")
	}
	const goroutines, each = 8, 500
	var wg sync.WaitGroup
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if l.Allow() {
					t.Error("a second permit of 1/h allowed within seconds")
					return
				}
			}
		}()
	}
	for range 3 { // flushes while they run
		rfFlush(t, clk)
	}
	wg.Wait()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if got, want := rfTotals(t, st, "orders"), (limitd.Counts{RefusedCalls: goroutines * each, RefusedPermits: goroutines * each}); got != want {
		t.Errorf("totals %+v, want %+v", got, want)
	}
}
