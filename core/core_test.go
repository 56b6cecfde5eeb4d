package core

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/internal/testkit/redistest"
	"github.com/limitd/limitd/internal/testkit/storetest"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

var t0 = time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)

// recorder is an Observer that keeps what it saw.
type recorder struct {
	calls  []Op
	events []Event
}

func (r *recorder) StoreCall(op Op, _ time.Duration) { r.calls = append(r.calls, op) }
func (r *recorder) Decided(e Event)                  { r.events = append(r.events, e) }

func newService(t *testing.T) (*Service, *store.Store, *recorder) {
	t.Helper()
	m, _, st := storetest.Mini(t)
	m.SetTime(t0)
	rec := &recorder{}
	return New(st, Options{Observer: rec}), st, rec
}

func TestTokenRoundTrip(t *testing.T) {
	s, st, _ := newService(t)
	ctx := context.Background()
	if _, _, err := s.Put(ctx, "pool", limiter.Config{Rate: 3, Burst: limiter.B(limiter.Inf)}); err != nil {
		t.Fatal(err)
	}
	g, err := s.Grant(ctx, GrantRequest{Name: "pool", Permits: 7, MaxWait: limitd.Forever})
	if err != nil || !g.Granted || g.Token == "" {
		t.Fatalf("grant: %+v, %v", g, err)
	}
	got, err := decodeToken(g.Token, "pool")
	if err != nil {
		t.Fatal(err)
	}
	want := g
	want.Delay, want.Lateness, want.Wait, want.Now, want.Instance, want.MaxPermits = 0, 0, 0, 0, false, 0
	if dg := (Grant{Grant: got, Token: g.Token}); dg != want {
		t.Errorf("decoded grant\n%+v, want\n%+v", dg, want)
	}
	// The token carries the whole grant, its origin included.
	if again := encodeToken(got); again != g.Token {
		t.Errorf("the decoded grant's token %q, want %q", again, g.Token)
	}
	// Bound to its limiter.
	_, err = decodeToken(g.Token, "pool2")
	var fe *limiter.FieldError
	if !errors.As(err, &fe) || fe.Field != "grant.id" {
		t.Errorf("token of another limiter: %v", err)
	}
	// The store takes the rebuilt grant: handed back at once, it rewinds.
	rewound, err := st.Release(ctx, got, 7)
	if err != nil || !rewound {
		t.Errorf("release of the decoded grant: %v, %v", rewound, err)
	}
}

func TestHandbackChecks(t *testing.T) {
	s, _, _ := newService(t)
	ctx := context.Background()
	if _, _, err := s.Put(ctx, "pool", limiter.Config{Rate: 1000}); err != nil {
		t.Fatal(err)
	}
	g, err := s.Grant(ctx, GrantRequest{Name: "pool", Permits: 10, MaxWait: limitd.Forever})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		r     HandbackRequest
		field string
	}{
		{HandbackRequest{Name: "pool", Token: g.Token, Granted: true, GrantPermits: 10, Permits: 11}, "permits"},
		{HandbackRequest{Name: "pool", Token: g.Token, Granted: true, GrantPermits: 10, Permits: 0}, "permits"},
		{HandbackRequest{Name: "pool", Token: g.Token, Granted: true, GrantPermits: 9, Permits: 1}, "grant.id"},
		{HandbackRequest{Name: "pool", Token: "g1.AAAA", Granted: true, GrantPermits: 10, Permits: 1}, "grant.id"},
	} {
		_, err := s.Handback(ctx, c.r)
		var fe *limiter.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%+v: %v, want bad %s", c.r, err, c.field)
		}
	}
	// Another version hands back as idle: nothing rewound.
	rewound, err := s.Handback(ctx, HandbackRequest{Name: "pool", Token: g.Token, Granted: true, GrantPermits: 10, Version: g.Version + 1, Permits: 3})
	if err != nil || rewound {
		t.Errorf("handback as of another version: %v, %v", rewound, err)
	}
}

func TestObserverSeesDecisions(t *testing.T) {
	s, _, rec := newService(t)
	ctx := context.Background()
	if _, _, err := s.Put(ctx, "a", limiter.Config{Rate: 1, Burst: limiter.B(1)}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := s.Acquire(ctx, AcquireRequest{Name: "a", Permits: 1, MaxWait: 0}); err != nil {
			t.Fatal(err)
		}
	}
	want := []Event{{Kind: EventRate, Limiter: "a", Outcome: "granted", Permits: 1},
		{Kind: EventRate, Limiter: "a", Outcome: "denied", Permits: 1}}
	if len(rec.events) != 2 || rec.events[0] != want[0] || rec.events[1] != want[1] {
		t.Errorf("events %+v, want %+v", rec.events, want)
	}
	if err := s.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	seen := map[Op]bool{}
	for _, op := range rec.calls {
		seen[op] = true
	}
	for _, op := range []Op{OpPut, OpAcquire, OpDelete} {
		if !seen[op] {
			t.Errorf("no store call %s observed: %v", op, rec.calls)
		}
	}
}

// A concurrency limiter's acquire takes no settings; a share limiter's is a
// conflict.
func TestAcquireDispatch(t *testing.T) {
	s, _, rec := newService(t)
	ctx := context.Background()
	if _, _, err := s.Put(ctx, "sem", limiter.Config{Kind: limiter.KindConcurrency, Limit: ptr[int64](1), Lease: limiter.D(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	a, err := s.Acquire(ctx, AcquireRequest{Name: "sem", Permits: 1, MaxWait: limitd.Forever})
	if err != nil || a.Slot == nil || !a.Slot.Granted || a.Rate != nil {
		t.Fatalf("slot acquire: %+v, %v", a, err)
	}
	a, err = s.Acquire(ctx, AcquireRequest{Name: "sem", Permits: 1, MaxWait: limitd.Forever})
	if err != nil || a.Slot == nil || a.Slot.Granted {
		t.Fatalf("second slot acquire: %+v, %v", a, err)
	}
	_, err = s.Acquire(ctx, AcquireRequest{Name: "sem", Permits: 2, MaxWait: limitd.Forever, Given: Given{Permits: true}})
	var fe *limiter.FieldError
	if !errors.As(err, &fe) || fe.Field != "permits" {
		t.Errorf("slot acquire with permits: %v", err)
	}
	if n := len(rec.events); n != 2 || rec.events[0].Kind != EventSlot || rec.events[1].Outcome != "denied" {
		t.Errorf("events %+v", rec.events)
	}
	if _, _, err := s.Put(ctx, "sh", limiter.Config{Kind: limiter.KindShare, Capacity: ptr(10.0)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, AcquireRequest{Name: "sh", Permits: 1, MaxWait: limitd.Forever}); !errors.Is(err, ErrConflict) {
		t.Errorf("acquire on a share limiter: %v, want ErrConflict", err)
	}
}

func ptr[T any](v T) *T { return &v }

// fakeClock records the sleeps of a blocking acquire instead of sleeping.
type fakeClock struct{ slept []time.Duration }

func (c *fakeClock) Now() time.Time { return time.Now() }
func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.slept = append(c.slept, d)
	return ctx.Err()
}

// A blocking acquire waits out its delay on the service's clock before it
// answers; a non-blocking one answers at once.
func TestAcquireBlockSleepsTheDelay(t *testing.T) {
	_, st, _ := newService(t)
	clk := &fakeClock{}
	s := New(st, Options{Clock: clk})
	ctx := context.Background()
	if _, _, err := s.Put(ctx, "b", limiter.Config{Rate: 10, Burst: limiter.B(1)}); err != nil {
		t.Fatal(err)
	}
	for _, block := range []bool{false, false, true} {
		a, err := s.Acquire(ctx, AcquireRequest{Name: "b", Permits: 1, MaxWait: limitd.Forever, Block: block})
		if err != nil || a.Rate == nil || !a.Rate.Granted {
			t.Fatalf("acquire: %+v, %v", a, err)
		}
	}
	// The first permit is due at once, the second 100 ms later (not
	// blocked: no sleep), the third 200 ms later.
	if len(clk.slept) != 1 || clk.slept[0] != 200*time.Millisecond {
		t.Errorf("slept %v, want [200ms]", clk.slept)
	}
}

// A blocking acquire that a window refuses waits for the window's reset and
// asks again: one request, so one decision observed (the grant, delayed by
// the wait), not a denial and a grant.
func TestWindowBlockIsOneDecision(t *testing.T) {
	m, _, st := storetest.Mini(t)
	clk := redistest.NewMiniClock(m, t0.Truncate(10*time.Second)) // a window starts (windows align to the epoch)
	rec := &recorder{}
	s := New(st, Options{Observer: rec, Clock: clk})
	ctx := context.Background()
	one := int64(1)
	if _, _, err := s.Put(ctx, "w", limiter.Config{Kind: limiter.KindWindow, Limit: &one, Period: "10s"}); err != nil {
		t.Fatal(err)
	}
	for _, block := range []bool{false, true} {
		a, err := s.Acquire(ctx, AcquireRequest{Name: "w", Permits: 1, MaxWait: time.Minute, Block: block})
		if err != nil || a.Rate == nil || !a.Rate.Granted {
			t.Fatalf("acquire (block %v): %+v, %v", block, a, err)
		}
	}
	if clk.Slept != 10*time.Second {
		t.Errorf("slept %v, want the window's 10s", clk.Slept)
	}
	want := []Event{{Kind: EventRate, Limiter: "w", Outcome: "granted", Permits: 1},
		{Kind: EventRate, Limiter: "w", Outcome: "granted", Permits: 1, Delay: 10 * time.Second}}
	if len(rec.events) != 2 || rec.events[0] != want[0] || rec.events[1] != want[1] {
		t.Errorf("events %+v, want %+v", rec.events, want)
	}
}
