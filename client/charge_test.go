package client_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/limitd/limitd/api"
	"github.com/limitd/limitd/client"
	"github.com/limitd/limitd/client/redisclient"
	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

// ctTransports runs f with a client over Redis and one over HTTP (an API
// server on the same store), on a miniredis whose clock stands still at
// t0, so that every delay is exact.
func ctTransports(t *testing.T, f func(t *testing.T, c *client.Client, st *store.Store, t0 time.Time)) {
	for _, over := range []string{"redis", "http"} {
		t.Run(over, func(t *testing.T) {
			m, rdb, st := ctMini(t)
			t0 := time.Unix(1_750_000_020, 0) // a whole minute
			m.SetTime(t0)
			var c *client.Client
			if over == "http" {
				srv := httptest.NewServer(api.New(api.Options{Service: core.New(st, core.Options{})}))
				t.Cleanup(srv.Close)
				c = client.NewHTTP(srv.URL, client.WithHTTPClient(srv.Client()))
			} else {
				c = redisclient.New(rdb)
			}
			t.Cleanup(func() { _ = c.Close() })
			f(t, c, st, t0)
		})
	}
}

func TestLimiterCharge(t *testing.T) {
	ctTransports(t, func(t *testing.T, c *client.Client, st *store.Store, _ time.Time) {
		ctx := context.Background()
		ctPut(t, st, "s", strict(100)) // 10 ms a permit
		l, _ := c.Limiter("s")
		d, err := l.Charge(ctx, 300)
		if err != nil || !d.Charged || !d.Granted || d.Permits != 300 || d.Delay != 3e9 || d.Window {
			t.Fatalf("charge 300: %+v, %v", d, err)
		}
		if d, err := l.Charge(ctx, 0); err != nil || d.Granted || d.Delay != 3e9 {
			t.Errorf("check in debt: %+v, %v", d, err)
		}
		if w := ctWaitInfo(t, st, "s"); w.Permits != 300 {
			t.Errorf("the store counts %d permits, want 300", w.Permits)
		}

		limit := int64(1000)
		ctPut(t, st, "w", limiter.Config{Kind: limiter.KindWindow, Limit: &limit, Period: "1m"})
		w, _ := c.Limiter("w")
		for i, within := range []bool{true, true, true, false} {
			d, err := w.Charge(ctx, 300)
			if err != nil || d.Granted != within || !d.Window || d.Limit != 1000 || d.Wait != max(0, 700-300*int64(i)) ||
				d.Position != d.Now+60e9 {
				t.Errorf("window charge %d: %+v, %v", i, d, err)
			}
		}

		if _, err := l.Charge(ctx, -1); !errors.Is(err, limiter.ErrInvalid) {
			t.Errorf("charge of -1: %v, want ErrInvalid", err)
		}
		capacity := 10.0
		ctPut(t, st, "sh", limiter.Config{Kind: limiter.KindShare, Capacity: &capacity})
		sh, _ := c.Limiter("sh")
		if _, err := sh.Charge(ctx, 1); !errors.Is(err, limiter.ErrConflict) {
			t.Errorf("charge of a share limiter: %v, want ErrConflict", err)
		}
		_ = l.Close()
		if _, err := l.Charge(ctx, 1); !errors.Is(err, client.ErrClosed) {
			t.Errorf("charge on a closed handle: %v, want ErrClosed", err)
		}
	})
}

// A reservation settled with what its work used: the unused permits go
// back (the schedule rewound when nothing was taken since, else as idle
// time), the excess is charged; a window gives its count back.
func TestReservationSettle(t *testing.T) {
	ctTransports(t, func(t *testing.T, c *client.Client, st *store.Store, t0 time.Time) {
		ctx := context.Background()
		ctPut(t, st, "s", strict(100)) // 10 ms a permit
		l, _ := c.Limiter("s")
		reserve := func(n int64) *client.Reservation {
			t.Helper()
			r, err := l.Reserve(ctx, n)
			if err != nil {
				t.Fatalf("reserve %d: %v", n, err)
			}
			return r
		}
		// 4 of 10 used, nothing taken since: the schedule is rewound
		if err := reserve(10).Settle(ctx, 4); err != nil {
			t.Fatal(err)
		}
		if r := reserve(1); !r.Permit().Scheduled.Equal(t0.Add(40 * time.Millisecond)) {
			t.Errorf("after a settle of 4 of 10 the next permit is due at %v, want t0 + 40ms", r.Permit().Scheduled.Sub(t0))
		}
		// 15 of 10: the excess charged
		r := reserve(10)
		if err := r.Settle(ctx, 15); err != nil {
			t.Fatal(err)
		}
		if err := r.Settle(ctx, 15); !errors.Is(err, client.ErrSettled) {
			t.Errorf("a second settle: %v, want ErrSettled", err)
		}
		// 2 of 10, with a permit taken after them: their time counts as idle
		r = reserve(10)
		reserve(1)
		before := ctWaitInfo(t, st, "s")
		if err := r.Settle(ctx, 2); err != nil {
			t.Fatal(err)
		}
		after := ctWaitInfo(t, st, "s")
		if after.Permits != 4+1+15+2+1 || after.Idle-before.Idle != 80e6 || after.Position != before.Position {
			t.Errorf("store after the settles: %+v (before the last %+v)", after, before)
		}
		if err := reserve(3).Settle(ctx, -1); !errors.Is(err, limiter.ErrInvalid) {
			t.Errorf("settle with -1: %v, want ErrInvalid", err)
		}

		limit := int64(10)
		ctPut(t, st, "w", limiter.Config{Kind: limiter.KindWindow, Limit: &limit, Period: "1m"})
		w, _ := c.Limiter("w")
		r, err := w.Reserve(ctx, 8)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Settle(ctx, 3); err != nil {
			t.Fatal(err)
		}
		if info := ctWaitInfo(t, st, "w"); info.Wait != 7 {
			t.Errorf("window after a settle of 3 of 8: %d left, want 7", info.Wait)
		}
		if _, err := w.Reserve(ctx, 8); !errors.Is(err, client.ErrRefused) {
			t.Errorf("reserve 8 with 7 left: %v, want ErrRefused", err)
		}
	})
}
