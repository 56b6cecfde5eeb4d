package client_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/limitd/limitd/client"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

// Semaphores over miniredis and a real redis-server. Helpers of this file
// carry the prefix sem.

func semConfig(limit int64, lease time.Duration) limiter.Config {
	return limiter.Config{Kind: limiter.KindConcurrency, Limit: &limit, Lease: limiter.D(lease)}
}

func semHandle(t *testing.T, c *client.Client, name string, opts ...client.SemaphoreOption) *client.Semaphore {
	t.Helper()
	s, err := c.Semaphore(name, opts...)
	if err != nil {
		t.Fatalf("Semaphore(%s): %v", name, err)
	}
	return s
}

// semFree reports whether a slot is free, taking and freeing it through the
// store.
func semFree(t *testing.T, st *store.Store, name string) bool {
	t.Helper()
	l, err := st.AcquireSlot(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	if l.Granted {
		if err := st.ReleaseSlot(context.Background(), name, l.ID); err != nil {
			t.Fatal(err)
		}
	}
	return l.Granted
}

// 12 goroutines on a semaphore of 3 never hold more than 3 slots at once,
// and keep all 3 busy.
func TestSemaphoreLimit(t *testing.T) {
	shBackends(t, func(t *testing.T, rdb *redis.Client, st *store.Store) {
		ctPut(t, st, "sem", semConfig(3, 5*time.Second))
		c := client.New(rdb)
		defer c.Close()
		s := semHandle(t, c, "sem")
		var cur, most, ops atomic.Int64
		ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
		defer cancel()
		var wg sync.WaitGroup
		for range 12 {
			wg.Go(func() {
				for {
					release, err := s.Acquire(ctx)
					if err != nil {
						if !errors.Is(err, context.DeadlineExceeded) {
							t.Errorf("Acquire: %v", err)
						}
						return
					}
					n := cur.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					time.Sleep(3 * time.Millisecond)
					cur.Add(-1) // before the slot is freed
					ops.Add(1)
					release()
					release() // idempotent
				}
			})
		}
		wg.Wait()
		t.Logf("%d acquisitions, at most %d held at once", ops.Load(), most.Load())
		if m := most.Load(); m != 3 {
			t.Fatalf("at most %d held at once, want 3", m)
		}
		if n := s.InUse(); n != 0 {
			t.Fatalf("%d slots held after every release", n)
		}
		for range 3 { // all free again
			if l, err := st.AcquireSlot(context.Background(), "sem"); err != nil || !l.Granted {
				t.Fatalf("store AcquireSlot after every release: %+v, %v", l, err)
			}
		}
	})
}

// A held slot outlives its lease time by renewal; release frees it at once.
func TestSemaphoreRenewal(t *testing.T) {
	shBackends(t, func(t *testing.T, rdb *redis.Client, st *store.Store) {
		ctPut(t, st, "renew", semConfig(1, 300*time.Millisecond))
		var lost atomic.Int64
		c := client.New(rdb)
		defer c.Close()
		s := semHandle(t, c, "renew", client.WithOnLost(func(string) { lost.Add(1) }))
		release, err := s.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for range 10 { // 1s, more than three lease times
			time.Sleep(100 * time.Millisecond)
			if semFree(t, st, "renew") {
				t.Fatal("the held slot's lease ended: it was not renewed")
			}
		}
		if lost.Load() != 0 {
			t.Fatal("OnLost called for a lease renewed in time")
		}
		release()
		if !semFree(t, st, "renew") {
			t.Fatal("the slot is still held after release")
		}
		release()
	})
}

// A holder that crashed (it took a slot through the store and never renews)
// loses its slot when the lease ends: a waiting Acquire gets it then.
func TestSemaphoreReclaimsCrashedHolder(t *testing.T) {
	shBackends(t, func(t *testing.T, rdb *redis.Client, st *store.Store) {
		ctPut(t, st, "crash", semConfig(1, 300*time.Millisecond))
		crashed, err := st.AcquireSlot(context.Background(), "crash")
		if err != nil || !crashed.Granted {
			t.Fatalf("store AcquireSlot: %+v, %v", crashed, err)
		}
		t0 := time.Now()
		c := client.New(rdb)
		defer c.Close()
		s := semHandle(t, c, "crash")
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		release, err := s.Acquire(ctx)
		if err != nil {
			t.Fatalf("Acquire while a crashed holder has the slot: %v", err)
		}
		defer release()
		el := time.Since(t0)
		t.Logf("slot reclaimed and acquired %v after the crashed holder took it", el)
		if el < 250*time.Millisecond || el > time.Second {
			t.Fatalf("acquired %v after the crashed holder took the slot, want just after its 300ms lease", el)
		}
		if _, err := st.RenewSlot(context.Background(), "crash", crashed.ID); !errors.Is(err, limiter.ErrNotFound) {
			t.Fatalf("renewing the reclaimed lease: %v, want ErrNotFound", err)
		}
	})
}

// A lease lost under its holder (here: the limiter was re-created, as after a
// Redis restart) is reported to OnLost by the next renewal.
func TestSemaphoreOnLost(t *testing.T) {
	_, rdb, st := ctMini(t)
	ctPut(t, st, "lost", semConfig(2, 300*time.Millisecond))
	ids := make(chan string, 1)
	c := client.New(rdb)
	defer c.Close()
	s := semHandle(t, c, "lost", client.WithOnLost(func(id string) { ids <- id }))
	release, err := s.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Delete(context.Background(), "lost"); err != nil {
		t.Fatal(err)
	}
	ctPut(t, st, "lost", semConfig(2, 300*time.Millisecond))
	select {
	case id := <-ids:
		if len(id) != 32 {
			t.Fatalf("OnLost got lease id %q", id)
		}
	case <-time.After(time.Second):
		t.Fatal("OnLost not called within a second of the lease being lost")
	}
	release() // does nothing remote, and does not block
	if s.InUse() != 0 {
		t.Fatal("a lost and released slot is still counted")
	}
}

func TestSemaphoreErrors(t *testing.T) {
	_, rdb, st := ctMini(t)
	ctPut(t, st, "cap", shConfig(10, time.Minute, time.Second))
	ctPut(t, st, "one", semConfig(1, time.Minute))
	c := client.New(rdb)
	if _, err := c.Semaphore("bad name"); !errors.Is(err, limiter.ErrInvalid) {
		t.Fatalf("Semaphore of a bad name: %v, want ErrInvalid", err)
	}
	ctx := context.Background()
	if _, err := semHandle(t, c, "nope").Acquire(ctx); !errors.Is(err, limiter.ErrNotFound) {
		t.Fatalf("Acquire on an unknown limiter: %v, want ErrNotFound", err)
	}
	if _, err := semHandle(t, c, "cap").Acquire(ctx); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("Acquire on a share limiter: %v, want ErrConflict", err)
	}
	s := semHandle(t, c, "one")
	release, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := s.Acquire(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire on a full semaphore until a deadline: %v", err)
	}
	waiting := make(chan error, 1)
	go func() { _, err := s.Acquire(ctx); waiting <- err }()
	time.Sleep(30 * time.Millisecond)
	if err := c.Close(); err != nil { // closes s, releasing the slot held
		t.Fatal(err)
	}
	if err := <-waiting; !errors.Is(err, client.ErrClosed) {
		t.Fatalf("Acquire waiting at Close: %v, want ErrClosed", err)
	}
	release() // already released by Close
	if !semFree(t, st, "one") {
		t.Fatal("Close did not release the held slot")
	}
	if _, err := s.Acquire(ctx); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("Acquire after Close: %v, want ErrClosed", err)
	}
	if _, err := c.Semaphore("one"); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("Semaphore on a closed client: %v, want ErrClosed", err)
	}
}

// Held slots' renewers end with release, or with Close.
func TestSemaphoreLeavesNoGoroutines(t *testing.T) {
	_, rdb, st := ctServer(t)
	ctPut(t, st, "leak", semConfig(4, 200*time.Millisecond))
	c := client.New(rdb)
	s := semHandle(t, c, "leak")
	var releases []func()
	for range 4 {
		r, err := s.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		releases = append(releases, r)
	}
	time.Sleep(150 * time.Millisecond) // renewals under way
	releases[0]()
	releases[1]()
	if err := c.Close(); err != nil { // releases the other two
		t.Fatal(err)
	}
	for _, r := range releases {
		r()
	}
	_ = rdb.Close()
	goleak.VerifyNone(t, ctLeaks...)
}

// At most two reports run at once across every process sharing the
// "reports" semaphore; a crashed process loses its slot when its lease ends.
func ExampleClient_Semaphore() {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		panic(err)
	}
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()
	ctx := context.Background()

	limit := int64(2)
	if _, _, err := store.New(rdb).Put(ctx, "reports", limiter.Config{Kind: limiter.KindConcurrency,
		Limit: &limit, Lease: limiter.D(10 * time.Second)}); err != nil {
		panic(err)
	}
	c := client.New(rdb)
	defer c.Close()
	sem, err := c.Semaphore("reports", client.WithOnLost(func(string) {
		// The lease ran out under us (the process stalled past it): stop
		// the report, someone else may hold the slot now.
	}))
	if err != nil {
		panic(err)
	}
	var releases []func()
	for range 2 {
		release, err := sem.Acquire(ctx) // renewed in the background while held
		if err != nil {
			panic(err)
		}
		releases = append(releases, release)
	}
	full, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = sem.Acquire(full)
	fmt.Println("third:", err)
	for _, release := range releases {
		release()
	}
	release, err := sem.Acquire(ctx)
	fmt.Println("after release:", err)
	release()
	// Output:
	// third: context deadline exceeded
	// after release: <nil>
}
