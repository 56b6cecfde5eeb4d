package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/client"
	"github.com/limitd/limitd/client/redisclient"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

// template serves every limiter name matching pattern at rate permits/s,
// strict.
func template(t *testing.T, st *store.Store, id, pattern string, rate float64) {
	t.Helper()
	c := limiter.Config{Rate: rate, Burst: limiter.B(1)}
	if _, err := st.PutTemplate(context.Background(), limitd.Template{ID: id, Pattern: pattern, Limiter: c}); err != nil {
		t.Fatal(err)
	}
}

func permitsOf(t *testing.T, st *store.Store, name string) int64 {
	t.Helper()
	w, err := st.Wait(context.Background(), name)
	if err != nil {
		t.Fatalf("store Wait %s: %v", name, err)
	}
	return w.Permits
}

// eventually polls cond every few ms until it holds or d has passed.
func eventually(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			return false
		}
	}
	return true
}

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) })

// get sends a request from addr (with headers h) to handler.
func get(handler http.Handler, addr string, h map[string]string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodGet, "/thing", nil)
	req.RemoteAddr = addr
	for k, v := range h {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, req)
	return rec
}

// steppedClock is the client's clock and the miniredis clock at once, moved
// only by step: the middleware's decisions then follow the test's time, not
// the machine's speed. The middleware never sleeps, so it needs no timers.
type steppedClock struct {
	m *miniredis.Miniredis

	mu       sync.Mutex
	now      time.Time
	inflight int // the client's grants and hand-backs under way
}

func newSteppedClock(m *miniredis.Miniredis) *steppedClock {
	c := &steppedClock{m: m, now: time.Now().Truncate(time.Millisecond)}
	m.SetTime(c.now)
	return c
}

func (c *steppedClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *steppedClock) NewTimer(time.Duration) client.Timer {
	panic("httplimit tests: the middleware does not sleep")
}

// step waits for the grants in flight (a prefetch) to land, then moves both
// clocks by d.
func (c *steppedClock) step(t *testing.T, d time.Duration) {
	t.Helper()
	if !eventually(10*time.Second, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.inflight == 0
	}) {
		t.Fatal("a grant is still in flight after 10s")
	}
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.m.SetTime(c.now)
	c.mu.Unlock()
}

// client returns a client on the clock over st.
func (c *steppedClock) client(st *store.Store) *client.Client {
	return client.NewWithTransport(countedTransport{redisclient.NewTransport(st), c}, client.WithClock(c))
}

type countedTransport struct {
	client.Transport
	c *steppedClock
}

func (t countedTransport) Grant(ctx context.Context, name string, k int64, maxWait time.Duration) (limitd.Grant, error) {
	defer t.c.begin()()
	return t.Transport.Grant(ctx, name, k, maxWait)
}

func (t countedTransport) Release(ctx context.Context, g limitd.Grant, m int64) error {
	defer t.c.begin()()
	return t.Transport.Release(ctx, g, m)
}

// begin counts a call in flight until the returned func is called.
func (c *steppedClock) begin() func() {
	c.mu.Lock()
	c.inflight++
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		c.inflight--
		c.mu.Unlock()
	}
}
