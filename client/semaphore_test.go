package client_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/limitd/limitd/client"
	"github.com/limitd/limitd/client/redisclient"
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
// and do hold all 3.
func TestSemaphoreLimit(t *testing.T) {
	shBackends(t, func(t *testing.T, rdb *redis.Client, st *store.Store) {
		ctPut(t, st, "sem", semConfig(3, 5*time.Second))
		c := redisclient.New(rdb)
		defer c.Close()
		s := semHandle(t, c, "sem", client.WithMaxBackoff(10*time.Millisecond))
		// No deadline and no hold time to overlap by luck: the first holders
		// keep their slots until three are held at once, so that the limit is
		// reached on any machine, however slow; then each goroutine takes its
		// share of acquisitions, and no more than three are ever held.
		const goroutines, each = 12, 4
		var cur, most, ops atomic.Int64
		full := make(chan struct{})
		var fullOnce sync.Once
		var wg sync.WaitGroup
		for range goroutines {
			wg.Go(func() {
				for range each {
					release, err := s.Acquire(context.Background())
					if err != nil {
						t.Errorf("Acquire: %v", err)
						return
					}
					n := cur.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					if n >= 3 {
						fullOnce.Do(func() {
							defer close(full)
							// Three held and waiting: a fourth slot is refused.
							l, err := st.AcquireSlot(context.Background(), "sem")
							if err != nil || l.Granted {
								t.Errorf("a fourth slot while three are held: %+v, %v", l, err)
							}
						})
					}
					select { // until three were held at once
					case <-full:
					case <-time.After(time.Minute): // a bound, not a measure: fails instead of hanging
						t.Errorf("three slots never held at once")
						return
					}
					cur.Add(-1) // before the slot is freed
					ops.Add(1)
					release()
					release() // idempotent
				}
			})
		}
		wg.Wait()
		t.Logf("%d acquisitions, at most %d held at once", ops.Load(), most.Load())
		if n := ops.Load(); n != goroutines*each {
			t.Fatalf("%d acquisitions, want %d", n, goroutines*each)
		}
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
// On a driven clock (miniredis in step): the renewer is the only sleeper.
func TestSemaphoreRenewal(t *testing.T) {
	clk, _, st := ctDriven(t)
	ctPut(t, st, "renew", semConfig(1, 300*time.Millisecond))
	var lost atomic.Int64
	c := clk.client(st)
	defer c.Close()
	s := semHandle(t, c, "renew", client.WithOnLost(func(string) { lost.Add(1) }))
	release, err := s.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for range 10 { // 1s, more than three lease times
		clk.drive(t, func() int { return 1 }, clk.Now().Add(100*time.Millisecond), nil)
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
}

// A holder that crashed (it took a slot through the store and never renews)
// loses its slot when the lease ends: a waiting Acquire gets it then, not
// before, and no later than one backoff after.
func TestSemaphoreReclaimsCrashedHolder(t *testing.T) {
	clk, _, st := ctDriven(t)
	const lease, backoff = 300 * time.Millisecond, 100 * time.Millisecond
	ctPut(t, st, "crash", semConfig(1, lease))
	crashed, err := st.AcquireSlot(context.Background(), "crash")
	if err != nil || !crashed.Granted {
		t.Fatalf("store AcquireSlot: %+v, %v", crashed, err)
	}
	t0 := clk.Now()
	c := clk.client(st)
	defer c.Close()
	s := semHandle(t, c, "crash", client.WithMaxBackoff(backoff))
	var release func()
	// Asleep: the Acquire's pause, then the new holder's renewer (the clock
	// may move on to it before run returns: the time of the grant is the
	// clock's at the call that granted it).
	clk.run(t, 1, func() { release, err = s.Acquire(context.Background()) })
	if err != nil {
		t.Fatalf("Acquire while a crashed holder has the slot: %v", err)
	}
	el := clk.lastSlot().Sub(t0)
	defer release()
	t.Logf("slot reclaimed and acquired %v after the crashed holder took it", el)
	if el < lease || el > lease+backoff {
		t.Fatalf("acquired %v after the crashed holder took the slot, want from its %v lease to one backoff (%v) after", el, lease, backoff)
	}
	if _, err := st.RenewSlot(context.Background(), "crash", crashed.ID); !errors.Is(err, limiter.ErrNotFound) {
		t.Fatalf("renewing the reclaimed lease: %v, want ErrNotFound", err)
	}
}

// A lease lost under its holder (here: the limiter was re-created, as after a
// Redis restart, and a new acquirer took its only slot before the holder
// renewed) is reported to OnLost by the next renewal.
func TestSemaphoreOnLost(t *testing.T) {
	_, rdb, st := ctMini(t)
	ctPut(t, st, "lost", semConfig(2, 300*time.Millisecond))
	ids := make(chan string, 1)
	c := redisclient.New(rdb)
	defer c.Close()
	s := semHandle(t, c, "lost", client.WithOnLost(func(id string) { ids <- id }))
	release, err := s.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Delete(context.Background(), "lost"); err != nil {
		t.Fatal(err)
	}
	ctPut(t, st, "lost", semConfig(1, 300*time.Millisecond))
	if l, err := st.AcquireSlot(context.Background(), "lost"); err != nil || !l.Granted {
		t.Fatalf("acquire on the re-created limiter: %+v, %v", l, err)
	}
	select {
	case id := <-ids:
		if len(id) != 32 {
			t.Fatalf("OnLost got lease id %q", id)
		}
	case <-time.After(10 * time.Second): // it is due a renewal (100ms) after the loss
		t.Fatal("OnLost not called within 10s of the lease being lost")
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
	c := redisclient.New(rdb)
	if _, err := c.Semaphore("bad name"); !errors.Is(err, limiter.ErrInvalid) {
		t.Fatalf("Semaphore of a bad name: %v, want ErrInvalid", err)
	}
	ctx := context.Background()
	if _, err := semHandle(t, c, "nope").Acquire(ctx); !errors.Is(err, limiter.ErrNotFound) {
		t.Fatalf("Acquire on an unknown limiter: %v, want ErrNotFound", err)
	}
	if _, err := semHandle(t, c, "cap").Acquire(ctx); !errors.Is(err, limiter.ErrConflict) {
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
	c := redisclient.New(rdb)
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

// semSlots is the number of leases the store holds for name.
func semSlots(t *testing.T, st *store.Store, name string) int64 {
	t.Helper()
	n, err := st.Client().ZCard(context.Background(), "limitd:{"+name+"}:s").Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Redis loses the slots while three holders of a semaphore of 3 run (the set
// deleted, as a restart without persistence would): within one renewal
// interval (lease/3) every holder has registered again, none is told it
// lost its slot, and new acquirers are refused while they hold. When a new
// acquirer comes first, the holder left without room is told, and the slots
// never exceed the limit once the holders have renewed.
func TestSemaphoreSurvivesStateLoss(t *testing.T) {
	clk, _, st := ctDriven(t)
	const lease = 300 * time.Millisecond
	ctPut(t, st, "keep", semConfig(3, lease))
	var lost atomic.Int64
	c := clk.client(st)
	defer c.Close()
	s := semHandle(t, c, "keep", client.WithOnLost(func(string) { lost.Add(1) }))
	for range 3 {
		if _, err := s.Acquire(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	renewers := func() int { return s.InUse() - int(lost.Load()) } // a lost lease is renewed no more
	interval := func() { clk.drive(t, renewers, clk.Now().Add(lease/3), nil) }
	interval()
	if err := st.Client().Del(context.Background(), "limitd:{keep}:s").Err(); err != nil {
		t.Fatal(err)
	}
	if n := semSlots(t, st, "keep"); n != 0 {
		t.Fatalf("%d slots after the loss", n)
	}
	interval()
	if n := semSlots(t, st, "keep"); n != 3 {
		t.Fatalf("%d slots stored one renewal interval after the loss, want the 3 held", n)
	}
	if semFree(t, st, "keep") {
		t.Fatal("a new acquirer got a slot while the three holders hold them again")
	}
	if lost.Load() != 0 {
		t.Fatalf("OnLost called %d times for leases registered again", lost.Load())
	}

	// A new acquirer comes between the loss and the renewals.
	if err := st.Client().Del(context.Background(), "limitd:{keep}:s").Err(); err != nil {
		t.Fatal(err)
	}
	early, err := st.AcquireSlot(context.Background(), "keep")
	if err != nil || !early.Granted {
		t.Fatalf("acquire after the loss: %+v, %v", early, err)
	}
	end := clk.Now().Add(lease / 3)
	for clk.Now().Before(end) { // over-allocated: 3 held locally, 1 new
		clk.drive(t, renewers, clk.Now().Add(lease/30), nil)
		if n := semSlots(t, st, "keep"); n > 3 {
			t.Fatalf("%d slots stored, limit 3", n)
		}
	}
	if n, l := semSlots(t, st, "keep"), lost.Load(); n != 3 || l != 1 {
		t.Fatalf("after the renewals: %d slots stored, %d lost; want 3 and 1", n, l)
	}
	if semFree(t, st, "keep") {
		t.Fatal("a new acquirer got a slot with the limit held")
	}
}

// The same loss on a real redis-server, on real time: the holders register
// again within a few renewal intervals, and the slots stored never exceed
// the limit.
func TestSemaphoreSurvivesStateLossRedis(t *testing.T) {
	_, rdb, st := ctServer(t)
	const lease = 600 * time.Millisecond
	ctPut(t, st, "keep", semConfig(3, lease))
	var lost atomic.Int64
	c := redisclient.New(rdb)
	defer c.Close()
	s := semHandle(t, c, "keep", client.WithOnLost(func(string) { lost.Add(1) }))
	for range 3 {
		if _, err := s.Acquire(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if err := rdb.Del(context.Background(), "limitd:{keep}:s").Err(); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if !ctEventually(10*time.Second, func() bool {
		n := semSlots(t, st, "keep")
		if n > 3 {
			t.Fatalf("%d slots stored, limit 3", n)
		}
		return n == 3
	}) {
		t.Fatalf("%d slots stored 10s after the loss, want the 3 held", semSlots(t, st, "keep"))
	}
	t.Logf("registered again %v after the loss (renewal interval %v)", time.Since(t0), lease/3)
	if semFree(t, st, "keep") {
		t.Fatal("a new acquirer got a slot while the three holders hold them again")
	}
	if lost.Load() != 0 || s.InUse() != 3 {
		t.Fatalf("%d lost, %d held; want 0, 3", lost.Load(), s.InUse())
	}
}
