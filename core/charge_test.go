package core

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

// A charge is observed as a decision with outcome "charged" and its
// permits, a check too (0 permits); it takes its permits whatever is left.
func TestCharge(t *testing.T) {
	s, _, rec := newService(t)
	ctx := context.Background()
	if _, _, err := s.Put(ctx, "a", limiter.Config{Rate: 1, Burst: limiter.B(1)}); err != nil {
		t.Fatal(err)
	}
	d, err := s.Charge(ctx, ChargeRequest{Name: "a", Permits: 5})
	if err != nil || !d.Charged || !d.Granted || d.Permits != 5 || d.Delay != 5e9 {
		t.Fatalf("charge 5: %+v, %v", d, err)
	}
	if d, err = s.Charge(ctx, ChargeRequest{Name: "a", Permits: 0}); err != nil || d.Granted || d.Delay != 5e9 {
		t.Errorf("check in debt: %+v, %v", d, err)
	}
	want := []Event{{Kind: EventRate, Limiter: "a", Outcome: "charged", Permits: 5},
		{Kind: EventRate, Limiter: "a", Outcome: "charged"}}
	if len(rec.events) != 2 || rec.events[0] != want[0] || rec.events[1] != want[1] {
		t.Errorf("events %+v, want %+v", rec.events, want)
	}
	if n := len(rec.calls); n == 0 || rec.calls[n-1] != OpCharge || OpCharge.String() != "charge" {
		t.Errorf("store calls %v, want the last a charge", rec.calls)
	}

	_, err = s.Charge(ctx, ChargeRequest{Name: "a", Permits: -1})
	var fe *limiter.FieldError
	if !errors.As(err, &fe) || fe.Field != "permits" {
		t.Errorf("charge of -1: %v, want an error naming permits", err)
	}
	capacity := 10.0
	if _, _, err := s.Put(ctx, "sh", limiter.Config{Kind: limiter.KindShare, Capacity: &capacity}); err != nil {
		t.Fatal(err)
	}
	if _, err = s.Charge(ctx, ChargeRequest{Name: "sh", Permits: 1}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("charge of a share limiter: %v, want a conflict", err)
	}
	if _, err = s.Charge(ctx, ChargeRequest{Name: "nope", Permits: 1}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("charge of no limiter: %v, want not found", err)
	}
}

// A charge on a Redis that never answers, reached by a client without
// timeouts of its own (which honours context deadlines, as store.NewClient's
// does), ends at the service's DecideTimeout.
func TestChargeBounded(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		for c := range accepted {
			_ = c.Close()
		}
	})
	rdb := redis.NewClient(&redis.Options{Addr: l.Addr().String(), ReadTimeout: -1, WriteTimeout: -1, MaxRetries: -1,
		ContextTimeoutEnabled: true}) // as store.NewClient's
	t.Cleanup(func() { _ = rdb.Close() })
	s := New(store.New(rdb), Options{DecideTimeout: 50 * time.Millisecond})
	done := make(chan error, 1)
	go func() {
		_, err := s.Charge(context.Background(), ChargeRequest{Name: "a", Permits: 1})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("charge on a hung Redis: %v, want unavailable", err)
		}
	case <-time.After(20 * time.Second): // unbounded, it would wait forever
		t.Fatal("a charge on a hung Redis did not end at DecideTimeout")
	}
}
