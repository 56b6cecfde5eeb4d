package client_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/limitd/limitd/api"
	"github.com/limitd/limitd/client"
	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/limiter"
)

// Over HTTP a pool dispenses one shared schedule, permits exactly one slice
// apart, and Close hands unused permits back: the store counts exactly what
// callers received.
func TestHTTPWaitAndClose(t *testing.T) {
	_, _, st := ctServer(t)
	const rate = 2000.0
	slice := time.Duration(1e9 / rate)
	ctPut(t, st, "sched", strict(rate))
	srv := httptest.NewServer(api.New(api.Options{Service: core.New(st, core.Options{}), Token: "tok"}))
	defer srv.Close()

	c := client.NewHTTP(srv.URL, client.WithToken("tok"), client.WithStaleAfter(time.Hour), client.WithHTTPClient(srv.Client()))
	l, err := c.Limiter("sched")
	if err != nil {
		t.Fatal(err)
	}
	all := ctRun(t, l, 4, 300*time.Millisecond)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if len(all) < 10 {
		t.Fatalf("only %d permits", len(all))
	}
	times := make([]int64, len(all))
	for i, p := range all {
		if !p.Shared {
			t.Fatalf("permit %d not Shared", i)
		}
		times[i] = p.Scheduled.UnixNano()
	}
	slices.Sort(times)
	for i := 1; i < len(times); i++ {
		if d := time.Duration(times[i] - times[i-1]); d != slice {
			t.Fatalf("sorted permits %d and %d are %v apart, want exactly %v", i-1, i, d, slice)
		}
	}
	if w := ctWaitInfo(t, st, "sched"); w.Permits != int64(len(all)) {
		t.Fatalf("store permits after Close = %d, callers received %d", w.Permits, len(all))
	}
}

func TestHTTPErrors(t *testing.T) {
	_, _, st := ctMini(t)
	ctPut(t, st, "x", strict(100))
	srv := httptest.NewServer(api.New(api.Options{Service: core.New(st, core.Options{}), Token: "tok"}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()

	c := client.NewHTTP(srv.URL, client.WithToken("tok"), client.WithFallback(client.FallbackPessimistic))
	defer c.Close()
	tr := client.NewHTTP(srv.URL, client.WithToken("tok"))
	defer tr.Close()
	l, _ := c.Limiter("nope")
	if _, err := l.Wait(ctx); !errors.Is(err, limiter.ErrNotFound) {
		t.Errorf("Wait on an unknown limiter: %v, want ErrNotFound", err)
	}
	l, _ = c.Limiter("x")
	if _, err := l.Wait(ctx); err != nil {
		t.Errorf("Wait with the token: %v", err)
	}

	bad := client.NewHTTP(srv.URL, client.WithToken("wrong"), client.WithFallback(client.FallbackPessimistic))
	defer bad.Close()
	l, _ = bad.Limiter("x")
	if _, err := l.Wait(ctx); !errors.Is(err, client.ErrUnauthorized) {
		t.Errorf("Wait with a wrong token: %v, want ErrUnauthorized", err)
	}
}
