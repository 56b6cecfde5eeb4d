package client_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/limitd/limitd/client"
	"github.com/limitd/limitd/internal/redistest"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

// Helpers of the client tests carry the prefix ct, so they cannot clash with
// other test files of the package.

// ctMini starts a miniredis and returns a store over it: enough wherever
// timing does not matter.
func ctMini(t *testing.T) (*miniredis.Miniredis, *redis.Client, *store.Store) {
	t.Helper()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	return m, rdb, store.New(rdb)
}

// ctServer starts a private redis-server (never port 6379) and returns a
// store over a client with short timeouts, so that a stopped server is
// noticed quickly. The caller may close rdb early (before goleak checks).
func ctServer(t *testing.T) (*redistest.Instance, *redis.Client, *store.Store) {
	t.Helper()
	srv := redistest.Server(t)
	rdb := redis.NewClient(&redis.Options{
		Addr: srv.Addr(), DialTimeout: 200 * time.Millisecond, ReadTimeout: 500 * time.Millisecond,
		WriteTimeout: 500 * time.Millisecond, MaxRetries: 1, ContextTimeoutEnabled: true,
		DialerRetries: 1, DialerRetryTimeout: 10 * time.Millisecond,
	})
	t.Cleanup(func() { _ = rdb.Close() })
	return srv, rdb, store.New(rdb)
}

func ctPut(t *testing.T, st *store.Store, name string, c limiter.Config) store.Info {
	t.Helper()
	info, _, err := st.Put(context.Background(), name, c)
	if err != nil {
		t.Fatalf("Put %s: %v", name, err)
	}
	return info
}

func ctWaitInfo(t *testing.T, st *store.Store, name string) store.WaitInfo {
	t.Helper()
	w, err := st.Wait(context.Background(), name)
	if err != nil {
		t.Fatalf("store Wait %s: %v", name, err)
	}
	return w
}

// ctTransport wraps a Transport, counting its remote calls and timing the
// change events it delivers.
type ctTransport struct {
	client.Transport
	grants, releases atomic.Int64

	mu     sync.Mutex
	events []ctEvent
}

type ctEvent struct {
	msg string
	at  time.Time // when the client's watcher received it
}

func ctCounting(st *store.Store) *ctTransport {
	return &ctTransport{Transport: client.NewStoreTransport(st)}
}

func (t *ctTransport) Grant(ctx context.Context, name string, k int64, maxWait time.Duration) (store.Grant, error) {
	t.grants.Add(1)
	return t.Transport.Grant(ctx, name, k, maxWait)
}

func (t *ctTransport) Release(ctx context.Context, g store.Grant, m int64) error {
	t.releases.Add(1)
	return t.Transport.Release(ctx, g, m)
}

// Changes forwards the inner events on an unbuffered channel, so that the
// time recorded is when the client's watcher took the event.
func (t *ctTransport) Changes(ctx context.Context) <-chan string {
	in := t.Transport.Changes(ctx)
	if in == nil {
		return nil
	}
	out := make(chan string)
	go func() {
		defer close(out)
		for m := range in {
			select {
			case out <- m:
				t.mu.Lock()
				t.events = append(t.events, ctEvent{msg: m, at: time.Now()})
				t.mu.Unlock()
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// eventAt returns when the watcher took the event msg, or false.
func (t *ctTransport) eventAt(msg string) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range t.events {
		if e.msg == msg {
			return e.at, true
		}
	}
	return time.Time{}, false
}

// ctLeaks are the goroutines goleak may ignore: redistest reaps its
// redis-server processes (restarted ones too) in goroutines of its own.
var ctLeaks = []goleak.Option{
	goleak.IgnoreAnyFunction("github.com/limitd/limitd/internal/redistest.(*Instance).startLocked.func1"),
}

// ctEventually polls cond every few ms until it holds or d has passed.
func ctEventually(d time.Duration, cond func() bool) bool {
	end := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(end) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}
