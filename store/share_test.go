package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/internal/testkit/redistest"
	"github.com/limitd/limitd/limiter"
)

// Share limiters (Doorman capacity leases) through the store: the same suite
// on miniredis and on a real redis-server, plus a differential test against
// limiter.ShareParams.Request on miniredis with a simulated clock.

func TestShareMiniredis(t *testing.T) { shSuite(t, stMiniredisFactory(t)) }
func TestShareRedis(t *testing.T)     { shSuite(t, stServerFactory(t)) }

// TestShareCluster runs the share and concurrency suites on a three-master
// Redis Cluster: every key of a limiter is in its slot.
func TestShareCluster(t *testing.T) {
	f := stClusterFactory(t)
	t.Run("Share", func(t *testing.T) { shSuite(t, f) })
	t.Run("Concurrency", func(t *testing.T) { ccSuite(t, f) })
}

func shSuite(t *testing.T, f stFactory) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, stFactory)
	}{
		{"DoormanWorkedExample", shTestDoorman},
		{"ModelInLockstep", shTestLockstep},
		{"NeverOvershoots", shTestNeverOvershoots},
		{"LoweredCapacity", shTestLoweredCapacity},
		{"ReturnCapacity", shTestReturn},
		{"PutPatchGetDelete", shTestConfig},
		{"LearningAfterFlush", shTestLearning},
		{"ExpiryCleanup", shTestExpiry},
		{"BadInputWritesNothing", shTestBadInput},
		{"WrongKind", shTestWrongKind},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, f) })
	}
}

// ---- helpers ----

func shConfig(capacity float64, alg limiter.Algorithm) limiter.Config {
	return limiter.Config{Kind: limiter.KindShare, Capacity: &capacity, Algorithm: alg}
}

func shAsk(t *testing.T, s *Store, name, client string, wants, has float64) limitd.CapacityLease {
	t.Helper()
	l, err := s.Capacity(t.Context(), name, limitd.CapacityRequest{ClientID: client, Wants: wants, Has: has})
	if err != nil {
		t.Fatalf("Capacity(%s, %s, wants %v, has %v): %v", name, client, wants, has, err)
	}
	return l
}

// shHolding is one entry of a share limiter's client hash.
type shHolding struct {
	wants, has, weight float64
	expUS              int64
}

// shHoldings reads a share limiter's client hash as stored.
func shHoldings(t *testing.T, s *Store, name string) map[string]shHolding {
	t.Helper()
	m, err := s.Client().HGetAll(t.Context(), s.clientsKey(name)).Result()
	if err != nil {
		t.Fatalf("HGETALL clients: %v", err)
	}
	out := map[string]shHolding{}
	for id, v := range m {
		var h shHolding
		if _, err := fmt.Sscanf(v, "%g %g %g %d", &h.wants, &h.has, &h.weight, &h.expUS); err != nil {
			t.Fatalf("client %s: unreadable entry %q: %v", id, v, err)
		}
		out[id] = h
	}
	return out
}

// shSum is Σ has of the leases unexpired at nowUS.
func shSum(hs map[string]shHolding, nowUS int64) float64 {
	var sum float64
	for _, h := range hs {
		if h.expUS > nowUS {
			sum += h.has
		}
	}
	return sum
}

func shRedisNowUS(t *testing.T, s *Store) int64 {
	t.Helper()
	tm, err := s.Client().Time(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return tm.UnixMicro()
}

// ---- the suite ----

// shTestDoorman: capacity 120, clients wanting 1000, 50 and 10, each asking
// in turn, twice (Doorman's worked example, in the README): proportional 69.69 / 40.31 / 10, fair 60 /
// 50 / 10; and the sum never above 120.
func shTestDoorman(t *testing.T, f stFactory) {
	s := stStore(t, f(t))
	for _, tc := range []struct {
		alg  limiter.Algorithm
		want [3]float64
	}{
		{limiter.AlgorithmProportional, [3]float64{69.69, 40.31, 10}},
		{limiter.AlgorithmFair, [3]float64{60, 50, 10}},
		{limiter.AlgorithmStatic, [3]float64{40, 40, 10}},
		{limiter.AlgorithmNone, [3]float64{1000, 50, 10}},
	} {
		name := "doorman-" + string(tc.alg)
		stPut(t, s, name, shConfig(120, tc.alg))
		var got [3]float64
		for range 2 {
			for i, w := range []float64{1000, 50, 10} {
				l := shAsk(t, s, name, fmt.Sprint("client", i), w, got[i])
				got[i] = l.Gets
				if l.Learning || l.Version != 1 || l.Refresh != 5e9 {
					t.Errorf("%s: lease %+v: want not learning, version 1, refresh 5s", tc.alg, l)
				}
			}
		}
		for i := range got {
			if math.Abs(got[i]-tc.want[i]) > 0.005 {
				t.Errorf("%s: client %d gets %.4f, want %.2f (all: %.4f)", tc.alg, i, got[i], tc.want[i], got)
			}
		}
		if sum := got[0] + got[1] + got[2]; tc.alg != limiter.AlgorithmNone && sum > 120+1e-9 {
			t.Errorf("%s: Σ gets = %v > capacity 120", tc.alg, sum)
		}
	}
}

// shTestLockstep runs the model beside Redis on Redis' own clock (a lease's
// start is Expires − lease): every answer is the model's.
func shTestLockstep(t *testing.T, f stFactory) {
	s := stStore(t, f(t))
	rng := rand.New(rand.NewPCG(6, 1))
	for _, alg := range []limiter.Algorithm{limiter.AlgorithmFair, limiter.AlgorithmProportional, limiter.AlgorithmStatic, limiter.AlgorithmNone} {
		c := shConfig(100, alg)
		c.Lease = limiter.D(time.Hour)
		if alg == limiter.AlgorithmStatic {
			c.SafeCapacity = new(15.0)
		}
		name := "lock-" + string(alg)
		stPut(t, s, name, c)
		p, err := c.Share()
		if err != nil {
			t.Fatal(err)
		}
		var st limiter.ShareState
		has := map[string]float64{}
		for i := range 60 {
			id := fmt.Sprintf("c%d", rng.IntN(7))
			r := limitd.CapacityRequest{ClientID: id, Wants: float64(rng.IntN(80)), Priority: float64(rng.IntN(3))}
			r.Has = has[id]
			l, err := s.Capacity(t.Context(), name, r)
			if err != nil {
				t.Fatal(err)
			}
			now := l.Expires - p.Lease
			want := p.Request(&st, now, limiter.ShareRequest{Client: id, Wants: r.Wants, Weight: r.Priority}, r.Has)
			if l.Gets != want.Gets || l.Expires != want.Expires || l.Refresh != want.Refresh ||
				l.SafeCapacity != want.SafeCapacity || l.Learning != want.Learning {
				t.Fatalf("%s request %d (%+v): store %+v, model %+v", alg, i, r, l, want)
			}
			has[id] = l.Gets
		}
	}
}

// shTestNeverOvershoots: clients asking concurrently, with random wants, never
// hold more than the capacity together.
func shTestNeverOvershoots(t *testing.T, f stFactory) {
	s := stStore(t, f(t))
	for i, alg := range []limiter.Algorithm{limiter.AlgorithmFair, limiter.AlgorithmProportional, limiter.AlgorithmStatic} {
		name := "over-" + string(alg)
		c := shConfig(37.5, alg)
		stPut(t, s, name, c)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var worst float64
		errs := make(chan error, 8)
		for g := range 8 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(i), uint64(g)))
				var has float64
				for range 25 {
					id := fmt.Sprintf("g%d", g)
					l, err := s.Capacity(t.Context(), name, limitd.CapacityRequest{ClientID: id, Wants: rng.Float64() * 40, Has: has,
						Priority: float64(rng.IntN(3))})
					if err != nil {
						errs <- err
						return
					}
					has = l.Gets
					// The hash, read at any instant between two scripts, is a
					// consistent state.
					m, err := s.Client().HGetAll(context.Background(), s.clientsKey(name)).Result()
					if err != nil {
						errs <- err
						return
					}
					var sum float64
					for _, v := range m {
						h, _ := strconv.ParseFloat(strings.Fields(v)[1], 64)
						sum += h
					}
					mu.Lock()
					worst = max(worst, sum)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if worst > 37.5*(1+1e-12) {
			t.Errorf("%s: Σ has reached %v > capacity 37.5", alg, worst)
		}
		if sum := shSum(shHoldings(t, s, name), shRedisNowUS(t, s)); sum > 37.5*(1+1e-12) {
			t.Errorf("%s: Σ has = %v at the end", alg, sum)
		}
	}
}

// shTestLoweredCapacity: holdings survive a change of capacity (Σ may exceed
// the new capacity until the leases are refreshed, as the README's share limiter says), and every
// refresh brings Σ under it.
func shTestLoweredCapacity(t *testing.T, f stFactory) {
	s := stStore(t, f(t))
	ctx := t.Context()
	stPut(t, s, "low", shConfig(100, limiter.AlgorithmFair))
	a := shAsk(t, s, "low", "a", 60, 0)
	b := shAsk(t, s, "low", "b", 60, 0)
	if a.Gets != 60 || b.Gets != 40 {
		t.Fatalf("a, b get %v, %v; want 60, 40", a.Gets, b.Gets)
	}
	info, err := s.Patch(ctx, "low", func(c limiter.Config) (limiter.Config, error) { c.Capacity = new(50.0); return c, nil })
	if err != nil || info.Version != 2 {
		t.Fatalf("Patch = %+v, %v", info, err)
	}
	hs := shHoldings(t, s, "low")
	if len(hs) != 2 || hs["a"].has != 60 || hs["b"].has != 40 {
		t.Fatalf("holdings after lowering the capacity: %+v; want them kept", hs)
	}
	a = shAsk(t, s, "low", "a", 60, 60)
	if a.Gets != 10 || a.Version != 2 { // only 50 − 40 is unassigned
		t.Errorf("a refreshes to %+v; want 10 at version 2", a)
	}
	b = shAsk(t, s, "low", "b", 60, 40)
	a = shAsk(t, s, "low", "a", 60, 10)
	if sum := shSum(shHoldings(t, s, "low"), shRedisNowUS(t, s)); sum > 50 {
		t.Errorf("Σ has = %v after every client refreshed, want ≤ 50", sum)
	}
	if a.Gets != 25 || b.Gets != 25 {
		t.Errorf("a, b settle at %v, %v; want 25 each", a.Gets, b.Gets)
	}
	// A Put with the same config changes nothing, another capacity keeps the holdings.
	info, _, err = s.Put(ctx, "low", shConfig(50, limiter.AlgorithmFair))
	if err != nil || info.Version != 2 {
		t.Errorf("Put of the same config = %+v, %v; want version 2", info, err)
	}
	info, _, err = s.Put(ctx, "low", shConfig(200, limiter.AlgorithmFair))
	if err != nil || info.Version != 3 || len(shHoldings(t, s, "low")) != 2 {
		t.Errorf("Put of a new capacity = %+v, %v, holdings %v", info, err, shHoldings(t, s, "low"))
	}
	// Fair share of 200: b's claim of 60 first, a gets the other 140.
	if a := shAsk(t, s, "low", "a", 150, 25); a.Gets != 140 {
		t.Errorf("after raising the capacity a gets %v, want 140", a.Gets)
	}
}

func shTestReturn(t *testing.T, f stFactory) {
	s := stStore(t, f(t))
	ctx := t.Context()
	stPut(t, s, "ret", shConfig(10, limiter.AlgorithmFair))
	shAsk(t, s, "ret", "a", 10, 0)
	if g := shAsk(t, s, "ret", "b", 10, 0).Gets; g != 0 {
		t.Fatalf("b gets %v while a holds everything", g)
	}
	if err := s.ReturnCapacity(ctx, "ret", "a"); err != nil {
		t.Fatalf("ReturnCapacity: %v", err)
	}
	if _, ok := shHoldings(t, s, "ret")["a"]; ok {
		t.Error("a's lease is still stored after it was returned")
	}
	if l := shAsk(t, s, "ret", "b", 10, 0); l.Gets != 10 || l.SafeCapacity != 10 {
		t.Errorf("b after a left: %+v; want all 10, safe capacity 10 (one client)", l)
	}
	before := stSnapshot(t, s)
	stWantIs(t, "ReturnCapacity twice", s.ReturnCapacity(ctx, "ret", "a"), ErrNotFound)
	stWantIs(t, "ReturnCapacity of a stranger", s.ReturnCapacity(ctx, "ret", "nobody"), ErrNotFound)
	stWantIs(t, "ReturnCapacity on no limiter", s.ReturnCapacity(ctx, "none", "b"), ErrNotFound)
	stWantField(t, "ReturnCapacity bad id", s.ReturnCapacity(ctx, "ret", ""), "client_id")
	stWantField(t, "ReturnCapacity bad name", s.ReturnCapacity(ctx, "-x", "b"), "name")
	stSameSnapshot(t, "failed returns", before, stSnapshot(t, s))
}

// shTestConfig: Put, Patch, Get, List and Delete of share and concurrency
// limiters, kind changes in both directions, and the change events.
func shTestConfig(t *testing.T, f stFactory) {
	rdb := f(t)
	s := stStore(t, rdb)
	ctx := t.Context()
	sub := rdb.Subscribe(ctx, s.Channel())
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	msgs := sub.Channel()
	expect := func(after, want string) {
		t.Helper()
		select {
		case m := <-msgs:
			if m.Payload != want {
				t.Errorf("after %s: event %q, want %q", after, m.Payload, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("after %s: no event, want %q", after, want)
		}
	}
	sc := limiter.Config{Kind: limiter.KindShare, Capacity: new(120.0), Lease: limiter.D(10 * time.Second), SafeCapacity: new(10.0)}
	info, created, err := s.Put(ctx, "cap", sc)
	if err != nil || !created || info.Version != 1 || *info.Config.Capacity != 120 || info.Config.Algorithm != limiter.AlgorithmFair ||
		*info.Config.RefreshInterval != limiter.Duration(5*time.Second) || *info.Config.Learning != limiter.Duration(10*time.Second) {
		t.Fatalf("Put share = %+v, %v, %v", info, created, err)
	}
	expect("Put", "cap 1")
	if info, created, err := s.Put(ctx, "cap", sc); err != nil || created || info.Version != 1 {
		t.Errorf("Put again = %+v, %v, %v; want no change", info, created, err)
	}
	if got, err := s.Get(ctx, "cap"); err != nil || got.Version != 1 || got.Config.Kind != limiter.KindShare || *got.Config.SafeCapacity != 10 {
		t.Errorf("Get = %+v, %v", got, err)
	}
	if l := shAsk(t, s, "cap", "a", 500, 0); l.Gets != 120 || l.SafeCapacity != 10 || l.Refresh != 5e9 {
		t.Errorf("lease %+v", l)
	}
	info, err = s.Patch(ctx, "cap", func(c limiter.Config) (limiter.Config, error) {
		c.Algorithm = limiter.AlgorithmProportional
		return c, nil
	})
	if err != nil || info.Version != 2 || info.Config.Algorithm != limiter.AlgorithmProportional {
		t.Errorf("Patch = %+v, %v", info, err)
	}
	expect("Patch", "cap 2")
	_, err = s.Patch(ctx, "cap", func(limiter.Config) (limiter.Config, error) { return stSched(5, 1), nil })
	stWantIs(t, "Patch to another kind", err, ErrConflict)
	_, err = s.Patch(ctx, "cap", func(limiter.Config) (limiter.Config, error) {
		return limiter.Config{Kind: limiter.KindConcurrency, Limit: new(int64(3))}, nil
	})
	stWantIs(t, "Patch to concurrency", err, ErrConflict)
	if len(shHoldings(t, s, "cap")) != 1 {
		t.Error("a refused Patch touched the holdings")
	}

	// Share → schedule: fresh, and the client hash is gone.
	if info, created, err := s.Put(ctx, "cap", stSched(10, 1)); err != nil || created || info.Version != 3 {
		t.Fatalf("Put schedule over share = %+v, %v, %v", info, created, err)
	}
	expect("Put other kind", "cap 3")
	if n := s.Client().Exists(ctx, s.clientsKey("cap")).Val(); n != 0 {
		t.Error("the client hash outlived the share limiter")
	}
	if d := stAcquire(t, s, "cap", 1, limitd.Forever); !d.Granted || d.Version != 3 {
		t.Errorf("acquire on the new schedule: %+v", d)
	}
	// Schedule → concurrency → share: each fresh.
	cc := limiter.Config{Kind: limiter.KindConcurrency, Limit: new(int64(2))}
	if info, _, err := s.Put(ctx, "cap", cc); err != nil || info.Version != 4 || *info.Config.Lease != limiter.Duration(30*time.Second) {
		t.Fatalf("Put concurrency over schedule = %+v, %v", info, err)
	}
	expect("Put concurrency", "cap 4")
	if h, _ := s.Client().HGet(ctx, s.limiterKey("cap"), "st").Result(); h != "" {
		t.Error("the schedule's state outlived it")
	}
	if l, err := s.AcquireSlot(ctx, "cap"); err != nil || !l.Granted || l.Limit != 2 {
		t.Fatalf("AcquireSlot = %+v, %v", l, err)
	}
	if info, _, err := s.Put(ctx, "cap", sc); err != nil || info.Version != 5 {
		t.Fatalf("Put share over concurrency = %+v, %v", info, err)
	}
	expect("Put share", "cap 5")
	if n := s.Client().Exists(ctx, s.slotsKey("cap")).Val(); n != 0 {
		t.Error("the slots outlived the concurrency limiter")
	}
	if l := shAsk(t, s, "cap", "a", 500, 0); l.Gets != 120 || l.Version != 5 {
		t.Errorf("the new share limiter: %+v", l)
	}
	infos, _, err := s.List(ctx, "", 10)
	if err != nil || len(infos) != 1 || infos[0].Config.Kind != limiter.KindShare {
		t.Errorf("List = %+v, %v", infos, err)
	}

	// Delete removes every key.
	if _, _, err := s.Put(ctx, "slots", cc); err != nil {
		t.Fatal(err)
	}
	expect("Put slots", "slots 1")
	if _, err := s.AcquireSlot(ctx, "slots"); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"cap", "slots"} {
		if err := s.Delete(ctx, name); err != nil {
			t.Fatalf("Delete(%s): %v", name, err)
		}
		expect("Delete", name+" 0")
	}
	if ks := stKeys(t, s); len(ks) != 0 {
		t.Errorf("keys left after Delete: %v", ks)
	}
	_, err = s.Capacity(ctx, "cap", limitd.CapacityRequest{ClientID: "a"})
	stWantIs(t, "Capacity after Delete", err, ErrNotFound)
	_, err = s.AcquireSlot(ctx, "slots")
	stWantIs(t, "AcquireSlot after Delete", err, ErrNotFound)
}

// shTestLearning: Redis lost the state (FLUSHALL, as a restart without
// persistence) and the config is put back: clients that report holding
// capacity get it back for the learning period, new clients get 0, then the
// algorithm runs again.
func shTestLearning(t *testing.T, f stFactory) {
	s := stStore(t, f(t))
	ctx := t.Context()
	const learn = 600 * time.Millisecond
	c := shConfig(100, limiter.AlgorithmFair)
	c.Lease, c.RefreshInterval, c.Learning = limiter.D(time.Minute), limiter.D(time.Second), limiter.D(learn)
	stPut(t, s, "learn", c)
	a := shAsk(t, s, "learn", "a", 60, 0)
	b := shAsk(t, s, "learn", "b", 100, 0)
	if a.Learning || b.Learning || a.Gets != 60 || b.Gets != 40 {
		t.Fatalf("before the flush: %+v, %+v", a, b)
	}
	if err := stForEachNode(ctx, s.Client(), func(ctx context.Context, _ string, c redis.Cmdable) error {
		return c.FlushAll(ctx).Err()
	}); err != nil {
		t.Fatal(err)
	}
	if _, created, err := s.Put(ctx, "learn", c); err != nil || !created {
		t.Fatalf("re-Put = %v, %v", created, err)
	}
	start := time.Now()
	b = shAsk(t, s, "learn", "b", 100, 40)
	if !b.Learning || b.Gets != 40 {
		t.Fatalf("b reporting 40 after the flush: %+v; want learning, 40 back", b)
	}
	if n := shAsk(t, s, "learn", "new", 50, 0); !n.Learning || n.Gets != 0 {
		t.Errorf("a new client while learning: %+v; want learning, 0", n)
	}
	a = shAsk(t, s, "learn", "a", 60, 60)
	if !a.Learning || a.Gets != 60 {
		t.Errorf("a reporting 60 while learning: %+v; want its 60 back", a)
	}
	if x := shAsk(t, s, "learn", "x", 50, 30); !x.Learning || x.Gets != 0 {
		t.Errorf("a client reporting 30 when nothing is unassigned: %+v; want 0", x)
	}
	if sum := shSum(shHoldings(t, s, "learn"), shRedisNowUS(t, s)); sum > 100 {
		t.Errorf("Σ has = %v while learning", sum)
	}
	time.Sleep(learn - time.Since(start) + 20*time.Millisecond)
	a = shAsk(t, s, "learn", "a", 60, 60)
	if a.Learning {
		t.Errorf("still learning after the learning period: %+v", a)
	}
	// Fair share of 100 among a (60), b (100), new (50) and x (50), within
	// what the others hold (b 40, new 0, x 0): a keeps at most 60.
	if a.Gets != 25 {
		t.Errorf("a after learning gets %v, want its fair 25", a.Gets)
	}
	// Learning mode starts only within the learning period of a fresh state.
	if l := shAsk(t, s, "learn", "late", 10, 10); l.Learning {
		t.Errorf("a stranger reporting capacity after the period starts learning mode: %+v", l)
	}
}

// shTestExpiry: an expired lease is free capacity and its entry is removed on
// the next call; the client hash carries a TTL.
func shTestExpiry(t *testing.T, f stFactory) {
	s := stStore(t, f(t))
	ctx := t.Context()
	c := shConfig(10, limiter.AlgorithmFair)
	c.Lease, c.Learning = limiter.D(300*time.Millisecond), limiter.D(0)
	stPut(t, s, "exp", c)
	a := shAsk(t, s, "exp", "a", 10, 0)
	if a.Gets != 10 {
		t.Fatalf("a gets %v", a.Gets)
	}
	if ttl := s.Client().PTTL(ctx, s.clientsKey("exp")).Val(); ttl <= 0 || ttl > 302*time.Millisecond {
		t.Errorf("client hash TTL %v, want about the lease (300ms)", ttl)
	}
	if g := shAsk(t, s, "exp", "b", 10, 0).Gets; g != 0 {
		t.Fatalf("b gets %v while a's lease runs", g)
	}
	for time.Now().UnixNano() < a.Expires+5e6 {
		time.Sleep(10 * time.Millisecond)
	}
	b := shAsk(t, s, "exp", "b", 10, 0)
	if b.Gets != 10 {
		t.Errorf("b gets %v after a's lease expired, want 10", b.Gets)
	}
	hs := shHoldings(t, s, "exp")
	if _, ok := hs["a"]; ok || len(hs) != 1 {
		t.Errorf("holdings after a's lease expired: %+v; want only b", hs)
	}
	stWantIs(t, "ReturnCapacity of an expired lease", s.ReturnCapacity(ctx, "exp", "a"), ErrNotFound)
}

func shTestBadInput(t *testing.T, f stFactory) {
	s := stStore(t, f(t))
	ctx := t.Context()
	stPut(t, s, "ok", shConfig(10, limiter.AlgorithmFair))
	shAsk(t, s, "ok", "a", 5, 0)
	before := stSnapshot(t, s)
	nan, inf := math.NaN(), math.Inf(1)
	for _, tc := range []struct {
		r     limitd.CapacityRequest
		field string
	}{
		{limitd.CapacityRequest{ClientID: "", Wants: 1}, "client_id"},
		{limitd.CapacityRequest{ClientID: strings.Repeat("c", 200), Wants: 1}, "client_id"},
		{limitd.CapacityRequest{ClientID: strings.Repeat("c", 129), Wants: 1}, "client_id"},
		{limitd.CapacityRequest{ClientID: "-x", Wants: 1}, "client_id"},
		{limitd.CapacityRequest{ClientID: "a b", Wants: 1}, "client_id"},
		{limitd.CapacityRequest{ClientID: "a{b}", Wants: 1}, "client_id"},
		{limitd.CapacityRequest{ClientID: "a", Wants: -1}, "wants"},
		{limitd.CapacityRequest{ClientID: "a", Wants: nan}, "wants"},
		{limitd.CapacityRequest{ClientID: "a", Wants: inf}, "wants"},
		{limitd.CapacityRequest{ClientID: "a", Wants: -inf}, "wants"},
		{limitd.CapacityRequest{ClientID: "a", Wants: 1, Has: -0.5}, "has"},
		{limitd.CapacityRequest{ClientID: "a", Wants: 1, Has: nan}, "has"},
		{limitd.CapacityRequest{ClientID: "a", Wants: 1, Has: inf}, "has"},
		{limitd.CapacityRequest{ClientID: "a", Wants: 1, Priority: -1}, "priority"},
		{limitd.CapacityRequest{ClientID: "a", Wants: 1, Priority: nan}, "priority"},
		{limitd.CapacityRequest{ClientID: "a", Wants: 1, Priority: inf}, "priority"},
		{limitd.CapacityRequest{ClientID: "a", Wants: 1, Priority: 2e6}, "priority"},
	} {
		for _, name := range []string{"ok", "absent"} {
			_, err := s.Capacity(ctx, name, tc.r)
			stWantField(t, fmt.Sprintf("Capacity(%s, %+v)", name, tc.r), err, tc.field)
		}
	}
	_, err := s.Capacity(ctx, "a b", limitd.CapacityRequest{ClientID: "a"})
	stWantField(t, "Capacity bad name", err, "name")
	_, err = s.Capacity(ctx, "absent", limitd.CapacityRequest{ClientID: "a", Wants: 1})
	stWantIs(t, "Capacity on no limiter", err, ErrNotFound)
	for _, c := range []struct {
		cfg   limiter.Config
		field string
	}{
		{limiter.Config{Kind: limiter.KindShare}, "capacity"},
		{shConfig(-1, ""), "capacity"},
		{shConfig(nan, ""), "capacity"},
		{shConfig(inf, ""), "capacity"},
		{shConfig(0, ""), "capacity"},
		{shConfig(10, "fairest"), "algorithm"},
		{limiter.Config{Kind: limiter.KindShare, Capacity: new(10.0), SafeCapacity: new(11.0)}, "safe_capacity"},
		{limiter.Config{Kind: limiter.KindShare, Capacity: new(10.0), Lease: limiter.D(time.Second), RefreshInterval: limiter.D(2 * time.Second)}, "refresh_interval"},
		{limiter.Config{Kind: limiter.KindShare, Capacity: new(10.0), Rate: 5}, "rate"},
		{limiter.Config{Kind: limiter.KindShare, Capacity: new(10.0), Limit: new(int64(2))}, "limit"},
		{limiter.Config{Kind: limiter.KindConcurrency}, "limit"},
		{limiter.Config{Kind: limiter.KindConcurrency, Limit: new(int64(0))}, "limit"},
		{limiter.Config{Kind: limiter.KindConcurrency, Limit: new(int64(2)), Lease: limiter.D(-time.Second)}, "lease"},
		{limiter.Config{Kind: limiter.KindConcurrency, Limit: new(int64(2)), Capacity: new(1.0)}, "capacity"},
	} {
		what := fmt.Sprintf("Put %s", diffShJSON(c.cfg))
		_, _, err := s.Put(ctx, "ok", c.cfg)
		stWantField(t, what, err, c.field)
		_, _, err = s.Put(ctx, "new-one", c.cfg)
		stWantField(t, what+" (new)", err, c.field)
		_, err = s.Patch(ctx, "ok", func(limiter.Config) (limiter.Config, error) { return c.cfg, nil })
		stWantField(t, "Patch "+what, err, c.field)
	}
	// Templates make rate limiters only.
	for _, c := range []limiter.Config{shConfig(10, ""), {Kind: limiter.KindConcurrency, Limit: new(int64(2))}} {
		_, err := s.PutTemplate(ctx, limitd.Template{ID: "t", Pattern: "t:*", Limiter: c})
		stWantField(t, "PutTemplate "+diffShJSON(c), err, "limiter.kind")
	}
	stSameSnapshot(t, "bad input", before, stSnapshot(t, s))
	if l := shAsk(t, s, "ok", "a", 5, 5); l.Gets != 5 || l.Version != 1 {
		t.Errorf("after bad input: %+v", l)
	}
}

func diffShJSON(c limiter.Config) string {
	var b strings.Builder
	fmt.Fprintf(&b, "{kind %s", c.Kind)
	if c.Capacity != nil {
		fmt.Fprintf(&b, " capacity %v", *c.Capacity)
	}
	if c.Limit != nil {
		fmt.Fprintf(&b, " limit %v", *c.Limit)
	}
	b.WriteString(" …}")
	return b.String()
}

// shTestWrongKind: each kind takes only its own calls; a call of another kind
// is ErrConflict naming the limiter's kind, and writes nothing.
func shTestWrongKind(t *testing.T, f stFactory) {
	s := stStore(t, f(t))
	ctx := t.Context()
	stPut(t, s, "sh", shConfig(10, limiter.AlgorithmFair))
	stPut(t, s, "cc", limiter.Config{Kind: limiter.KindConcurrency, Limit: new(int64(1))})
	stPut(t, s, "sched", stSched(10, 1))
	stPut(t, s, "smooth", stSmooth(10, 1))
	// Templates that match every name: a named limiter still wins.
	if _, err := s.PutTemplate(ctx, limitd.Template{ID: "all", Pattern: "*", Limiter: stSched(1, 1)}); err != nil {
		t.Fatal(err)
	}
	shAsk(t, s, "sh", "a", 3, 0)
	if _, err := s.AcquireSlot(ctx, "cc"); err != nil {
		t.Fatal(err)
	}
	stAcquire(t, s, "sched", 1, limitd.Forever)
	before := stSnapshot(t, s)
	conflict := func(what string, err error, kind limiter.Kind) {
		t.Helper()
		stWantIs(t, what, err, ErrConflict)
		if err != nil && !strings.Contains(err.Error(), "kind "+string(kind)) {
			t.Errorf("%s: %q does not name the kind %s", what, err, kind)
		}
	}
	for _, name := range []string{"sh", "cc"} {
		kind := limiter.KindShare
		if name == "cc" {
			kind = limiter.KindConcurrency
		}
		_, err := s.Acquire(ctx, name, 1, limitd.Forever)
		conflict("Acquire "+name, err, kind)
		_, err = s.Grant(ctx, name, 5, time.Second)
		conflict("Grant "+name, err, kind)
		_, err = s.Wait(ctx, name)
		conflict("Wait "+name, err, kind)
		_, err = s.Reset(ctx, name)
		conflict("Reset "+name, err, kind)
		// Between two rate limiters' answers in one call, each read in turn
		// (too many permits: answered, nothing written).
		outs := s.AcquireMany(ctx, []Request{{Name: "sched", Permits: 1e15}, {Name: name, Permits: 1},
			{Name: "sched", Permits: 0}, {Name: "smooth", Permits: 1e15}})
		conflict("AcquireMany "+name, outs[1].Err, kind)
		stWantField(t, "AcquireMany sched beside "+name, outs[0].Err, "permits")
		stWantField(t, "AcquireMany smooth beside "+name, outs[3].Err, "permits")
	}
	_, err := s.Capacity(ctx, "cc", limitd.CapacityRequest{ClientID: "a", Wants: 1})
	conflict("Capacity on concurrency", err, limiter.KindConcurrency)
	conflict("ReturnCapacity on concurrency", s.ReturnCapacity(ctx, "cc", "a"), limiter.KindConcurrency)
	_, err = s.AcquireSlot(ctx, "sh")
	conflict("AcquireSlot on share", err, limiter.KindShare)
	id := strings.Repeat("ab", 16)
	_, err = s.RenewSlot(ctx, "sh", id)
	conflict("RenewSlot on share", err, limiter.KindShare)
	conflict("ReleaseSlot on share", s.ReleaseSlot(ctx, "sh", id), limiter.KindShare)
	for _, name := range []string{"sched", "smooth"} {
		kind := limiter.Kind(name)
		if name == "sched" {
			kind = limiter.KindSchedule
		}
		_, err = s.Capacity(ctx, name, limitd.CapacityRequest{ClientID: "a", Wants: 1})
		conflict("Capacity on "+name, err, kind)
		_, err = s.AcquireSlot(ctx, name)
		conflict("AcquireSlot on "+name, err, kind)
		_, err = s.RenewSlot(ctx, name, id)
		conflict("RenewSlot on "+name, err, kind)
	}
	// A name that is no limiter but matches a template has no capacity or
	// slots (templates make rate limiters).
	_, err = s.Capacity(ctx, "user:1", limitd.CapacityRequest{ClientID: "a", Wants: 1})
	stWantIs(t, "Capacity on a template's name", err, ErrNotFound)
	_, err = s.AcquireSlot(ctx, "user:1")
	stWantIs(t, "AcquireSlot on a template's name", err, ErrNotFound)
	stSameSnapshot(t, "calls of the wrong kind", before, stSnapshot(t, s))
	// The rate limiters work as before; a not-started one too.
	if w := stWait(t, s, "sched"); w.Permits != 1 {
		t.Errorf("Wait(sched) = %+v", w)
	}
	stPut(t, s, "fresh", stSched(10, 1))
	if w := stWait(t, s, "fresh"); w.Started {
		t.Errorf("Wait(fresh) = %+v", w)
	}
	if _, err := s.Reset(ctx, "fresh"); err != nil {
		t.Errorf("Reset(fresh) = %v", err)
	}
}

// ---- differential test against the model, on a simulated clock ----

// TestShareDifferential drives random request sequences through the store
// (miniredis, clock set with SetTime) and limiter.ShareParams.Request side by
// side: every lease, and every stored holding after every call, must be the
// model's, bit for bit (both add over clients in id order).
func TestShareDifferential(t *testing.T) {
	seeds := 24
	if testing.Short() {
		seeds = 8
	}
	for seed := range seeds {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { shDiffRun(t, uint64(seed)) })
	}
}

// shDiffIDs are client ids whose byte order differs from any locale's
// collation order (case, punctuation), to catch a script sorting with strcoll.
var shDiffIDs = []string{"a", "B", "b.2", "b-1", "Z", "z:x", "0", "a_b", "A", "b"}

func shDiffConfig(rng *rand.Rand) limiter.Config {
	algs := []limiter.Algorithm{limiter.AlgorithmFair, limiter.AlgorithmProportional, limiter.AlgorithmStatic, limiter.AlgorithmNone}
	capacity := []float64{120, 1, 37.5, 1000 * rng.Float64(), 1e-3 + rng.Float64(), 1e12}[rng.IntN(6)]
	lease := time.Duration(1+rng.IntN(5000))*time.Millisecond + time.Duration(rng.IntN(1000)) // ns too
	c := limiter.Config{Kind: limiter.KindShare, Capacity: &capacity, Algorithm: algs[rng.IntN(len(algs))],
		Lease: limiter.D(lease), RefreshInterval: limiter.D(lease / 2)}
	switch rng.IntN(4) {
	case 0:
		c.Learning = limiter.D(0)
	case 1:
		c.Learning = limiter.D(lease*2 + time.Duration(rng.IntN(999)))
	case 2:
		c.Learning = limiter.D(time.Duration(rng.Int64N(int64(lease))))
	}
	if rng.IntN(3) == 0 {
		c.SafeCapacity = new(capacity * rng.Float64())
	}
	return c
}

func shDiffRun(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x5ea4e))
	m, rdb := redistest.Mini(t)
	s := stStore(t, rdb)
	ctx := t.Context()

	// A random start: now, or up to the year 2250.
	us := time.Now().UnixMicro()
	if rng.IntN(2) == 0 {
		us = time.Date(2030+rng.IntN(220), 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro() + rng.Int64N(1e12)
	}
	m.SetTime(time.UnixMicro(us))
	c := shDiffConfig(rng)
	info := stPut(t, s, "d", c)
	p, err := c.Share()
	if err != nil {
		t.Fatal(err)
	}
	var st limiter.ShareState
	has := map[string]float64{}
	reconfigured := false
	var log []string
	fail := func(format string, args ...any) {
		t.Helper()
		tail := log[max(0, len(log)-15):]
		t.Fatalf("seed %d, config %+v:\n  %s\n%s", seed, p, strings.Join(tail, "\n  "), fmt.Sprintf(format, args...))
	}

	for step := range 400 {
		// Time moves by µs, ms, or past whole leases.
		switch rng.IntN(10) {
		case 0:
			us += p.Lease/1000 + rng.Int64N(3)
		case 1, 2:
			us += rng.Int64N(p.Lease/1000 + 1)
		case 3:
			// stay
		default:
			us += rng.Int64N(p.Lease/1000/20 + 1)
		}
		m.SetTime(time.UnixMicro(us))
		now := us * 1000
		id := shDiffIDs[rng.IntN(len(shDiffIDs))]

		switch op := rng.IntN(40); {
		case op == 0: // reconfigure in place
			c = shDiffConfig(rng)
			if info, err = s.Patch(ctx, "d", func(limiter.Config) (limiter.Config, error) { return c, nil }); err != nil {
				fail("Patch: %v", err)
			}
			p, _ = c.Share()
			reconfigured = true
			log = append(log, fmt.Sprintf("%d: patch %+v", step, p))
		case op == 1: // the state is lost and the config put back
			if err := rdb.FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			info = stPut(t, s, "d", c)
			st = limiter.ShareState{}
			reconfigured = false
			log = append(log, fmt.Sprintf("%d: flush", step))
		case op <= 4: // a client leaves
			err := s.ReturnCapacity(ctx, "d", id)
			// The script drops expired leases on every call; so does the
			// model's next Request, before anything reads them.
			for k, h := range st.Holdings {
				if h.Expires <= now {
					delete(st.Holdings, k)
				}
			}
			held := st.Return(id)
			log = append(log, fmt.Sprintf("%d: t=%d return %s: %v (model %v)", step, us, id, err, held))
			if held != (err == nil) || !held && !errors.Is(err, ErrNotFound) {
				fail("ReturnCapacity(%s) = %v, model held %v", id, err, held)
			}
		default:
			r := limitd.CapacityRequest{ClientID: id, Has: has[id]}
			switch rng.IntN(4) {
			case 0:
				r.Wants = float64(rng.IntN(200))
			case 1:
				r.Wants = rng.Float64() * *c.Capacity
			case 2:
				r.Wants = rng.Float64() * 3 * *c.Capacity
			}
			if rng.IntN(8) == 0 { // a client that remembers more than it was given
				r.Has = rng.Float64() * *c.Capacity
			}
			r.Priority = []float64{0, 0, 0, 1, 0.5, 2, 3.7}[rng.IntN(7)]
			l, err := s.Capacity(ctx, "d", r)
			if err != nil {
				fail("Capacity(%+v): %v", r, err)
			}
			want := p.Request(&st, now, limiter.ShareRequest{Client: id, Wants: r.Wants, Weight: r.Priority}, r.Has)
			log = append(log, fmt.Sprintf("%d: t=%d %s wants %v has %v prio %v → %v (model %v) learning %v",
				step, us, id, r.Wants, r.Has, r.Priority, l.Gets, want.Gets, l.Learning))
			if l.Gets != want.Gets || l.SafeCapacity != want.SafeCapacity ||
				l.Expires != want.Expires || l.Refresh != want.Refresh || l.Learning != want.Learning || l.Version != info.Version {
				fail("lease %+v, model %+v (version %d)", l, want, info.Version)
			}
			has[id] = l.Gets
		}
		// The stored holdings are the model's.
		got := shHoldings(t, s, "d")
		if len(got) != len(st.Holdings) {
			fail("%d holdings stored, model has %d: %+v vs %+v", len(got), len(st.Holdings), got, st.Holdings)
		}
		for k, h := range st.Holdings {
			g, ok := got[k]
			if !ok || g.wants != h.Wants || g.has != h.Has || g.weight != h.Weight || g.expUS != (h.Expires+999)/1000 {
				fail("holding of %s: stored %+v, model %+v", k, g, h)
			}
		}
		// Σ has ≤ capacity, unless a reconfiguration (a lower capacity,
		// leases of algorithm none) left more held than the capacity: that
		// lasts until the leases are refreshed or expire.
		if sum := shSum(got, us); sum > p.Capacity*(1+1e-12) && !reconfigured && p.Algorithm != limiter.AlgorithmNone {
			fail("Σ has = %v > capacity %v", sum, p.Capacity)
		}
	}
}
