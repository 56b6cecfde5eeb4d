package store

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/internal/testkit/redistest"
	"github.com/limitd/limitd/limiter"
)

func TestChargeMiniredis(t *testing.T) { chargeSuite(t, stMiniredisFactory(t)) }
func TestChargeRedis(t *testing.T)     { chargeSuite(t, stServerFactory(t)) }

func chargeSuite(t *testing.T, f stFactory) {
	t.Run("Kinds", func(t *testing.T) { chargeKinds(t, f) })
	t.Run("Batched", func(t *testing.T) { chargeBatched(t, f) })
}

func stCharge(t *testing.T, s *Store, name string, n int64) limitd.Decision {
	t.Helper()
	d, err := s.Charge(t.Context(), name, n)
	if err != nil {
		t.Fatalf("Charge(%s, %d): %v", name, n, err)
	}
	if !d.Charged || d.Permits != n {
		t.Fatalf("Charge(%s, %d): %+v, want Charged with its permits", name, n, d)
	}
	return d
}

// chargeKinds: each kind's charge, the errors, a template instance.
func chargeKinds(t *testing.T, f stFactory) {
	s := stStore(t, f(t))
	ctx := t.Context()
	stPut(t, s, "sched", stSched(10, 1)) // 100 ms a permit
	stPut(t, s, "smooth", stSmooth(10, 1))
	one := int64(1000)
	stPut(t, s, "win", limiter.Config{Kind: limiter.KindWindow, Limit: &one, Period: "1h"})
	zero := int64(0)
	stPut(t, s, "deny", limiter.Config{Kind: limiter.KindWindow, Limit: &zero, Period: "1h"})
	slots := int64(2)
	stPut(t, s, "conc", limiter.Config{Kind: limiter.KindConcurrency, Limit: &slots})

	// A schedule: 30 permits now, 3 s of debt; a later check and acquire
	// see it, and a charge in debt is taken all the same.
	d := stCharge(t, s, "sched", 30)
	if !d.Granted || d.Delay < 2_900_000_000 || d.Delay > 3e9 || d.Window || d.Position != d.Start+3e9 {
		t.Errorf("charge 30: %+v, want within, 3 s owed", d)
	}
	if d := stCharge(t, s, "sched", 0); d.Granted || d.Delay <= 0 {
		t.Errorf("check in debt: %+v, want not within", d)
	}
	if a := stAcquire(t, s, "sched", 1, 0); a.Granted {
		t.Errorf("acquire in debt: %+v, want refused", a)
	}
	if d := stCharge(t, s, "sched", 10); d.Granted || d.Delay < 3e9 {
		t.Errorf("charge in debt: %+v, want taken, not within", d)
	}
	if w := stWait(t, s, "sched"); w.Permits != 40 || w.Allocated != 4e9 {
		t.Errorf("after charges of 40: %+v", w)
	}

	// Smooth: its stored permits are spent first, the rest owed.
	if d := stCharge(t, s, "smooth", 25); !d.Granted || d.Delay <= 2e9 || d.Delay > 2500e6 {
		t.Errorf("smooth charge 25: %+v, want 2.5 s owed less what was stored", d)
	}

	// A window counts past its limit and refuses until its window ends.
	for i, want := range []bool{true, true, true, false} {
		d := stCharge(t, s, "win", 300)
		if d.Granted != want || !d.Window || d.Limit != 1000 || d.Wait != max(0, 1000-300*int64(i+1)) {
			t.Errorf("window charge %d: %+v", i, d)
		}
	}
	if d := stCharge(t, s, "win", 0); d.Granted || d.Delay != d.Position-d.Now {
		t.Errorf("window check over the limit: %+v, want not within until its end", d)
	}
	if w := stWait(t, s, "win"); !w.Window || w.Wait != 0 || w.Permits != 1200 {
		t.Errorf("window after 1,200: %+v", w)
	}

	// A limit of 0 refuses every permit, as a window.
	a := stAcquire(t, s, "deny", 1, limitd.Forever)
	if a.Granted || !a.Window || a.Limit != 0 || a.RetryAfter != a.Position-a.Now {
		t.Errorf("acquire of a deny-all window: %+v, want refused until its end", a)
	}

	// A template instance.
	if _, err := s.PutTemplate(ctx, limitd.Template{ID: "u", Pattern: "u:*", Limiter: stSched(1, 1)}); err != nil {
		t.Fatal(err)
	}
	if d := stCharge(t, s, "u:1", 5); !d.Instance || !d.Granted || d.Delay < 4_900_000_000 {
		t.Errorf("instance charge: %+v", d)
	}

	// Errors: no such limiter, a kind without permits, bad permits.
	_, err := s.Charge(ctx, "nope", 1)
	stWantIs(t, "charge of no limiter", err, ErrNotFound)
	_, err = s.Charge(ctx, "conc", 1)
	stWantIs(t, "charge of a concurrency limiter", err, ErrConflict)
	for _, n := range []int64{-1, limiter.Horizon + 1} {
		_, err = s.Charge(ctx, "sched", n)
		stWantField(t, "charge of bad permits", err, "permits")
	}
	p, _ := limiter.Compile(stSched(10, 1))
	_, err = s.Charge(ctx, "sched", p.MaxCharge()+1)
	var fe *limiter.FieldError
	if !errors.As(err, &fe) || fe.Rule != limiter.ChargeRule(p.MaxCharge()) {
		t.Errorf("charge past the horizon: %v, want %q", err, limiter.ChargeRule(p.MaxCharge()))
	}
	if d := stCharge(t, s, "sched", p.MaxCharge()); d.Granted {
		t.Errorf("charge of the most: %+v", d)
	}
}

// chargeBatched: charges go through the batcher, mixed with acquires, and
// each is counted once.
func chargeBatched(t *testing.T, f stFactory) {
	s := stStore(t, f(t), WithBatching(16))
	stPut(t, s, "b", stSched(1e6, 1))
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 8 {
		wg.Go(func() {
			for i := range 20 {
				var err error
				if (g+i)%2 == 0 {
					_, err = s.Charge(t.Context(), "b", 3)
				} else {
					_, err = s.Acquire(t.Context(), "b", 1, limitd.Forever)
				}
				if err != nil {
					errs <- err
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
	if w := stWait(t, s, "b"); w.Permits != 80*3+80 {
		t.Errorf("permits %d, want %d", w.Permits, 80*3+80)
	}
}

// TestChargeInstanceTTL: an instance in debt lives until its debt is paid,
// a window's until its window ends (a real redis-server: its TTLs).
func TestChargeInstanceTTL(t *testing.T) {
	t.Parallel()
	rdb := redistest.Server(t).Client()
	ctx := t.Context()
	s := New(rdb, WithPrefix("cttl"))
	one := int64(1000)
	for _, tp := range []limitd.Template{
		{ID: "s", Pattern: "s:*", Limiter: limiter.Config{Rate: 1000, Burst: limiter.B(1), MaxBacklog: limiter.D(time.Minute)}, IdleTTL: limiter.D(time.Minute)},
		{ID: "w", Pattern: "w:*", Limiter: limiter.Config{Kind: limiter.KindWindow, Limit: &one, Period: "24h"}, IdleTTL: limiter.D(time.Minute)},
	} {
		if _, err := s.PutTemplate(ctx, tp); err != nil {
			t.Fatal(err)
		}
	}
	// three days of schedule at 1000/s, on an instance that does not exist
	d, err := s.Charge(ctx, "s:a", 3*86_400*1000)
	if err != nil || !d.Instance {
		t.Fatalf("charge: %+v %v", d, err)
	}
	debt := time.Duration(d.Position - d.Now)
	if ttl := rdb.PTTL(ctx, "cttl:{s:a}:i").Val(); debt < 72*time.Hour || ttl < debt-10*time.Second || ttl > debt+10*time.Second {
		t.Errorf("schedule instance in debt %v: PTTL %v", debt, ttl)
	}
	d, err = s.Charge(ctx, "w:a", 5000)
	if err != nil || d.Granted || !d.Instance {
		t.Fatalf("window charge: %+v %v", d, err)
	}
	// (window.lua's fast path gives a new instance an eighth more: see
	// Instance TTLs in lua/lib.lua)
	end := time.Duration(d.Position - d.Now)
	if ttl := rdb.PTTL(ctx, "cttl:{w:a}:i").Val(); ttl < end-10*time.Second || ttl > max(end, time.Minute)*9/8+10*time.Second {
		t.Errorf("window instance over its limit, %v before its end: PTTL %v", end, ttl)
	}
}
