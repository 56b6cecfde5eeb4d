package client_test

import (
	"context"
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

// AcquireAll over both transports: all or nothing, a check takes nothing,
// and over HTTP a limiter in shadow mode lets the call through.
func TestAcquireAllTransports(t *testing.T) {
	_, rdb, st := ctServer(t)
	srv := httptest.NewServer(api.New(api.Options{Service: core.New(st, core.Options{})}))
	defer srv.Close()
	for _, c := range []struct {
		name string
		c    *client.Client
	}{
		{"redis", redisclient.New(rdb)},
		{"http", client.NewHTTP(srv.URL, client.WithHTTPClient(srv.Client()))},
	} {
		t.Run(c.name, func(t *testing.T) {
			defer c.c.Close()
			ctx := t.Context()
			a, b := c.name+"-a", c.name+"-b"
			ctPut(t, st, a, strict(0.01))
			ctPut(t, st, b, strict(0.01))
			r, err := c.c.AcquireAll(ctx, []client.Permits{{Name: a, Permits: 1}, {Name: b, Permits: 0}}, 0)
			if err != nil || !r.Granted || len(r.Decisions) != 2 || r.Decisions[0].Permits != 1 || !r.Decisions[1].Granted {
				t.Fatalf("first call: %+v, %v", r, err)
			}
			// a owes 100 s now: refused, b untouched.
			r, err = c.c.AcquireAll(ctx, []client.Permits{{Name: b, Permits: 1}, {Name: a, Permits: 1}}, 0)
			if err != nil || r.Granted || !r.Decisions[0].Granted || r.Decisions[1].Granted || r.Decisions[1].RetryAfter <= 0 {
				t.Fatalf("refused call: %+v, %v", r, err)
			}
			if w := ctWaitInfo(t, st, b); w.Started {
				t.Errorf("b after a check and a refused call: %+v, want not started", w)
			}
			if _, err := c.c.AcquireAll(ctx, []client.Permits{{Name: a, Permits: 1}, {Name: c.name + "-none", Permits: 1}}, limitd.Forever); err == nil {
				t.Error("a missing limiter: no error")
			}
		})
	}
	// Shadow mode over HTTP.
	sh := strict(0.01)
	sh.Shadow = true
	ctPut(t, st, "sh", sh)
	c := client.NewHTTP(srv.URL, client.WithHTTPClient(srv.Client()))
	defer c.Close()
	for i := range 2 {
		r, err := c.AcquireAll(t.Context(), []client.Permits{{Name: "sh", Permits: 1}}, 0)
		if err != nil || !r.Granted || r.Decisions[0].Shadow != (i == 1) {
			t.Errorf("shadow call %d: %+v, %v", i, r, err)
		}
	}
	// and one acquire: a refusal let through says so, with its retry_after
	ctPut(t, st, "sh1", sh)
	for i := range 2 {
		d, err := c.Acquire(t.Context(), "sh1", 1, 0)
		if err != nil || !d.Granted || d.Shadow != (i == 1) || (d.RetryAfter > 0) != (i == 1) {
			t.Errorf("shadow acquire %d: %+v, %v", i, d, err)
		}
	}
}

// Over HTTP a Semaphore of a limiter in shadow mode is never refused: a slot
// let through holds no lease and its release does nothing.
func TestSemaphoreShadowHTTP(t *testing.T) {
	_, _, st := ctServer(t)
	srv := httptest.NewServer(api.New(api.Options{Service: core.New(st, core.Options{})}))
	defer srv.Close()
	one := int64(1)
	ctPut(t, st, "sem-sh", limiter.Config{Kind: limiter.KindConcurrency, Limit: &one, Shadow: true})
	c := client.NewHTTP(srv.URL, client.WithHTTPClient(srv.Client()))
	defer c.Close()
	sem, err := c.Semaphore("sem-sh")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	first, err := sem.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	second, err := sem.Acquire(ctx) // refused, let through
	if err != nil {
		t.Fatalf("second acquire in shadow mode: %v", err)
	}
	if n := sem.InUse(); n != 1 {
		t.Errorf("InUse %d, want 1 (the shadow slot holds nothing)", n)
	}
	second()
	first()
}
