package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/limitd/limitd/client"
	"github.com/limitd/limitd/client/redisclient"
	"github.com/limitd/limitd/limiter"
)

// While Redis is down a handle follows its fallback mode; once Redis is back
// (empty, as after a restart without persistence) and the limiter exists
// again, the handle returns to the shared schedule by itself.
func TestFallbackWhileRedisIsDown(t *testing.T) {
	for _, tc := range []struct {
		mode client.Fallback
		// check runs while Redis is down, once the handle has noticed.
		check func(t *testing.T, l *client.Limiter)
	}{
		{client.FallbackSafe, func(t *testing.T, l *client.Limiter) {
			// Safe rate 200/s, strict: the local limit schedules every
			// permit at least 5ms after the one before, however fast or
			// slow the machine runs the callers.
			var prev client.Permit
			for i := range 50 {
				p, err := l.Wait(context.Background())
				if err != nil {
					t.Fatalf("Wait in safe fallback: %v", err)
				}
				if p.Shared {
					t.Fatal("a permit in fallback claims to be Shared")
				}
				if d := p.Scheduled.Sub(prev.Scheduled); i > 0 && d < 5*time.Millisecond {
					t.Fatalf("safe fallback at 200/s: permit %d scheduled %v after the one before, want ≥ 5ms", i, d)
				}
				if p.Start.Before(p.Scheduled) {
					t.Fatalf("safe fallback: permit %d started %v before its scheduled time", i, p.Scheduled.Sub(p.Start))
				}
				prev = p
			}
		}},
		{client.FallbackOptimistic, func(t *testing.T, l *client.Limiter) {
			for i := range 5000 {
				if !l.Allow() {
					t.Fatalf("optimistic fallback refused Allow %d", i)
				}
			}
			for range 1000 {
				p, err := l.Wait(context.Background())
				if err != nil || p.Shared || p.Lateness != 0 || !p.Start.Equal(p.Scheduled) {
					t.Fatalf("optimistic fallback Wait: %+v, %v; want a permit for now", p, err)
				}
			}
		}},
		{client.FallbackPessimistic, func(t *testing.T, l *client.Limiter) {
			for i := range 1000 {
				if l.Allow() {
					t.Fatalf("pessimistic fallback allowed call %d", i)
				}
			}
			if _, err := l.Wait(context.Background()); !errors.Is(err, limiter.ErrUnavailable) {
				t.Fatalf("pessimistic fallback Wait: %v, want limiter.ErrUnavailable", err)
			}
		}},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			srv, rdb, st := ctServer(t)
			const name = "dep"
			ctPut(t, st, name, strict(1000))
			c := redisclient.New(rdb, client.WithFallback(tc.mode), client.WithSafeRate(200),
				client.WithRetryInterval(50*time.Millisecond))
			l, err := c.Limiter(name)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			for range 100 {
				p, err := l.Wait(ctx)
				if err != nil || !p.Shared {
					t.Fatalf("Wait with Redis up: %+v, %v", p, err)
				}
			}

			srv.Stop()
			// The handle notices Redis is gone at its next fetch, a prefetch
			// while the pool still holds permits: taking them slowly keeps
			// some in the pool when it goes down.
			if !ctEventually(10*time.Second, func() bool {
				p, err := l.Wait(ctx)
				time.Sleep(5 * time.Millisecond)
				return (err == nil && !p.Shared) || errors.Is(err, limiter.ErrUnavailable)
			}) {
				t.Fatal("the handle did not notice that Redis is down within 10s")
			}
			tc.check(t, l)

			srv.Restart() // empty: the limiter is gone
			// Until the limiter exists again the handle stays in fallback:
			// callers never see its absence.
			for range 20 {
				p, err := l.Wait(ctx)
				if p.Shared || (err != nil && !errors.Is(err, limiter.ErrUnavailable)) {
					t.Fatalf("Wait before the limiter is re-created: %+v, %v", p, err)
				}
				time.Sleep(5 * time.Millisecond)
			}
			ctPut(t, st, name, strict(1000))
			t0 := time.Now()
			if !ctEventually(10*time.Second, func() bool { // retries every 50ms
				p, err := l.Wait(ctx)
				return err == nil && p.Shared
			}) {
				t.Fatal("the handle did not return to the shared schedule within 10s of Redis coming back")
			}
			t.Logf("shared again %v after the limiter was re-created", time.Since(t0))
			var shared int64
			for range 50 {
				p, err := l.Wait(ctx)
				if err != nil || !p.Shared {
					t.Fatalf("Wait after recovery: %+v, %v", p, err)
				}
				shared++
			}

			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			// The new limiter counts exactly the shared permits taken from it:
			// nothing granted by the lost one was handed back to it.
			if w := ctWaitInfo(t, st, name); w.Permits < shared+1 || w.Permits > shared+1 {
				t.Fatalf("re-created limiter counts %d permits, %d were taken from it (plus the one that ended the fallback)", w.Permits, shared)
			}
			_ = rdb.Close()
			goleak.VerifyNone(t, ctLeaks...)
		})
	}
}

// A handle whose limiter goes away while the client is closed must not leak
// or hang: Close returns quickly even when Redis is down.
func TestCloseWhileRedisIsDown(t *testing.T) {
	srv, rdb, st := ctServer(t)
	ctPut(t, st, "gone", strict(1000))
	c := redisclient.New(rdb)
	l, _ := c.Limiter("gone")
	for range 10 {
		if _, err := l.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	srv.Stop()
	t0 := time.Now()
	_ = c.Close()                                  // the hand-back fails: Redis is gone
	if el := time.Since(t0); el > 10*time.Second { // a hang, not a speed: the hand-back gives up after 2s
		t.Fatalf("Close with Redis down took %v", el)
	}
	_ = rdb.Close()
	goleak.VerifyNone(t, ctLeaks...)
}
