package store

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/internal/testkit/redistest"
	"github.com/limitd/limitd/limiter"
)

// Concurrency limiters (leased slots) through the store, on miniredis and a
// real redis-server, and against slotsModel (slots_model_test.go) on a
// simulated clock.

func TestConcurrencyMiniredis(t *testing.T) { ccSuite(t, stMiniredisFactory(t)) }
func TestConcurrencyRedis(t *testing.T)     { ccSuite(t, stServerFactory(t)) }

func ccSuite(t *testing.T, f stFactory) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, stFactory)
	}{
		{"NeverMoreThanLimit", ccTestLimit},
		{"RenewRelease", ccTestRenewRelease},
		{"ExpiryReclaim", ccTestExpiry},
		{"LimitChanged", ccTestLimitChanged},
		{"BadInputWritesNothing", ccTestBadInput},
		{"Reregister", ccTestReregister},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, f) })
	}
}

func ccConfig(limit int64, lease time.Duration) limiter.Config {
	return limiter.Config{Kind: limiter.KindConcurrency, Limit: &limit, Lease: limiter.D(lease)}
}

func ccAcquire(t *testing.T, s *Store, name string) limitd.SlotLease {
	t.Helper()
	l, err := s.AcquireSlot(t.Context(), name)
	if err != nil {
		t.Fatalf("AcquireSlot(%s): %v", name, err)
	}
	return l
}

// ccTestLimit: 20 goroutines contend for 5 slots; never more than 5 are held,
// by the store's count (InUse) or by the holders' own.
func ccTestLimit(t *testing.T, f stFactory) {
	s := stStore(t, f(t))
	stPut(t, s, "sem", ccConfig(5, 10*time.Second))
	var holders, peak, grants, denials atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for g := range 20 {
		wg.Go(func() {
			for range 15 {
				l, err := s.AcquireSlot(t.Context(), "sem")
				if err != nil {
					errs <- err
					return
				}
				if l.InUse > 5 || l.Limit != 5 {
					errs <- fmt.Errorf("goroutine %d: %+v: in use above the limit", g, l)
					return
				}
				if !l.Granted {
					denials.Add(1)
					if l.RetryAfter <= 0 || l.RetryAfter > 10e9 || l.ID != "" || l.InUse != 5 {
						errs <- fmt.Errorf("denied lease %+v: want 0 < retry after ≤ lease, no id, 5 in use", l)
						return
					}
					time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
					continue
				}
				grants.Add(1)
				n := holders.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				if n > 5 {
					errs <- fmt.Errorf("%d holders at once", n)
				}
				time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
				holders.Add(-1)
				if err := s.ReleaseSlot(t.Context(), "sem", l.ID); err != nil {
					errs <- fmt.Errorf("ReleaseSlot: %w", err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if peak.Load() > 5 || peak.Load() < 2 {
		t.Errorf("peak holders %d, want 2..5", peak.Load())
	}
	if grants.Load() == 0 || denials.Load() == 0 {
		t.Errorf("%d grants, %d denials: want contention", grants.Load(), denials.Load())
	}
	if l := ccAcquire(t, s, "sem"); !l.Granted || l.InUse != 1 {
		t.Errorf("after everyone released: %+v; want granted, 1 in use", l)
	}
	t.Logf("%d grants, %d denials, peak %d", grants.Load(), denials.Load(), peak.Load())
}

func ccTestRenewRelease(t *testing.T, f stFactory) {
	s := stStore(t, f(t))
	ctx := t.Context()
	stPut(t, s, "rr", ccConfig(2, 10*time.Second))
	a := ccAcquire(t, s, "rr")
	if !a.Granted || len(a.ID) != 32 || a.InUse != 1 || a.Limit != 2 || a.RetryAfter != 0 {
		t.Fatalf("first lease %+v", a)
	}
	if now := time.Now().UnixNano(); a.Expires < now+9e9 || a.Expires > now+11e9 {
		t.Errorf("lease expires in %v, want about 10s", time.Duration(a.Expires-now))
	}
	b := ccAcquire(t, s, "rr")
	if !b.Granted || b.ID == a.ID || b.InUse != 2 {
		t.Fatalf("second lease %+v", b)
	}
	c := ccAcquire(t, s, "rr")
	if c.Granted || c.InUse != 2 || c.RetryAfter <= 9e9 || c.RetryAfter > 10e9 || c.ID != "" || c.Expires != 0 {
		t.Errorf("third lease %+v: want denied, retry after the first lease ends", c)
	}
	time.Sleep(2 * time.Millisecond)
	r, err := s.RenewSlot(ctx, "rr", a.ID)
	if err != nil || !r.Granted || r.ID != a.ID || r.Expires <= a.Expires || r.InUse != 2 {
		t.Errorf("RenewSlot = %+v, %v; want a later expiry", r, err)
	}
	// The earliest lease is now b's: the retry runs to b's expiry from when
	// Redis decided, which is after before (a loaded machine may take long
	// to read the reply, so a clock read after it proves nothing).
	before := time.Now().UnixNano()
	if c := ccAcquire(t, s, "rr"); c.Granted || c.RetryAfter > b.Expires-before+1e3 {
		t.Errorf("denied lease %+v: retry after should run to b's expiry", c)
	}
	if err := s.ReleaseSlot(ctx, "rr", a.ID); err != nil {
		t.Fatalf("ReleaseSlot: %v", err)
	}
	stWantIs(t, "ReleaseSlot twice", s.ReleaseSlot(ctx, "rr", a.ID), ErrNotFound)
	if c := ccAcquire(t, s, "rr"); !c.Granted || c.InUse != 2 {
		t.Errorf("after a release: %+v; want granted", c)
	}
	// The limiter is full again: a renew of a lease it does not hold cannot
	// take a slot (with one free it would: see ccTestReregister).
	_, err = s.RenewSlot(ctx, "rr", a.ID)
	stWantIs(t, "RenewSlot after release on a full limiter", err, ErrLeaseNotHeld)
	never := strings.Repeat("0", 32)
	stWantIs(t, "ReleaseSlot of a lease never granted", s.ReleaseSlot(ctx, "rr", never), ErrLeaseNotHeld)
	_, err = s.RenewSlot(ctx, "rr", never)
	stWantIs(t, "RenewSlot of a lease never granted on a full limiter", err, ErrLeaseNotHeld)
	if ttl := s.Client().PTTL(ctx, s.slotsKey("rr")).Val(); ttl <= 9*time.Second || ttl > 10*time.Second+2*time.Millisecond {
		t.Errorf("slots TTL %v, want the latest lease (about 10s)", ttl)
	}
}

// ccTestExpiry: a lease that is not renewed is reclaimed, on real time; its
// slot goes to the next acquirer, and the late holder's renew is refused.
func ccTestExpiry(t *testing.T, f stFactory) {
	s := stStore(t, f(t))
	ctx := t.Context()
	stPut(t, s, "exp", ccConfig(1, 200*time.Millisecond))
	a := ccAcquire(t, s, "exp")
	if d := ccAcquire(t, s, "exp"); d.Granted || d.RetryAfter <= 0 || d.RetryAfter > 200e6 {
		t.Fatalf("second acquire %+v: want denied, retry after ≤ 200ms", d)
	}
	for time.Now().UnixNano() < a.Expires+2e6 {
		time.Sleep(10 * time.Millisecond)
	}
	b := ccAcquire(t, s, "exp")
	if !b.Granted || b.InUse != 1 {
		t.Errorf("acquire after the lease expired: %+v; want granted, 1 in use", b)
	}
	_, err := s.RenewSlot(ctx, "exp", a.ID)
	stWantIs(t, "RenewSlot after expiry, the slot taken", err, ErrLeaseNotHeld)
	stWantIs(t, "ReleaseSlot after expiry", s.ReleaseSlot(ctx, "exp", a.ID), ErrLeaseNotHeld)
	if n, _ := s.Client().ZCard(ctx, s.slotsKey("exp")).Result(); n != 1 {
		t.Errorf("%d leases stored, want 1 (the expired one reclaimed)", n)
	}
}

// ccTestReregister: Redis lost the slots (here: the set deleted mid-hold, as
// a restart without persistence or a failover that lost writes would) while
// three holders of a limit of 3 run. Each renew registers its lease again
// (Readded), and once they have, new acquirers are refused while they hold.
// A new acquirer that came first takes a slot (the one renewal interval of
// possible over-allocation), and then the last holder to renew finds no room:
// its lease is lost, and the count never exceeds the limit.
func ccTestReregister(t *testing.T, f stFactory) {
	s := stStore(t, f(t))
	ctx := t.Context()
	stPut(t, s, "rr3", ccConfig(3, 10*time.Second))
	var held []limitd.SlotLease
	for range 3 {
		held = append(held, ccAcquire(t, s, "rr3"))
	}
	lose := func() {
		t.Helper()
		if err := s.Client().Del(ctx, s.slotsKey("rr3")).Err(); err != nil {
			t.Fatal(err)
		}
	}
	inUse := func() int64 { return s.Client().ZCard(ctx, s.slotsKey("rr3")).Val() }

	lose()
	for i, h := range held {
		r, err := s.RenewSlot(ctx, "rr3", h.ID)
		if err != nil || !r.Granted || !r.Readded || r.InUse != int64(i+1) || r.Expires < h.Expires {
			t.Fatalf("renew %d after the loss: %+v, %v; want re-added, %d in use", i, r, err, i+1)
		}
		if n := inUse(); n != int64(i+1) {
			t.Fatalf("%d slots stored after %d renewals", n, i+1)
		}
	}
	if a := ccAcquire(t, s, "rr3"); a.Granted || a.InUse != 3 {
		t.Fatalf("acquire while the three holders hold again: %+v; want refused", a)
	}
	for _, h := range held { // a second renewal is an ordinary one
		if r, err := s.RenewSlot(ctx, "rr3", h.ID); err != nil || r.Readded || r.InUse != 3 {
			t.Fatalf("renew of a re-added lease: %+v, %v", r, err)
		}
	}

	lose()
	late := ccAcquire(t, s, "rr3") // before the holders renew
	if !late.Granted || late.InUse != 1 {
		t.Fatalf("acquire after the loss: %+v", late)
	}
	for i, h := range held {
		r, err := s.RenewSlot(ctx, "rr3", h.ID)
		switch {
		case i < 2 && (err != nil || !r.Readded):
			t.Fatalf("renew %d with room: %+v, %v; want re-added", i, r, err)
		case i == 2 && !errors.Is(err, ErrLeaseNotHeld):
			t.Fatalf("renew %d without room: %+v, %v; want ErrLeaseNotHeld (lost)", i, r, err)
		}
		if n := inUse(); n > 3 {
			t.Fatalf("%d slots stored, limit 3", n)
		}
	}
	if a := ccAcquire(t, s, "rr3"); a.Granted {
		t.Fatalf("acquire with the limit held: %+v", a)
	}
}

// ccTestLimitChanged: a lower limit keeps the held leases; new ones wait until
// fewer than the limit are held. A lease change applies to new leases.
func ccTestLimitChanged(t *testing.T, f stFactory) {
	s := stStore(t, f(t))
	ctx := t.Context()
	stPut(t, s, "chg", ccConfig(3, time.Minute))
	var ids []string
	for range 3 {
		ids = append(ids, ccAcquire(t, s, "chg").ID)
	}
	info, err := s.Patch(ctx, "chg", func(c limiter.Config) (limiter.Config, error) {
		c.Limit, c.Lease = new(int64(1)), limiter.D(time.Second)
		return c, nil
	})
	if err != nil || info.Version != 2 || *info.Config.Limit != 1 {
		t.Fatalf("Patch = %+v, %v", info, err)
	}
	if l := ccAcquire(t, s, "chg"); l.Granted || l.InUse != 3 || l.Limit != 1 {
		t.Errorf("acquire above the lowered limit: %+v; want denied, 3 in use, limit 1", l)
	}
	for _, id := range ids[:2] {
		if err := s.ReleaseSlot(ctx, "chg", id); err != nil {
			t.Fatal(err)
		}
	}
	if l := ccAcquire(t, s, "chg"); l.Granted {
		t.Errorf("acquire with 1 of 1 held: %+v", l)
	}
	if err := s.ReleaseSlot(ctx, "chg", ids[2]); err != nil {
		t.Fatal(err)
	}
	l := ccAcquire(t, s, "chg")
	if now := time.Now().UnixNano(); !l.Granted || l.Expires > now+1.1e9 {
		t.Errorf("acquire with none held: %+v; want granted with the new 1s lease", l)
	}
}

func ccTestBadInput(t *testing.T, f stFactory) {
	s := stStore(t, f(t))
	ctx := t.Context()
	stPut(t, s, "ok", ccConfig(1, time.Minute))
	held := ccAcquire(t, s, "ok")
	before := stSnapshot(t, s)
	for _, id := range []string{"", "x", strings.Repeat("A", 32), strings.Repeat("a", 31), strings.Repeat("a", 33), strings.Repeat("g", 32), held.ID + " "} {
		_, err := s.RenewSlot(ctx, "ok", id)
		stWantField(t, fmt.Sprintf("RenewSlot(%q)", id), err, "lease_id")
		stWantField(t, fmt.Sprintf("ReleaseSlot(%q)", id), s.ReleaseSlot(ctx, "ok", id), "lease_id")
	}
	_, err := s.AcquireSlot(ctx, "")
	stWantField(t, "AcquireSlot bad name", err, "name")
	_, err = s.RenewSlot(ctx, "a b", held.ID)
	stWantField(t, "RenewSlot bad name", err, "name")
	stWantField(t, "ReleaseSlot bad name", s.ReleaseSlot(ctx, "{x}", held.ID), "name")
	_, err = s.AcquireSlot(ctx, "absent")
	stWantIs(t, "AcquireSlot on no limiter", err, ErrNotFound)
	_, err = s.RenewSlot(ctx, "absent", held.ID)
	stWantIs(t, "RenewSlot on no limiter", err, ErrNotFound)
	stWantIs(t, "ReleaseSlot on no limiter", s.ReleaseSlot(ctx, "absent", held.ID), ErrNotFound)
	stWantIs(t, "ReleaseSlot unknown", s.ReleaseSlot(ctx, "ok", strings.Repeat("f", 32)), ErrNotFound)
	if l := ccAcquire(t, s, "ok"); l.Granted {
		t.Errorf("acquire on a full limiter: %+v", l)
	}
	stSameSnapshot(t, "bad input", before, stSnapshot(t, s))
}

// TestConcurrencyClock: on a simulated clock (miniredis SetTime) a lease ends
// exactly when slotsModel says, to the µs of Redis' clock, for leases that
// are not whole µs; random sequences agree with slotsModel; the set's TTL
// (FastForward) removes what is left once every lease ended.
func TestConcurrencyClock(t *testing.T) {
	m, rdb := redistest.Mini(t)
	s := stStore(t, rdb)
	ctx := t.Context()
	us := time.Date(2249, 6, 1, 0, 0, 0, 0, time.UTC).UnixMicro() + 123
	m.SetTime(time.UnixMicro(us))
	const lease = 1500*time.Microsecond + 500 // 1500.5 µs
	stPut(t, s, "clk", ccConfig(1, lease))
	a := ccAcquire(t, s, "clk")
	if a.Expires != us*1000+int64(lease) {
		t.Fatalf("expires %d, want %d", a.Expires, us*1000+int64(lease))
	}
	m.SetTime(time.UnixMicro(us + 1500)) // 0.5 µs before the end
	if l := ccAcquire(t, s, "clk"); l.Granted || l.RetryAfter != 1000 {
		t.Errorf("at 1500 µs: %+v; want denied, retry after 1 µs (the next whole µs)", l)
	}
	m.SetTime(time.UnixMicro(us + 1501))
	b := ccAcquire(t, s, "clk")
	if !b.Granted || b.InUse != 1 {
		t.Errorf("at 1501 µs: %+v; want the expired slot", b)
	}
	m.FastForward(4 * time.Millisecond) // the TTL: the lease rounded up to ms, plus 1 ms
	if n := rdb.Exists(ctx, s.slotsKey("clk")).Val(); n != 0 {
		t.Error("the slots set outlived its last lease")
	}

	// Random sequences against slotsModel.
	for seed := range 10 {
		rng := rand.New(rand.NewPCG(uint64(seed), 77))
		name := fmt.Sprint("rnd", seed)
		limit := int64(1 + rng.IntN(4))
		ttl := int64(1 + rng.Int64N(5e6))
		stPut(t, s, name, ccConfig(limit, time.Duration(ttl)))
		model := slotsModel{}
		var ids []string
		for step := range 300 {
			us += rng.Int64N(ttl/1000/3 + 2)
			m.SetTime(time.UnixMicro(us))
			now := us * 1000
			switch op := rng.IntN(3); {
			case op == 0 || len(ids) == 0:
				l, err := s.AcquireSlot(ctx, name)
				if err != nil {
					t.Fatal(err)
				}
				if !l.Granted {
					if n := model.InUse(now); n < limit || l.InUse != n {
						t.Fatalf("seed %d step %d: AcquireSlot %+v denied, model has %d of %d in use", seed, step, l, n, limit)
					}
					break
				}
				exp, ok := model.AcquireSlot(now, l.ID, limit, ttl)
				if !ok || l.Expires != exp || l.InUse != model.InUse(now) {
					t.Fatalf("seed %d step %d: AcquireSlot %+v, model %v %d, %d in use", seed, step, l, ok, exp, model.InUse(now))
				}
				ids = append(ids, l.ID)
			case op == 1:
				id := ids[rng.IntN(len(ids))]
				l, err := s.RenewSlot(ctx, name, id)
				exp, readded, ok := model.Renew(now, id, limit, ttl)
				if ok != (err == nil) || !ok && !errors.Is(err, ErrLeaseNotHeld) || ok && (l.Expires != exp || l.Readded != readded || l.InUse != model.InUse(now)) {
					t.Fatalf("seed %d step %d: RenewSlot %+v, %v; model %v %v %d", seed, step, l, err, ok, readded, exp)
				}
			default:
				id := ids[rng.IntN(len(ids))]
				err := s.ReleaseSlot(ctx, name, id)
				if ok := model.ReleaseSlot(now, id); ok != (err == nil) {
					t.Fatalf("seed %d step %d: ReleaseSlot %v, model %v", seed, step, err, ok)
				}
			}
		}
	}
}
