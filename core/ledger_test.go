package core

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/internal/testkit/redistest"
	"github.com/limitd/limitd/internal/testkit/storetest"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

// ledgerService is a service whose ledger (flushed by the test, on the
// miniredis clock) counts into the miniredis it returns; two services over
// one Redis are two limitd processes.
func ledgerService(t *testing.T, m *miniredis.Miniredis, o LedgerOptions) (*Service, *Ledger) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	st := store.New(rdb)
	if o.Clock == nil {
		o.Clock = func() time.Time { return redisNow(t, rdb) }
	}
	l := NewLedger(st, o)
	return New(st, Options{Ledger: l, Observer: &recorder{}}), l
}

func i64(n int64) *int64 { return &n }

// redisNow is the miniredis's time, as a flush's minute is picked by.
func redisNow(t *testing.T, rdb *redis.Client) time.Time {
	now, err := rdb.Time(context.Background()).Result()
	if err != nil {
		t.Error(err)
	}
	return now
}

func acquireN(t *testing.T, s *Service, name string, permits int64, n int) {
	t.Helper()
	for range n {
		if _, err := s.Acquire(context.Background(), AcquireRequest{Name: name, Permits: permits, MaxWait: 0}); err != nil {
			t.Fatal(err)
		}
	}
}

// Totals are those of every process on the Redis: each counts in memory,
// a flush adds them; a limiter's view shows them, an instance's has none
// (its decisions count under its template), and a flush with nothing
// counted writes nothing.
func TestLedgerTotals(t *testing.T) {
	m := miniredis.RunT(t)
	m.SetTime(t0)
	ctx := context.Background()
	a, la := ledgerService(t, m, LedgerOptions{})
	b, lb := ledgerService(t, m, LedgerOptions{})
	if _, _, err := a.Put(ctx, "orders", limiter.Config{Kind: limiter.KindWindow, Limit: i64(3), Period: "1m"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.PutTemplate(ctx, limitd.Template{ID: "per-user", Pattern: "user:*", Limiter: limiter.Config{Kind: limiter.KindWindow, Limit: i64(2), Period: "1m"}}); err != nil {
		t.Fatal(err)
	}
	acquireN(t, a, "orders", 1, 2) // granted 2
	acquireN(t, b, "orders", 1, 3) // granted 1, refused 2
	acquireN(t, b, "user:1", 2, 2) // granted 2 permits, refused 2
	if v, err := a.Get(ctx, "orders"); err != nil || v.Totals == nil || *v.Totals != (Totals{}) {
		t.Fatalf("before a flush: %+v, %v; want zero totals", v.Totals, err)
	}
	for _, l := range []*Ledger{la, lb} {
		if err := l.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	want := Totals{GrantedCalls: 3, GrantedPermits: 3, RefusedCalls: 2, RefusedPermits: 2}
	if v, err := b.Get(ctx, "orders"); err != nil || v.Totals == nil || *v.Totals != want {
		t.Errorf("orders: %+v, %v; want %+v", v.Totals, err, want)
	}
	if v, err := a.Get(ctx, "user:1"); err != nil || v.Totals != nil || v.Template != "per-user" {
		t.Errorf("user:1: %+v, %v; want an instance of per-user without totals", v, err)
	}
	want = Totals{GrantedCalls: 1, GrantedPermits: 2, RefusedCalls: 1, RefusedPermits: 2}
	if got, err := a.store.backend.(*store.Store).TemplateTotals(ctx, "per-user"); err != nil || Totals(got) != want {
		t.Errorf("per-user: %+v, %v; want %+v", got, err, want)
	}
	if n := len(m.Keys()); n == 0 {
		t.Fatal("no keys")
	}
	for _, k := range m.Keys() {
		if strings.Contains(k, "user:1") && !strings.Contains(k, ":top:") && !strings.HasSuffix(k, ":i") {
			t.Errorf("key %s: an instance's decisions are written only to its template's top buckets", k)
		}
	}
	page, err := a.List(ctx, "", 10)
	if err != nil || len(page.Totals) != 1 || page.Totals[0].GrantedCalls != 3 {
		t.Errorf("list: %+v, %v", page, err)
	}
	views, errs := a.Views(ctx, []limitd.Info{{Name: "orders", Config: page.Limiters[0].Config}})
	if errs[0] != nil || views[0].Totals == nil || views[0].Totals.RefusedCalls != 2 {
		t.Errorf("Views: %+v, %v", views[0].Totals, errs[0])
	}
	keys := len(m.Keys())
	if err := la.Flush(ctx); err != nil || len(m.Keys()) != keys {
		t.Errorf("an empty flush: %v, keys %d → %d", err, keys, len(m.Keys()))
	}
	for _, k := range m.Keys() { // every key the ledger wrote expires
		if (len(k) > 2 && k[len(k)-2:] == ":t") || (len(k) > 3 && k[len(k)-3:] == ":tt") {
			if m.TTL(k) <= 0 {
				t.Errorf("%s has no TTL", k)
			}
		}
	}
}

// Top lists a template's instances by refused or granted permits over the
// last minutes, across processes, each with both numbers; buckets older
// than the minutes asked for are left out, and expire.
func TestLedgerTop(t *testing.T) {
	m := miniredis.RunT(t)
	m.SetTime(t0)
	ctx := context.Background()
	a, la := ledgerService(t, m, LedgerOptions{TopK: 2})
	b, lb := ledgerService(t, m, LedgerOptions{TopK: 2})
	if _, _, err := a.PutTemplate(ctx, limitd.Template{ID: "per-user", Pattern: "user:*", Limiter: limiter.Config{Kind: limiter.KindWindow, Limit: i64(1), Period: "1h"}}); err != nil {
		t.Fatal(err)
	}
	acquireN(t, a, "user:old", 1, 50) // refused 49, a minute before the others
	if err := la.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	m.SetTime(t0.Add(time.Minute))
	acquireN(t, a, "user:1", 1, 4) // refused 3
	acquireN(t, b, "user:1", 1, 2) // refused 2: 5 in all
	acquireN(t, b, "user:2", 1, 7) // refused 6
	acquireN(t, a, "user:3", 1, 2) // refused 1: not in a's top 2
	acquireN(t, a, "user:4", 1, 3) // refused 2
	for _, l := range []*Ledger{la, lb} {
		if err := l.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	top, err := b.Top(ctx, "per-user", "refused", 10, 1)
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(top.Instances)
	// user:4's grant is not in a's top 2 by granted (user:1 and user:3 tie
	// with it and come first by name): its granted is 0.
	if want := "[{user:2 6 1} {user:1 5 1} {user:4 2 0}]"; got != want {
		t.Errorf("top by refused, 1 minute: %s, want %s", got, want)
	}
	if minute := t0.Add(time.Minute).Truncate(time.Minute).UnixNano(); top.Since != minute {
		t.Errorf("since %d, want %d", top.Since, minute)
	}
	top, err = b.Top(ctx, "per-user", "refused", 1, 2)
	if got := fmt.Sprint(top.Instances); err != nil || got != "[{user:old 49 1}]" {
		t.Errorf("top 1 by refused, 2 minutes: %s, %v", got, err)
	}
	top, err = b.Top(ctx, "per-user", "granted", 2, 1)
	if got := fmt.Sprint(top.Instances); err != nil || len(top.Instances) != 2 || top.Instances[0].Granted != 1 {
		t.Errorf("top by granted: %s, %v", got, err)
	}
	for _, c := range []struct {
		by             string
		limit, minutes int
		field          string
	}{{"nope", 1, 1, "by"}, {"refused", 0, 1, "limit"}, {"refused", 101, 1, "limit"}, {"granted", 1, 16, "minutes"}} {
		var fe *limiter.FieldError
		if _, err := a.Top(ctx, "per-user", c.by, c.limit, c.minutes); !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("Top(%q, %d, %d): %v, want a fault of %s", c.by, c.limit, c.minutes, err, c.field)
		}
	}
	if _, err := a.Top(ctx, "nobody", "refused", 1, 1); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown template: %v", err)
	}
	buckets := 0
	for _, k := range m.Keys() { // every minute bucket expires after TopTTL
		if strings.Contains(k, ":top:") {
			buckets++
			if ttl := m.TTL(k); ttl <= 0 || ttl > store.TopTTL {
				t.Errorf("%s: TTL %v, want in (0, %v]", k, ttl, store.TopTTL)
			}
		}
	}
	if buckets != 4 { // refused and granted, of both minutes
		t.Errorf("%d buckets, want 4: %v", buckets, m.Keys())
	}
	m.FastForward(store.TopTTL)
	for _, k := range m.Keys() {
		if strings.Contains(k, ":top:") {
			t.Errorf("%s outlived its TTL", k)
		}
	}
}

// Memory is bounded: past MaxNames names in an interval, decisions on new
// names count in their template's totals and in Overflow, not by name.
func TestLedgerCap(t *testing.T) {
	m := miniredis.RunT(t)
	m.SetTime(t0)
	s, l := ledgerService(t, m, LedgerOptions{MaxNames: 2})
	for i := range 5 {
		l.Decided(Event{Kind: EventRate, Template: "per-user", Instance: fmt.Sprintf("user:%d", i), Outcome: "denied", Permits: 1})
	}
	l.Decided(Event{Kind: EventRate, Limiter: "orders", Outcome: "granted", Permits: 1})
	l.Decided(Event{Kind: EventRate, Template: "per-user", Instance: "user:0", Outcome: "granted", Permits: 3})
	l.Decided(Event{Kind: EventRate, Limiter: "x", Outcome: "voided", Permits: 1}) // not counted
	if got := l.Overflow(); got != 4 {
		t.Errorf("overflow %d, want 4 (user:2..4, orders)", got)
	}
	ctx := context.Background()
	if err := l.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if c, err := s.store.backend.(*store.Store).TemplateTotals(ctx, "per-user"); err != nil || c != (limitd.Counts{GrantedCalls: 1, GrantedPermits: 3, RefusedCalls: 5, RefusedPermits: 5}) {
		t.Errorf("template counts %+v, %v", c, err)
	}
	if c, err := s.store.Totals(ctx, []string{"orders"}); err != nil || !c[0].IsZero() {
		t.Errorf("orders, past the cap, counted by name: %+v, %v", c, err)
	}
	_, top, err := s.store.Top(ctx, "per-user", true, 10, 1)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range top {
		names = append(names, e.Name)
	}
	slices.Sort(names)
	if want := []string{"user:0", "user:1"}; fmt.Sprint(names) != fmt.Sprint(want) {
		t.Errorf("instances kept by name %v, want %v (the first 2)", names, want)
	}
}

// Run flushes on its own and once more when stopped.
func TestLedgerRunFlushesOnStop(t *testing.T) {
	m := miniredis.RunT(t)
	m.SetTime(t0)
	s, l := ledgerService(t, m, LedgerOptions{Every: time.Hour})
	ctx := context.Background()
	if _, _, err := s.Put(ctx, "orders", limiter.Config{Rate: 10}); err != nil {
		t.Fatal(err)
	}
	acquireN(t, s, "orders", 1, 1)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { l.Run(rctx); close(done) }()
	stop()
	<-done
	if v, err := s.Get(ctx, "orders"); err != nil || v.Totals == nil || v.Totals.GrantedCalls != 1 {
		t.Errorf("after Run stopped: %+v, %v", v.Totals, err)
	}
}

// Decisions counted while flushes run are each added once.
func TestLedgerConcurrent(t *testing.T) {
	m := miniredis.RunT(t)
	m.SetTime(t0)
	s, l := ledgerService(t, m, LedgerOptions{})
	ctx := context.Background()
	if _, _, err := s.PutTemplate(ctx, limitd.Template{ID: "per-user", Pattern: "user:*", Limiter: limiter.Config{Rate: 5}}); err != nil {
		t.Fatal(err)
	}
	const workers, each = 4, 500
	done := make(chan struct{})
	for w := range workers {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range each {
				l.Decided(Event{Kind: EventRate, Template: "per-user", Instance: fmt.Sprintf("user:%d", (w*each+i)%7), Outcome: "granted", Permits: 2})
			}
		}()
	}
	for range workers {
		for range 3 {
			if err := l.Flush(ctx); err != nil {
				t.Error(err)
			}
		}
		<-done
	}
	if err := l.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := s.store.backend.(*store.Store).TemplateTotals(ctx, "per-user")
	if want := (limitd.Counts{GrantedCalls: workers * each, GrantedPermits: 2 * workers * each}); err != nil || got != want {
		t.Errorf("template totals %+v, %v; want %+v", got, err, want)
	}
	top, err := s.Top(ctx, "per-user", "granted", 10, 1)
	if err != nil {
		t.Fatal(err)
	}
	var permits int64
	for _, in := range top.Instances {
		permits += in.Granted
	}
	if len(top.Instances) != 7 || permits != 2*workers*each {
		t.Errorf("top: %d instances granted %d permits, want 7 and %d", len(top.Instances), permits, 2*workers*each)
	}
}

// CachedInstances counts a template's instances and reuses the count for a
// few seconds of the service's clock, and counts again for a new pattern.
func TestCachedInstances(t *testing.T) {
	m, _, st := storetest.Mini(t)
	clk := redistest.NewMiniClock(m, t0)
	s := New(st, Options{Clock: clk})
	ctx := context.Background()
	tpl, _, err := s.PutTemplate(ctx, limitd.Template{ID: "per-user", Pattern: "user:*", Limiter: limiter.Config{Rate: 1}})
	if err != nil {
		t.Fatal(err)
	}
	acquireN(t, s, "user:1", 1, 1)
	count := func(tpl limitd.Template, want int64) {
		t.Helper()
		if n, exact, err := s.CachedInstances(ctx, tpl); err != nil || n != want || !exact {
			t.Errorf("%s: %d (exact %v), %v; want %d", tpl.Pattern, n, exact, err, want)
		}
	}
	count(tpl, 1)
	acquireN(t, s, "user:2", 1, 1)
	count(tpl, 1) // cached
	clk.Time = clk.Time.Add(instancesFor)
	count(tpl, 2)
	tpl.Pattern = "user:1"
	count(tpl, 1) // another pattern: counted again
}
