package client_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/api"
	"github.com/limitd/limitd/client"
	"github.com/limitd/limitd/client/redisclient"
	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/limiter"
)

// Client.Acquire decides one acquire in one round trip, over Redis and over
// HTTP alike: on a window limiter, a grant carries the limit, the permits
// left and the window's end, a refusal the time until it resets.
func TestAcquireWindow(t *testing.T) {
	m, rdb, st := ctMini(t)
	at := time.Unix(1_800_000_000, 0) // a whole minute
	m.SetTime(at.Add(15 * time.Second))
	limit := int64(3)
	ctPut(t, st, "w", limiter.Config{Kind: limiter.KindWindow, Limit: &limit, Period: "1m"})
	srv := httptest.NewServer(api.New(api.Options{Service: core.New(st, core.Options{})}))
	defer srv.Close()
	ctx := context.Background()
	end := at.Add(time.Minute).UnixNano()
	for _, c := range []struct {
		name string
		c    *client.Client
	}{{"redis", redisclient.New(rdb)}, {"http", client.NewHTTP(srv.URL, client.WithHTTPClient(srv.Client()))}} {
		t.Run(c.name, func(t *testing.T) {
			defer c.c.Close()
			_, _ = st.Reset(ctx, "w")
			d, err := c.c.Acquire(ctx, "w", 2, limitd.Forever)
			if err != nil {
				t.Fatal(err)
			}
			if !d.Granted || d.Limit != 3 || d.Wait != 1 || d.Position != end || d.Start != d.Now {
				t.Errorf("granted: %+v", d)
			}
			d, err = c.c.Acquire(ctx, "w", 2, 0)
			if err != nil {
				t.Fatal(err)
			}
			if d.Granted || d.RetryAfter != 45e9 || d.Wait != 1 || d.Position != end {
				t.Errorf("denied: %+v", d)
			}
			var fe *limiter.FieldError
			if _, err := c.c.Acquire(ctx, "w", 4, 0); !errors.As(err, &fe) || fe.Field != "permits" {
				t.Errorf("4 of 3: %v", err)
			}
			// several limiters in one call: the window's decision says the same
			_, _ = st.Reset(ctx, "w")
			beside := "beside-" + c.name
			ctPut(t, st, beside, strict(1000))
			r, err := c.c.AcquireAll(ctx, []client.Permits{{Name: "w", Permits: 1}, {Name: beside, Permits: 1}}, 0)
			if err != nil || !r.Granted {
				t.Fatalf("AcquireAll: %+v, %v", r, err)
			}
			if d := r.Decisions[0]; d.Limit != 3 || d.Wait != 2 || d.Position != end {
				t.Errorf("the window in AcquireAll: %+v", d)
			}
			// a pool does not take a window's permits: its first grant
			// finds a window (and counts), every call after it is refused
			// from memory, taking nothing more
			_, _ = st.Reset(ctx, "w")
			l, _ := c.c.Limiter("w")
			if _, err := l.Wait(ctx); !errors.Is(err, limiter.ErrInvalid) {
				t.Errorf("Wait on a window: %v", err)
			}
			w0, err := st.Wait(ctx, "w")
			if err != nil {
				t.Fatal(err)
			}
			for range 5 {
				if l.Allow() {
					t.Error("Allow on a window granted")
				}
				if _, err := l.Wait(ctx); !errors.Is(err, limiter.ErrInvalid) {
					t.Errorf("Wait on a window again: %v", err)
				}
			}
			if w, err := st.Wait(ctx, "w"); err != nil || w.Wait != w0.Wait || l.Stats().RemoteCalls != 1 {
				t.Errorf("a pool on a window took more: %d permits left, was %d (%v); %d remote calls, want 1",
					w.Wait, w0.Wait, err, l.Stats().RemoteCalls)
			}
		})
	}
}
