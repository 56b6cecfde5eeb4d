package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/internal/testkit/faultproxy"
	"github.com/limitd/limitd/internal/testkit/redistest"
	"github.com/limitd/limitd/limiter"
)

// The functional suite of the store runs, unchanged, on three backends:
// miniredis (TestStoreMiniredis), a real redis-server (TestStoreRedis) and a
// three-master Redis Cluster (TestStoreCluster, cluster_test.go). Each subtest
// gets its own key prefix, so the subtests of one backend share one server
// without seeing each other's keys.

// stFactory returns a new client on a backend, closed when t ends.
type stFactory func(t *testing.T) redis.UniversalClient

func stMiniredisFactory(t *testing.T) stFactory {
	m := miniredis.RunT(t)
	return func(t *testing.T) redis.UniversalClient {
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
}

func stServerFactory(t *testing.T) stFactory {
	srv := redistest.Server(t)
	return func(t *testing.T) redis.UniversalClient {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
}

func TestStoreMiniredis(t *testing.T) { stSuite(t, stMiniredisFactory(t)) }
func TestStoreRedis(t *testing.T)     { stSuite(t, stServerFactory(t)) }

func stSuite(t *testing.T, f stFactory) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, stFactory)
	}{
		{"PutCreateAndIdentical", stTestPutCreate},
		{"PutReconfigureKeepsState", stTestPutReconfigure},
		{"PutOtherKindIsFresh", stTestPutOtherKind},
		{"PutRestartVerb", stTestPutRestart},
		{"PutConcurrentSame", stTestPutConcurrent},
		{"Patch", stTestPatch},
		{"PatchConcurrent", stTestPatchConcurrent},
		{"Get", stTestGet},
		{"Delete", stTestDelete},
		{"List", stTestList},
		{"AcquireDelays", stTestAcquireDelays},
		{"WaitAndReset", stTestWaitReset},
		{"GrantRelease", stTestGrantRelease},
		{"TemplatesCRUD", stTestTemplatesCRUD},
		{"TemplateResolution", stTestTemplateResolution},
		{"TemplateNewVersionKeepsState", stTestTemplateNewVersion},
		{"BadInputWritesNothing", stTestBadInput},
		{"ChangeEvents", stTestChangeEvents},
		{"AcquireManyInOrder", stTestAcquireMany},
		{"Batching", stTestBatching},
		{"Inspect", stTestInspect},
		{"WaitMany", stTestWaitMany},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, f) })
	}
}

// ---- helpers ----

var stPrefixSeq atomic.Int64

// stStore returns a store over rdb with a key prefix of its own.
func stStore(t *testing.T, rdb redis.UniversalClient, opts ...Option) *Store {
	t.Helper()
	p := fmt.Sprintf("st%d", stPrefixSeq.Add(1))
	s := New(rdb, append([]Option{WithPrefix(p)}, opts...)...)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func stSched(rate, burst float64) limiter.Config {
	return limiter.Config{Kind: limiter.KindSchedule, Rate: rate, Burst: limiter.B(burst)}
}

func stSmooth(rate, burstSeconds float64) limiter.Config {
	return limiter.Config{Kind: limiter.KindSmooth, Rate: rate, MaxBurstSeconds: &burstSeconds}
}

func stPut(t *testing.T, s *Store, name string, c limiter.Config) limitd.Info {
	t.Helper()
	info, _, err := s.Put(t.Context(), name, c)
	if err != nil {
		t.Fatalf("Put(%s): %v", name, err)
	}
	return info
}

func stAcquire(t *testing.T, s *Store, name string, n int64, maxWait time.Duration) limitd.Decision {
	t.Helper()
	d, err := s.Acquire(t.Context(), name, n, maxWait)
	if err != nil {
		t.Fatalf("Acquire(%s, %d): %v", name, n, err)
	}
	return d
}

func stWait(t *testing.T, s *Store, name string) limitd.WaitInfo {
	t.Helper()
	w, err := s.Wait(t.Context(), name)
	if err != nil {
		t.Fatalf("Wait(%s): %v", name, err)
	}
	return w
}

// stWantField fails unless err is ErrInvalid with a *limiter.FieldError
// naming field.
func stWantField(t *testing.T, what string, err error, field string) {
	t.Helper()
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("%s: err = %v, want ErrInvalid", what, err)
		return
	}
	var fe *limiter.FieldError
	if !errors.As(err, &fe) {
		t.Errorf("%s: err = %v, want a *limiter.FieldError", what, err)
		return
	}
	if fe.Field != field {
		t.Errorf("%s: FieldError names %q, want %q (%v)", what, fe.Field, field, err)
	}
}

func stWantIs(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s: err = %v, want %v", what, err, target)
	}
}

// stForEachNode runs fn on every node: each master of a cluster, or the one
// server.
func stForEachNode(ctx context.Context, rdb redis.UniversalClient, fn func(ctx context.Context, addr string, c redis.Cmdable) error) error {
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			return fn(ctx, c.Options().Addr, c)
		})
	}
	return fn(ctx, "single", rdb)
}

// stKeysByNode returns the store's keys on every node, found with SCAN.
func stKeysByNode(t *testing.T, s *Store) map[string][]string {
	t.Helper()
	var mu sync.Mutex
	out := map[string][]string{}
	err := stForEachNode(t.Context(), s.Client(), func(ctx context.Context, addr string, c redis.Cmdable) error {
		var keys []string
		iter := c.Scan(ctx, 0, s.Prefix()+":*", 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil {
			return err
		}
		slices.Sort(keys)
		keys = slices.Compact(keys)
		mu.Lock()
		out[addr] = keys
		mu.Unlock()
		return nil
	})
	if err != nil {
		t.Fatalf("scanning keys: %v", err)
	}
	return out
}

func stKeys(t *testing.T, s *Store) []string {
	t.Helper()
	var all []string
	for _, ks := range stKeysByNode(t, s) {
		all = append(all, ks...)
	}
	slices.Sort(all)
	return all
}

// stSnapshot is every key of the store with its type, content and whether it
// has a TTL, on every node: what "nothing was written" is checked against.
func stSnapshot(t *testing.T, s *Store) map[string]string {
	t.Helper()
	var mu sync.Mutex
	snap := map[string]string{}
	err := stForEachNode(t.Context(), s.Client(), func(ctx context.Context, _ string, c redis.Cmdable) error {
		keys, err := c.Keys(ctx, s.Prefix()+":*").Result()
		if err != nil {
			return err
		}
		for _, k := range keys {
			typ, err := c.Type(ctx, k).Result()
			if err != nil {
				return err
			}
			var val string
			switch typ {
			case "hash":
				m, err := c.HGetAll(ctx, k).Result()
				if err != nil {
					return err
				}
				kv := make([]string, 0, len(m))
				for f, v := range m {
					kv = append(kv, f+"="+v)
				}
				slices.Sort(kv)
				val = strings.Join(kv, ";")
			case "zset":
				zs, err := c.ZRangeWithScores(ctx, k, 0, -1).Result()
				if err != nil {
					return err
				}
				val = fmt.Sprint(zs)
			case "string":
				val, err = c.Get(ctx, k).Result()
				if err != nil {
					return err
				}
			}
			ttl, err := c.PTTL(ctx, k).Result()
			if err != nil {
				return err
			}
			mu.Lock()
			snap[k] = fmt.Sprintf("%s %s ttl=%v", typ, val, ttl > 0)
			mu.Unlock()
		}
		return nil
	})
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	return snap
}

func stSameSnapshot(t *testing.T, what string, before, after map[string]string) {
	t.Helper()
	for k, v := range after {
		if w, ok := before[k]; !ok {
			t.Errorf("%s wrote a new key %s = %s", what, k, v)
		} else if w != v {
			t.Errorf("%s changed %s:\n before %s\n after  %s", what, k, w, v)
		}
	}
	for k := range before {
		if _, ok := after[k]; !ok {
			t.Errorf("%s deleted key %s", what, k)
		}
	}
}

// ---- limiters ----

func stTestPutCreate(t *testing.T, f stFactory) {
	s := stStore(t, f(t))
	ctx := t.Context()
	info, created, err := s.Put(ctx, "orders", stSched(100, 1))
	if err != nil || !created || info.Version != 1 || info.Name != "orders" {
		t.Fatalf("Put new = %+v, created %v, %v; want version 1, created", info, created, err)
	}
	if info.Config.Kind != limiter.KindSchedule || info.Config.Rate != 100 || float64(*info.Config.Burst) != 1 {
		t.Errorf("Put returned config %+v, want the canonical schedule 100/s burst 1", info.Config)
	}
	stAcquire(t, s, "orders", 3, limitd.Forever)
	before := stWait(t, s, "orders")
	// The same config again, also spelled as a rate spec: nothing changes.
	for _, c := range []limiter.Config{stSched(100, 1), {Spec: "100,1"}, {Spec: "100/s;1"}} {
		info, created, err = s.Put(ctx, "orders", c)
		if err != nil || created || info.Version != 1 {
			t.Errorf("Put identical %+v = version %d, created %v, %v; want version 1, not created", c, info.Version, created, err)
		}
	}
	after := stWait(t, s, "orders")
	if after.Allocated != before.Allocated || after.Permits != 3 || after.Version != 1 {
		t.Errorf("identical Put touched the state: before %+v after %+v", before, after)
	}
	got, err := s.Get(ctx, "orders")
	if err != nil || got.Version != 1 || got.Config.Rate != 100 {
		t.Errorf("Get = %+v, %v", got, err)
	}
	// The default burst (1.1) is a different config.
	info, created, err = s.Put(ctx, "orders", limiter.Config{Rate: 100})
	if err != nil || created || info.Version != 2 || float64(*info.Config.Burst) != limiter.DefaultBurst {
		t.Errorf("Put default burst = %+v, created %v, %v; want version 2", info, created, err)
	}
	// A name of 128 characters is the longest allowed.
	long := "a" + strings.Repeat("b", 127)
	if _, created, err := s.Put(ctx, long, stSched(1, 1)); err != nil || !created {
		t.Errorf("Put 128-char name: created %v, %v", created, err)
	}
}

func stTestPutReconfigure(t *testing.T, f stFactory) {
	s := stStore(t, f(t))
	ctx := t.Context()
	stPut(t, s, "sched", stSched(10, 1)) // slice 100 ms
	d0 := stAcquire(t, s, "sched", 5, limitd.Forever)
	info, created, err := s.Put(ctx, "sched", stSched(20, 1)) // slice 50 ms
	if err != nil || created || info.Version != 2 {
		t.Fatalf("Put reconfigure = %+v, created %v, %v; want version 2", info, created, err)
	}
	w := stWait(t, s, "sched")
	if w.Version != 2 || w.Allocated != 500e6 || w.Permits != 5 || !w.Started {
		t.Errorf("after reconfigure Wait = %+v, want version 2, allocated 500ms, 5 permits", w)
	}
	// The schedule pointer carried over: the next permit is due where the
	// old rate left it, the one after that one new slice later.
	d1 := stAcquire(t, s, "sched", 1, limitd.Forever)
	d2 := stAcquire(t, s, "sched", 1, limitd.Forever)
	if d1.Scheduled != d0.Scheduled+500e6 || d2.Scheduled != d1.Scheduled+50e6 || d1.Version != 2 {
		t.Errorf("scheduled %d, %d after %d (version %d); want +500ms then +50ms", d1.Scheduled-d0.Scheduled, d2.Scheduled-d1.Scheduled, d0.Scheduled, d1.Version)
	}

	// A backlog carries over as well.
	stPut(t, s, "late", stSched(100, 1))
	stAcquire(t, s, "late", 1, limitd.Forever)
	time.Sleep(40 * time.Millisecond)
	w0 := stWait(t, s, "late")
	stPut(t, s, "late", stSched(200, 1))
	if w1 := stWait(t, s, "late"); w0.Wait <= 0 || w1.Wait < w0.Wait || w1.Version != 2 {
		t.Errorf("backlog %v before reconfigure, %v after; want it kept", time.Duration(w0.Wait), time.Duration(w1.Wait))
	}

	// A smooth limiter keeps its schedule too (next_free survives).
	stPut(t, s, "smooth", stSmooth(10, 0))
	e0 := stAcquire(t, s, "smooth", 3, limitd.Forever)
	if info := stPut(t, s, "smooth", stSmooth(5, 0)); info.Version != 2 {
		t.Errorf("smooth reconfigure: version %d, want 2", info.Version)
	}
	e1 := stAcquire(t, s, "smooth", 1, limitd.Forever)
	e2 := stAcquire(t, s, "smooth", 1, limitd.Forever)
	if e1.Scheduled != e0.Scheduled+300e6 || e2.Scheduled != e1.Scheduled+200e6 {
		t.Errorf("smooth: scheduled +%d, +%d; want +300ms, +200ms", e1.Scheduled-e0.Scheduled, e2.Scheduled-e1.Scheduled)
	}
}

func stTestPutOtherKind(t *testing.T, f stFactory) {
	s := stStore(t, f(t))
	ctx := t.Context()
	stPut(t, s, "k", stSched(10, 1))
	d0 := stAcquire(t, s, "k", 7, limitd.Forever)
	time.Sleep(20 * time.Millisecond) // some backlog and idle time on the old limiter
	stPut(t, s, "k", limiter.Config{Rate: 10, Burst: limiter.B(1), MaxBacklog: limiter.D(0)})
	if w := stWait(t, s, "k"); w.Permits != 7 || w.Allocated != 700e6 {
		t.Fatalf("old limiter: %+v", w)
	}
	info, created, err := s.Put(ctx, "k", stSmooth(5, 0))
	if err != nil || created || info.Version != 3 || info.Config.Kind != limiter.KindSmooth {
		t.Fatalf("Put other kind = %+v, created %v, %v; want smooth version 3", info, created, err)
	}
	w := stWait(t, s, "k")
	// (A smooth limiter runs from its creation: time since then is stored
	// or idle, but nothing of the old limiter is left.)
	if w.Permits != 0 || w.Allocated != 0 || w.Lateness != 0 || w.Idle > w.Now-d0.Now || w.Version != 3 {
		t.Errorf("a new kind must start fresh: %+v", w)
	}
	if d := stAcquire(t, s, "k", 1, limitd.Forever); d.Delay != 0 || d.Start != d.Now {
		t.Errorf("first acquire on the fresh limiter waits %d", d.Delay)
	}
	if got, err := s.Get(ctx, "k"); err != nil || got.Config.Kind != limiter.KindSmooth || got.Version != 3 {
		t.Errorf("Get = %+v, %v", got, err)
	}
}

func stTestPutRestart(t *testing.T, f stFactory) {
	s := stStore(t, f(t))
	ctx := t.Context()
	stPut(t, s, "r", limiter.Config{Spec: "100,1"}) // slice 10 ms
	d0 := stAcquire(t, s, "r", 1, limitd.Forever)
	time.Sleep(60 * time.Millisecond)
	w0 := stWait(t, s, "r")
	if w0.Wait <= 0 {
		t.Fatalf("no backlog after 60ms idle: %+v", w0)
	}
	// The same config with the verb restart: a new schedule, a new version.
	info, created, err := s.Put(ctx, "r", limiter.Config{Spec: "100,1,restart"})
	if err != nil || created || info.Version != 2 {
		t.Fatalf("Put restart = %+v, created %v, %v; want version 2", info, created, err)
	}
	d1 := stAcquire(t, s, "r", 1, limitd.Forever)
	// Without the restart the permit would be due at d0+10ms, long before w0.
	if d1.Scheduled < w0.Now || d1.Scheduled == d0.Scheduled+10e6 {
		t.Errorf("after restart the permit is due %dns after the first, before the restart (backlog kept)", d1.Scheduled-d0.Scheduled)
	}
	w1 := stWait(t, s, "r")
	if w1.Idle < w0.Wait || w1.Allocated != 20e6 || w1.Permits != 2 || w1.Version != 2 {
		t.Errorf("after restart Wait = %+v; want the backlog %d forfeited as idle, totals kept", w1, w0.Wait)
	}
	// The verb configure keeps the schedule, and an unchanged config is no change.
	if info := stPut(t, s, "r", limiter.Config{Spec: "100,1,configure"}); info.Version != 2 {
		t.Errorf("Put configure of the same config: version %d, want 2", info.Version)
	}
}

func stTestPatch(t *testing.T, f stFactory) {
	s := stStore(t, f(t))
	ctx := t.Context()
	stPut(t, s, "p", stSched(10, 1))
	d0 := stAcquire(t, s, "p", 5, limitd.Forever)
	info, err := s.Patch(ctx, "p", func(c limiter.Config) (limiter.Config, error) {
		c.Rate = 20
		return c, nil
	})
	if err != nil || info.Version != 2 || info.Config.Rate != 20 || float64(*info.Config.Burst) != 1 {
		t.Fatalf("Patch = %+v, %v; want version 2, rate 20, burst kept", info, err)
	}
	if d := stAcquire(t, s, "p", 1, limitd.Forever); d.Scheduled != d0.Scheduled+500e6 || d.Version != 2 {
		t.Errorf("after Patch the permit is due +%d (version %d), want +500ms: state lost", d.Scheduled-d0.Scheduled, d.Version)
	}
	if w := stWait(t, s, "p"); w.Permits != 6 {
		t.Errorf("after Patch %d permits, want 6", w.Permits)
	}

	_, err = s.Patch(ctx, "p", func(c limiter.Config) (limiter.Config, error) {
		return stSmooth(c.Rate, 1), nil
	})
	stWantIs(t, "Patch kind change", err, ErrConflict)
	if got, _ := s.Get(ctx, "p"); got.Version != 2 || got.Config.Kind != limiter.KindSchedule {
		t.Errorf("a refused Patch changed the limiter: %+v", got)
	}

	_, err = s.Patch(ctx, "nope", func(c limiter.Config) (limiter.Config, error) { return c, nil })
	stWantIs(t, "Patch unknown", err, ErrNotFound)

	boom := errors.New("boom")
	_, err = s.Patch(ctx, "p", func(c limiter.Config) (limiter.Config, error) { return c, boom })
	stWantIs(t, "Patch whose apply fails", err, boom)
}

// Many processes PUT the same config at start-up: one creates the limiter,
// the others change nothing.
func stTestPutConcurrent(t *testing.T, f stFactory) {
	s := stStore(t, f(t))
	var wg sync.WaitGroup
	var creators atomic.Int64
	for range 16 {
		wg.Go(func() {
			info, created, err := s.Put(t.Context(), "boot", limiter.Config{Spec: "1000,1.1"})
			if err != nil || info.Version != 1 {
				t.Errorf("concurrent Put = %+v, %v", info, err)
			}
			if created {
				creators.Add(1)
			}
		})
	}
	wg.Wait()
	if n := creators.Load(); n != 1 {
		t.Errorf("%d Puts report they created the limiter, want 1", n)
	}
}

// Concurrent patches are applied one after another, none lost: each sees
// the config the previous one left.
func stTestPatchConcurrent(t *testing.T, f stFactory) {
	s := stStore(t, f(t))
	stPut(t, s, "pc", stSched(100, 1))
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 2 {
				_, err := s.Patch(t.Context(), "pc", func(c limiter.Config) (limiter.Config, error) {
					c.Rate++
					return c, nil
				})
				if err != nil {
					t.Errorf("concurrent Patch: %v", err)
				}
			}
		})
	}
	wg.Wait()
	if got, err := s.Get(t.Context(), "pc"); err != nil || got.Config.Rate != 108 || got.Version != 9 {
		t.Errorf("after 8 concurrent patches: rate %v version %d, %v; want 108, 9", got.Config.Rate, got.Version, err)
	}
}

func stTestGet(t *testing.T, f stFactory) {
	s := stStore(t, f(t))
	ctx := t.Context()
	put := stPut(t, s, "g", limiter.Config{Kind: limiter.KindSmooth, Rate: 2, Warmup: limiter.D(4 * time.Second)})
	got, err := s.Get(ctx, "g")
	if err != nil || got.Name != "g" || got.Version != 1 || got.Template != "" {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	if got.Config.Kind != limiter.KindSmooth || *got.Config.ColdFactor != 3 || time.Duration(*got.Config.Warmup) != 4*time.Second {
		t.Errorf("Get config %+v, want the canonical smooth config (cold factor 3)", got.Config)
	}
	// Get gives back the config as Put stored it: putting it again is no change.
	if info := stPut(t, s, "g", got.Config); info.Version != 1 || !reflect.DeepEqual(info.Config, put.Config) {
		t.Errorf("Put of Get's config = %+v, want version 1 and the config Put returned", info)
	}
	_, err = s.Get(ctx, "missing")
	stWantIs(t, "Get missing", err, ErrNotFound)
	_, err = s.Get(ctx, "bad name")
	stWantField(t, "Get bad name", err, "name")
}

func stTestDelete(t *testing.T, f stFactory) {
	s := stStore(t, f(t))
	ctx := t.Context()
	stPut(t, s, "gone", stSched(100, 1))
	stPut(t, s, "kept", stSched(100, 1))
	stAcquire(t, s, "gone", 2, limitd.Forever)
	mentions := func(name string) (keys []string) {
		for _, k := range stKeys(t, s) {
			if strings.Contains(k, "{"+name+"}") {
				keys = append(keys, k)
			}
		}
		return keys
	}
	if len(mentions("gone")) == 0 {
		t.Fatalf("no key of the limiter found before Delete: %v", stKeys(t, s))
	}
	if err := s.Delete(ctx, "gone"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if ks := mentions("gone"); len(ks) != 0 {
		t.Errorf("keys left after Delete: %v", ks)
	}
	if n, err := s.Client().ZScore(ctx, s.indexKey(), "gone").Result(); !errors.Is(err, redis.Nil) {
		t.Errorf("index still names the deleted limiter (%v, %v)", n, err)
	}
	_, err := s.Get(ctx, "gone")
	stWantIs(t, "Get after Delete", err, ErrNotFound)
	_, err = s.Acquire(ctx, "gone", 1, limitd.Forever)
	stWantIs(t, "Acquire after Delete", err, ErrNotFound)
	stWantIs(t, "Delete twice", s.Delete(ctx, "gone"), ErrNotFound)
	stWantField(t, "Delete bad name", s.Delete(ctx, "-x"), "name")
	if _, err := s.Get(ctx, "kept"); err != nil {
		t.Errorf("Delete took another limiter with it: %v", err)
	}
	// A deleted name can be created again, from scratch.
	if info, created, err := s.Put(ctx, "gone", stSched(100, 1)); err != nil || !created || info.Version != 1 {
		t.Errorf("re-create = %+v, %v, %v", info, created, err)
	}
}

func stTestList(t *testing.T, f stFactory) {
	s := stStore(t, f(t))
	ctx := t.Context()
	var names []string
	for i := range 25 {
		names = append(names, fmt.Sprintf("lim-%02d", i))
	}
	shuffled := slices.Clone(names)
	rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	for _, n := range shuffled {
		stPut(t, s, n, stSched(10, 1))
	}
	listAll := func(limit int) (pages [][]string) {
		cursor := ""
		for range 10 {
			infos, next, err := s.List(ctx, cursor, limit)
			if err != nil {
				t.Fatalf("List(%q, %d): %v", cursor, limit, err)
			}
			var page []string
			for _, in := range infos {
				page = append(page, in.Name)
				if in.Version != 1 || in.Config.Rate != 10 {
					t.Errorf("List gave %+v", in)
				}
			}
			pages = append(pages, page)
			if next == "" {
				return pages
			}
			cursor = next
		}
		t.Fatalf("List never ended: %v", pages)
		return nil
	}
	pages := listAll(10)
	if len(pages) != 3 || len(pages[0]) != 10 || len(pages[1]) != 10 || len(pages[2]) != 5 {
		t.Fatalf("pages %v, want 10, 10, 5", pages)
	}
	if got := slices.Concat(pages...); !slices.Equal(got, names) {
		t.Errorf("listed %v, want %v", got, names)
	}
	// When the last page is full, the next cursor is already empty.
	for _, n := range names[20:] {
		if err := s.Delete(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	pages = listAll(10)
	if len(pages) != 2 || !slices.Equal(slices.Concat(pages...), names[:20]) {
		t.Errorf("after deleting 5: pages %v, want two full pages and no empty third", pages)
	}
	if pages = listAll(1000); len(pages) != 1 || len(pages[0]) != 20 {
		t.Errorf("List with limit 1000: %v", pages)
	}
	for _, limit := range []int{0, -1, MaxListLimit + 1} {
		_, _, err := s.List(ctx, "", limit)
		stWantField(t, fmt.Sprintf("List limit %d", limit), err, "limit")
	}
	// Nothing after the last name.
	if infos, next, err := s.List(ctx, "zzz", 10); err != nil || len(infos) != 0 || next != "" {
		t.Errorf("List past the end = %v, %q, %v", infos, next, err)
	}
}

// ---- acquire, wait, reset, grant ----

func stTestAcquireDelays(t *testing.T, f stFactory) {
	s := stStore(t, f(t))
	ctx := t.Context()
	for _, c := range []struct {
		name string
		cfg  limiter.Config
	}{
		{"schedule", stSched(5, 1)},
		{"smooth", stSmooth(5, 0)}, // no stored permits: nothing blurs the slices
	} {
		stPut(t, s, c.name, c.cfg)
		var ds [3]limitd.Decision
		for i := range ds {
			ds[i] = stAcquire(t, s, c.name, 1, limitd.Forever)
		}
		if !ds[0].Granted || ds[0].Delay != 0 || ds[0].Start != ds[0].Now || ds[0].Permits != 1 {
			t.Errorf("%s: first acquire %+v, want granted at once", c.name, ds[0])
		}
		for i := 1; i < 3; i++ {
			d, step := ds[i], int64(i)*200e6
			if !d.Granted || d.Start != ds[0].Start+step || d.Scheduled != d.Start || d.Delay != d.Start-d.Now {
				t.Errorf("%s: acquire %d = %+v, want start %d after the first", c.name, i, d, step)
			}
			if d.Delay > step || d.Delay <= 0 {
				t.Errorf("%s: acquire %d delay %v, want about %v", c.name, i, time.Duration(d.Delay), time.Duration(step))
			}
		}
		// A caller who waits at most 100 ms is denied and told when to retry.
		d, err := s.Acquire(ctx, c.name, 1, 100*time.Millisecond)
		if err != nil || d.Granted {
			t.Fatalf("%s: acquire with max_wait = %+v, %v; want denied", c.name, d, err)
		}
		if want := ds[0].Start + 600e6 - d.Now; d.Delay != want || d.RetryAfter != want-100e6 || d.RetryAfter <= 0 {
			t.Errorf("%s: denied %+v, want delay %d and retry after %d", c.name, d, want, want-100e6)
		}
		if d, _ := s.Acquire(ctx, c.name, 1, 0); d.Granted {
			t.Errorf("%s: tryAcquire granted while in debt", c.name)
		}
		if w := stWait(t, s, c.name); w.Permits != 3 || w.Allocated != 600e6 {
			t.Errorf("%s: denials changed the state: %+v", c.name, w)
		}
	}
	_, err := s.Acquire(ctx, "unknown", 1, limitd.Forever)
	stWantIs(t, "Acquire unknown", err, ErrNotFound)
}

func stTestWaitReset(t *testing.T, f stFactory) {
	s := stStore(t, f(t))
	ctx := t.Context()
	stPut(t, s, "w", stSched(100, 1)) // slice 10 ms
	if w := stWait(t, s, "w"); w.Started || w.Wait != 0 || w.Delay != 0 || w.Permits != 0 || w.Version != 1 || w.Now == 0 {
		t.Errorf("unused limiter Wait = %+v", w)
	}
	d0 := stAcquire(t, s, "w", 1, limitd.Forever)
	time.Sleep(50 * time.Millisecond)
	w0 := stWait(t, s, "w")
	if !w0.Started || w0.Wait != w0.Now-(d0.Scheduled+10e6) || w0.Delay != 0 || w0.Allocated != 10e6 || w0.Permits != 1 {
		t.Errorf("Wait after an idle 50ms = %+v, want backlog now − (first + 10ms)", w0)
	}
	v, err := s.Reset(ctx, "w")
	if err != nil || v != 1 {
		t.Fatalf("Reset = %d, %v", v, err)
	}
	d1 := stAcquire(t, s, "w", 1, limitd.Forever)
	if d1.Scheduled < w0.Now {
		t.Errorf("after Reset the permit is due %d ns before the reset: backlog kept", w0.Now-d1.Scheduled)
	}
	w1 := stWait(t, s, "w")
	if w1.Idle < w0.Wait || w1.Allocated != 20e6 || w1.Permits != 2 {
		t.Errorf("after Reset Wait = %+v, want backlog %d as idle and totals kept", w1, w0.Wait)
	}
	// Debt is not forgiven by a reset: permits granted stay granted.
	stAcquire(t, s, "w", 50, limitd.Forever) // 500 ms of debt
	if _, err := s.Reset(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	if w := stWait(t, s, "w"); w.Delay < 300e6 {
		t.Errorf("Reset forgave the debt: delay %v", time.Duration(w.Delay))
	}
	_, err = s.Reset(ctx, "unknown")
	stWantIs(t, "Reset unknown", err, ErrNotFound)
	_, err = s.Wait(ctx, "unknown")
	stWantIs(t, "Wait unknown", err, ErrNotFound)
}

func stTestGrantRelease(t *testing.T, f stFactory) {
	s := stStore(t, f(t))
	ctx := t.Context()
	stPut(t, s, "pool", stSched(100, 1)) // slice 10 ms
	g, err := s.Grant(ctx, "pool", 10, limitd.Forever)
	if err != nil || !g.Granted || g.Permits != 10 || g.Delay != 0 {
		t.Fatalf("Grant = %+v, %v", g, err)
	}
	if g.End != g.Scheduled+100e6 || g.Slice != (limiter.Slice{Whole: 10e6, Den: 1}) || g.Burst != 1 || g.Kind != limiter.KindSchedule || g.Name != "pool" {
		t.Errorf("Grant parameters %+v", g)
	}
	// Nothing was taken since: handing back 4 rewinds the schedule.
	rewound, err := s.Release(ctx, g, 4)
	if err != nil || !rewound {
		t.Fatalf("Release = %v, %v; want rewound", rewound, err)
	}
	if w := stWait(t, s, "pool"); w.Allocated != 60e6 || w.Permits != 6 || w.Idle != 0 {
		t.Errorf("after rewind Wait = %+v, want 60ms and 6 permits allocated", w)
	}
	if d := stAcquire(t, s, "pool", 1, limitd.Forever); d.Scheduled != g.Scheduled+60e6 {
		t.Errorf("after rewind the next permit is due +%d, want +60ms", d.Scheduled-g.Scheduled)
	}
	// Someone took permits after the grant: handed-back time is idle.
	g2, err := s.Grant(ctx, "pool", 3, limitd.Forever)
	if err != nil || g2.Scheduled != g.Scheduled+70e6 {
		t.Fatalf("second Grant = %+v, %v", g2, err)
	}
	stAcquire(t, s, "pool", 1, limitd.Forever)
	rewound, err = s.Release(ctx, g2, 2)
	if err != nil || rewound {
		t.Fatalf("Release after others = %v, %v; want not rewound", rewound, err)
	}
	if w := stWait(t, s, "pool"); w.Allocated != 90e6 || w.Idle != 20e6 || w.Permits != 9 {
		t.Errorf("after a late hand-back Wait = %+v, want allocated 90ms, idle 20ms, 9 permits", w)
	}
	if d := stAcquire(t, s, "pool", 1, limitd.Forever); d.Scheduled != g.Scheduled+110e6 {
		t.Errorf("a late hand-back moved the schedule: +%d, want +110ms", d.Scheduled-g.Scheduled)
	}
	// Nothing to hand back is no call at all.
	if rewound, err := s.Release(ctx, g, 0); rewound || err != nil {
		t.Errorf("Release of 0 = %v, %v", rewound, err)
	}
	// A pool on an "inf" burst limiter learns it.
	stPut(t, s, "avg", limiter.Config{Rate: 1000, Burst: limiter.B(limiter.Inf)})
	if g, err := s.Grant(ctx, "avg", 5, limitd.Forever); err != nil || g.Burst != limiter.Inf || g.Slice.Whole != 1e6 {
		t.Errorf("Grant on inf burst = %+v, %v", g, err)
	}
	_, err = s.Grant(ctx, "unknown", 1, limitd.Forever)
	stWantIs(t, "Grant unknown", err, ErrNotFound)
	_, err = s.Grant(ctx, "pool", 0, limitd.Forever)
	stWantField(t, "Grant 0", err, "permits")
}

// ---- templates ----

func stTestTemplatesCRUD(t *testing.T, f stFactory) {
	s := stStore(t, f(t))
	ctx := t.Context()
	users, err := s.PutTemplate(ctx, limitd.Template{ID: "users", Pattern: "user:*", Order: 10, IdleTTL: limiter.D(10 * time.Minute), Limiter: stSched(10, 1)})
	if err != nil || users.Version < 1 || users.Limiter.Kind != limiter.KindSchedule {
		t.Fatalf("PutTemplate = %+v, %v", users, err)
	}
	got, err := s.GetTemplate(ctx, "users")
	if err != nil || got.Version != users.Version || got.Pattern != "user:*" || time.Duration(*got.IdleTTL) != 10*time.Minute {
		t.Errorf("GetTemplate = %+v, %v", got, err)
	}
	// Identical: same version. Changed: a higher one.
	if again, err := s.PutTemplate(ctx, limitd.Template{ID: "users", Pattern: "user:*", Order: 10, IdleTTL: limiter.D(10 * time.Minute), Limiter: stSched(10, 1)}); err != nil || again.Version != users.Version {
		t.Errorf("identical PutTemplate = version %d (was %d), %v", again.Version, users.Version, err)
	}
	changed, err := s.PutTemplate(ctx, limitd.Template{ID: "users", Pattern: "user:*", Order: 10, Limiter: stSched(20, 1)})
	if err != nil || changed.Version <= users.Version {
		t.Errorf("changed PutTemplate = version %d (was %d), %v", changed.Version, users.Version, err)
	}
	for _, tp := range []limitd.Template{
		{ID: "vip", Pattern: "user:vip*", Order: 1, Limiter: stSched(100, 1)},
		{ID: "a-first", Pattern: "a*", Order: 5, Limiter: stSched(1, 1)},
		{ID: "a", Pattern: "x?", Order: 10, Limiter: limiter.Config{Spec: "3"}},
	} {
		if _, err := s.PutTemplate(ctx, tp); err != nil {
			t.Fatalf("PutTemplate %s: %v", tp.ID, err)
		}
	}
	all, err := s.Templates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, tp := range all {
		ids = append(ids, tp.ID)
	}
	if want := []string{"vip", "a-first", "a", "users"}; !slices.Equal(ids, want) {
		t.Errorf("Templates order %v, want %v (by order, then id)", ids, want)
	}
	for name, want := range map[string]string{"user:vip7": "vip", "user:7": "users", "abc": "a-first", "xy": "a"} {
		if tp, err := s.Resolve(ctx, name); err != nil || tp.ID != want {
			t.Errorf("Resolve(%s) = %s, %v; want %s", name, tp.ID, err, want)
		}
	}
	_, err = s.Resolve(ctx, "xyz")
	stWantIs(t, "Resolve with no match", err, ErrNotFound)

	if err := s.DeleteTemplate(ctx, "vip"); err != nil {
		t.Fatalf("DeleteTemplate: %v", err)
	}
	_, err = s.GetTemplate(ctx, "vip")
	stWantIs(t, "GetTemplate deleted", err, ErrNotFound)
	stWantIs(t, "DeleteTemplate twice", s.DeleteTemplate(ctx, "vip"), ErrNotFound)
	if tp, err := s.Resolve(ctx, "user:vip7"); err != nil || tp.ID != "users" {
		t.Errorf("after deleting vip, Resolve = %s, %v; want users", tp.ID, err)
	}
	// Another store over the same Redis sees the templates too.
	other := New(s.Client(), WithPrefix(s.Prefix()))
	if tp, err := other.Resolve(ctx, "user:1"); err != nil || tp.ID != "users" || tp.Limiter.Rate != 20 {
		t.Errorf("second store Resolve = %+v, %v", tp, err)
	}
}

func stTestTemplateResolution(t *testing.T, f stFactory) {
	s := stStore(t, f(t))
	ctx := t.Context()
	tpl, err := s.PutTemplate(ctx, limitd.Template{ID: "users", Pattern: "user:*", Order: 10, Limiter: stSched(10, 1)})
	if err != nil {
		t.Fatal(err)
	}
	idle, err := s.PutTemplate(ctx, limitd.Template{ID: "ips", Pattern: "ip:*", Order: 10, IdleTTL: limiter.D(10 * time.Minute), Limiter: stSched(10, 1)})
	if err != nil {
		t.Fatal(err)
	}
	// An exact limiter wins over a template that matches its name.
	stPut(t, s, "user:vip", stSched(1000, 1))
	d := stAcquire(t, s, "user:vip", 1, limitd.Forever)
	if d.Version != 1 {
		t.Errorf("user:vip acquired with version %d, want the limiter's 1", d.Version)
	}
	if g, err := s.Grant(ctx, "user:vip", 1, limitd.Forever); err != nil || g.Slice.Whole != 1e6 {
		t.Errorf("user:vip grant slice %+v, %v; want the limiter's 1ms", g.Slice, err)
	}
	if n, _ := s.Client().Exists(ctx, s.instanceKey("user:vip")).Result(); n != 0 {
		t.Errorf("an exact limiter got template-instance state")
	}

	// A name that only a template matches gets its own state, with a TTL.
	d = stAcquire(t, s, "user:1", 1, limitd.Forever)
	if !d.Granted || d.Version != tpl.Version || d.Delay != 0 {
		t.Errorf("user:1 = %+v, want granted at once with the template's version %d", d, tpl.Version)
	}
	if g, err := s.Grant(ctx, "user:1", 1, limitd.Forever); err != nil || g.Slice.Whole != 100e6 || g.Scheduled != d.Scheduled+100e6 {
		t.Errorf("user:1 grant %+v, %v; want the template's 100ms slice", g, err)
	}
	pttl, err := s.Client().PTTL(ctx, s.instanceKey("user:1")).Result()
	if err != nil || pttl <= 0 {
		t.Errorf("instance PTTL = %v, %v; want > 0", pttl, err)
	}
	stAcquire(t, s, "ip:10.0.0.1", 1, limitd.Forever)
	pttl, err = s.Client().PTTL(ctx, s.instanceKey("ip:10.0.0.1")).Result()
	if err != nil || pttl <= 0 || pttl > 10*time.Minute*9/8 { // and an eighth more (lua/lib.lua, Instance TTLs)
		t.Errorf("instance with idle_ttl 10m: PTTL = %v, %v", pttl, err)
	}
	if d := stAcquire(t, s, "ip:10.0.0.1", 1, limitd.Forever); d.Version != idle.Version {
		t.Errorf("ip instance version %d, want %d", d.Version, idle.Version)
	}
	if w := stWait(t, s, "user:1"); w.Permits != 2 || w.Version != tpl.Version {
		t.Errorf("instance Wait = %+v", w)
	}
	if _, err := s.Reset(ctx, "user:1"); err != nil {
		t.Errorf("Reset instance: %v", err)
	}
	// An instance is not a limiter: not listed, no config of its own.
	_, err = s.Get(ctx, "user:1")
	stWantIs(t, "Get of an instance", err, ErrNotFound)
	if infos, _, err := s.List(ctx, "", 100); err != nil || len(infos) != 1 || infos[0].Name != "user:vip" {
		t.Errorf("List = %+v, %v; want only user:vip", infos, err)
	}

	// No match is a 404, never "allow everything", and writes nothing.
	before := stSnapshot(t, s)
	_, err = s.Acquire(ctx, "guest", 1, limitd.Forever)
	stWantIs(t, "Acquire unmatched", err, ErrNotFound)
	_, err = s.Grant(ctx, "guest", 1, limitd.Forever)
	stWantIs(t, "Grant unmatched", err, ErrNotFound)
	_, err = s.Wait(ctx, "guest")
	stWantIs(t, "Wait unmatched", err, ErrNotFound)
	_, err = s.Reset(ctx, "guest")
	stWantIs(t, "Reset unmatched", err, ErrNotFound)
	outs := s.AcquireMany(ctx, []Request{{Name: "guest", Permits: 1, MaxWait: limitd.Forever}})
	stWantIs(t, "AcquireMany unmatched", outs[0].Err, ErrNotFound)
	// Wait and Reset on a matching name that was never used create nothing.
	if w := stWait(t, s, "user:2"); w.Started || w.Version != tpl.Version {
		t.Errorf("Wait on an unused instance = %+v", w)
	}
	if _, err := s.Reset(ctx, "user:2"); err != nil {
		t.Errorf("Reset unused instance: %v", err)
	}
	stSameSnapshot(t, "calls on unmatched or unused names", before, stSnapshot(t, s))

	// Once the template is gone, its instances are unreachable.
	if err := s.DeleteTemplate(ctx, "users"); err != nil {
		t.Fatal(err)
	}
	_, err = s.Acquire(ctx, "user:1", 1, limitd.Forever)
	stWantIs(t, "Acquire after DeleteTemplate", err, ErrNotFound)
	if _, err := s.Acquire(ctx, "user:vip", 1, limitd.Forever); err != nil {
		t.Errorf("the exact limiter went with the template: %v", err)
	}
}

func stTestTemplateNewVersion(t *testing.T, f stFactory) {
	s := stStore(t, f(t))
	ctx := t.Context()
	if _, err := s.PutTemplate(ctx, limitd.Template{ID: "users", Pattern: "user:*", Limiter: stSched(10, 1)}); err != nil {
		t.Fatal(err)
	}
	d0 := stAcquire(t, s, "user:2", 3, limitd.Forever) // 300 ms of schedule
	v2, err := s.PutTemplate(ctx, limitd.Template{ID: "users", Pattern: "user:*", Limiter: stSched(20, 1)})
	if err != nil {
		t.Fatal(err)
	}
	d1 := stAcquire(t, s, "user:2", 1, limitd.Forever)
	d2 := stAcquire(t, s, "user:2", 1, limitd.Forever)
	if d1.Version != v2.Version || d1.Scheduled != d0.Scheduled+300e6 || d2.Scheduled != d1.Scheduled+50e6 {
		t.Errorf("instance after the template changed: version %d (want %d), due +%d then +%d (want +300ms, +50ms)",
			d1.Version, v2.Version, d1.Scheduled-d0.Scheduled, d2.Scheduled-d1.Scheduled)
	}
	if w := stWait(t, s, "user:2"); w.Permits != 5 || w.Allocated != 400e6 || w.Version != v2.Version {
		t.Errorf("instance Wait = %+v, want 5 permits, 400ms allocated", w)
	}
	if g, err := s.Grant(ctx, "user:2", 1, limitd.Forever); err != nil || g.Slice.Whole != 50e6 {
		t.Errorf("instance grant after change: slice %+v, %v", g.Slice, err)
	}
}

// ---- bad input ----

func stTestBadInput(t *testing.T, f stFactory) {
	s := stStore(t, f(t))
	ctx := t.Context()
	stPut(t, s, "ok", stSched(5, 1))
	stAcquire(t, s, "ok", 1, limitd.Forever)
	if _, err := s.PutTemplate(ctx, limitd.Template{ID: "users", Pattern: "user:*", Limiter: stSched(5, 1)}); err != nil {
		t.Fatal(err)
	}
	stAcquire(t, s, "user:1", 1, limitd.Forever)
	before := stSnapshot(t, s)

	for _, name := range []string{"", "-x", ".x", "_x", "a b", "a/b", "a*", "a?", "ü", "a{b}", "a\n", "a" + strings.Repeat("b", 128)} {
		q := fmt.Sprintf("%q", name)
		_, _, err := s.Put(ctx, name, stSched(5, 1))
		stWantField(t, "Put "+q, err, "name")
		_, err = s.Get(ctx, name)
		stWantField(t, "Get "+q, err, "name")
		_, err = s.Patch(ctx, name, func(c limiter.Config) (limiter.Config, error) { return c, nil })
		stWantField(t, "Patch "+q, err, "name")
		stWantField(t, "Delete "+q, s.Delete(ctx, name), "name")
		_, err = s.Acquire(ctx, name, 1, limitd.Forever)
		stWantField(t, "Acquire "+q, err, "name")
		_, err = s.Grant(ctx, name, 1, limitd.Forever)
		stWantField(t, "Grant "+q, err, "name")
		_, err = s.Wait(ctx, name)
		stWantField(t, "Wait "+q, err, "name")
		_, err = s.Reset(ctx, name)
		stWantField(t, "Reset "+q, err, "name")
	}

	nan := 0.0
	nan /= nan
	for _, c := range []struct {
		cfg   limiter.Config
		field string
	}{
		{limiter.Config{}, "rate"},
		{limiter.Config{Rate: -1}, "rate"},
		{limiter.Config{Rate: 2e9}, "rate"},
		{limiter.Config{Rate: nan}, "rate"},
		{limiter.Config{Rate: 10, Burst: limiter.B(0.5)}, "burst"},
		{limiter.Config{Rate: 10, Burst: limiter.B(2e6)}, "burst"},
		{limiter.Config{Rate: 10, MaxBacklog: limiter.D(-time.Second)}, "max_backlog"},
		{limiter.Config{Kind: "nope", Rate: 1}, "kind"},
		{limiter.Config{Spec: "garbage"}, "rate"},
		{limiter.Config{Spec: "10,0.5"}, "burst"},
		{limiter.Config{Spec: "10,1,explode"}, "spec.verb"},
		{limiter.Config{Spec: "10", Rate: 10}, "spec"},
		{limiter.Config{Kind: limiter.KindSmooth, Rate: 5, Burst: limiter.B(2)}, "burst"},
		{limiter.Config{Kind: limiter.KindSmooth, Rate: 5, Warmup: limiter.D(time.Second), ColdFactor: &nan}, "cold_factor"},
		{limiter.Config{Kind: limiter.KindSchedule, Rate: 5, Warmup: limiter.D(time.Second)}, "warmup"},
	} {
		what := fmt.Sprintf("Put %+v", c.cfg)
		_, _, err := s.Put(ctx, "ok", c.cfg)
		stWantField(t, what, err, c.field)
		_, _, err = s.Put(ctx, "new-one", c.cfg)
		stWantField(t, what+" (new)", err, c.field)
		_, err = s.Patch(ctx, "ok", func(limiter.Config) (limiter.Config, error) { return c.cfg, nil })
		stWantField(t, "Patch "+what, err, c.field)
		_, err = s.PutTemplate(ctx, limitd.Template{ID: "bad", Pattern: "bad:*", Limiter: c.cfg})
		stWantField(t, "PutTemplate "+what, err, "limiter."+c.field)
	}

	for _, n := range []int64{0, -1, 1e12} {
		for _, name := range []string{"ok", "user:1", "user:new"} {
			what := fmt.Sprintf("%s permits %d", name, n)
			_, err := s.Acquire(ctx, name, n, limitd.Forever)
			stWantField(t, "Acquire "+what, err, "permits")
			_, err = s.Grant(ctx, name, n, time.Second)
			stWantField(t, "Grant "+what, err, "permits")
			outs := s.AcquireMany(ctx, []Request{{Name: name, Permits: n}})
			stWantField(t, "AcquireMany "+what, outs[0].Err, "permits")
		}
	}

	for _, c := range []struct {
		tpl   limitd.Template
		field string
	}{
		{limitd.Template{ID: "", Pattern: "a*", Limiter: stSched(1, 1)}, "id"},
		{limitd.Template{ID: "-x", Pattern: "a*", Limiter: stSched(1, 1)}, "id"},
		{limitd.Template{ID: "t", Pattern: "", Limiter: stSched(1, 1)}, "pattern"},
		{limitd.Template{ID: "t", Pattern: "a b*", Limiter: stSched(1, 1)}, "pattern"},
		{limitd.Template{ID: "t", Pattern: "[ab]*", Limiter: stSched(1, 1)}, "pattern"},
		{limitd.Template{ID: "t", Pattern: "a\\", Limiter: stSched(1, 1)}, "pattern"},
		{limitd.Template{ID: "t", Pattern: "a*", IdleTTL: limiter.D(0), Limiter: stSched(1, 1)}, "idle_ttl"},
		{limitd.Template{ID: "t", Pattern: "a*", IdleTTL: limiter.D(-time.Second), Limiter: stSched(1, 1)}, "idle_ttl"},
		{limitd.Template{ID: "t", Pattern: "a*", IdleTTL: limiter.D(100 * 24 * time.Hour), Limiter: stSched(1, 1)}, "idle_ttl"},
		{limitd.Template{ID: "t", Pattern: "a*", Limiter: stSched(1, 1), FixedWindows: true}, "fixed_windows"},
		{limitd.Template{ID: "t", Pattern: "a*", Limiter: limiter.Config{Kind: limiter.KindWindow, Limit: new(int64(5)), Period: "day"}, FixedWindows: true}, "fixed_windows"},
	} {
		_, err := s.PutTemplate(ctx, c.tpl)
		stWantField(t, fmt.Sprintf("PutTemplate %+v", c.tpl), err, c.field)
	}
	stSameSnapshot(t, "bad input", before, stSnapshot(t, s))
	// The good limiter still works as before.
	if w := stWait(t, s, "ok"); w.Permits != 1 || w.Version != 1 {
		t.Errorf("after bad input Wait(ok) = %+v", w)
	}
}

// ---- change events ----

func stTestChangeEvents(t *testing.T, f stFactory) {
	rdb := f(t)
	s := stStore(t, rdb)
	ctx := t.Context()
	sub := rdb.Subscribe(ctx, s.Channel())
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil { // the subscription is confirmed
		t.Fatalf("subscribe: %v", err)
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
	stPut(t, s, "ev", stSched(10, 1))
	expect("Put", "ev 1")
	stPut(t, s, "ev", stSched(10, 1)) // no change, no event: the next one is v2
	stPut(t, s, "ev", stSched(20, 1))
	expect("Put reconfigure", "ev 2")
	if _, err := s.Patch(ctx, "ev", func(c limiter.Config) (limiter.Config, error) { c.Rate = 30; return c, nil }); err != nil {
		t.Fatal(err)
	}
	expect("Patch", "ev 3")
	stPut(t, s, "ev", limiter.Config{Spec: "30,1,restart"})
	expect("Put restart", "ev 4")
	stPut(t, s, "ev", stSmooth(30, 1))
	expect("Put other kind", "ev 5")
	if err := s.Delete(ctx, "ev"); err != nil {
		t.Fatal(err)
	}
	expect("Delete", "ev 0")
	if _, err := s.PutTemplate(ctx, limitd.Template{ID: "t", Pattern: "t:*", Limiter: stSched(1, 1)}); err != nil {
		t.Fatal(err)
	}
	expect("PutTemplate", "*template* 0")
	if err := s.DeleteTemplate(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	expect("DeleteTemplate", "*template* 0")
	select {
	case m := <-msgs:
		t.Errorf("unexpected event %q", m.Payload)
	case <-time.After(50 * time.Millisecond):
	}
}

// ---- batches ----

func stTestAcquireMany(t *testing.T, f stFactory) {
	s := stStore(t, f(t))
	ctx := t.Context()
	stPut(t, s, "m-a", stSched(1000, 1))
	stPut(t, s, "m-b", stSched(1, 1)) // 2 permits: 2 s of debt
	tpl, err := s.PutTemplate(ctx, limitd.Template{ID: "mt", Pattern: "mt-*", Limiter: stSched(10, 1)})
	if err != nil {
		t.Fatal(err)
	}
	reqs := []Request{
		{Name: "m-a", Permits: 1, MaxWait: limitd.Forever},
		{Name: "nope", Permits: 1, MaxWait: limitd.Forever},
		{Name: "m-a", Permits: 0, MaxWait: limitd.Forever},
		{Name: "m-b", Permits: 2, MaxWait: limitd.Forever},
		{Name: "-bad", Permits: 1},
		{Name: "m-b", Permits: 1e12, MaxWait: limitd.Forever},
		{Name: "mt-1", Permits: 1, MaxWait: limitd.Forever},
		{Name: "m-a", Permits: 1, MaxWait: limitd.Forever},
		{Name: "m-b", Permits: 1, MaxWait: 0}, // in debt: denied
		{Name: "mt-2", Permits: 3, MaxWait: limitd.Forever},
	}
	out := s.AcquireMany(ctx, reqs)
	if len(out) != len(reqs) {
		t.Fatalf("%d outcomes for %d requests", len(out), len(reqs))
	}
	ok := func(i int) {
		t.Helper()
		if out[i].Err != nil || !out[i].Granted || out[i].Permits != reqs[i].Permits {
			t.Errorf("outcome %d (%+v) = %+v, want granted", i, reqs[i], out[i])
		}
	}
	ok(0)
	stWantIs(t, "outcome 1", out[1].Err, ErrNotFound)
	stWantField(t, "outcome 2", out[2].Err, "permits")
	ok(3)
	stWantField(t, "outcome 4", out[4].Err, "name")
	stWantField(t, "outcome 5", out[5].Err, "permits")
	ok(6)
	ok(7)
	if out[8].Err != nil || out[8].Granted || out[8].RetryAfter <= 0 {
		t.Errorf("outcome 8 = %+v, want denied with a retry-after", out[8])
	}
	ok(9)
	if out[7].Scheduled != out[0].Scheduled+1e6 {
		t.Errorf("m-a's second permit due +%d, want +1ms (outcomes out of order?)", out[7].Scheduled-out[0].Scheduled)
	}
	if out[6].Version != tpl.Version || out[9].Version != tpl.Version || out[0].Version != 1 {
		t.Errorf("versions %d, %d, %d", out[0].Version, out[6].Version, out[9].Version)
	}
	if w := stWait(t, s, "m-b"); w.Permits != 2 {
		t.Errorf("m-b has %d permits, want 2", w.Permits)
	}
	if out := s.AcquireMany(ctx, nil); len(out) != 0 {
		t.Errorf("AcquireMany(nil) = %v", out)
	}
}

// stSchedules runs goroutines × per acquires spread over names, and returns
// every limiter's grants.
func stSchedules(t *testing.T, s *Store, names []string, goroutines, per int) map[string][]limitd.Decision {
	t.Helper()
	var mu sync.Mutex
	got := map[string][]limitd.Decision{}
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			name := names[g%len(names)]
			for range per {
				d, err := s.Acquire(t.Context(), name, 1, limitd.Forever)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				got[name] = append(got[name], d)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Acquire: %v", err)
	}
	return got
}

// stCheckSpacing checks that the grants' scheduled times are distinct and
// spaced by exactly one slice.
func stCheckSpacing(t *testing.T, what string, ds []limitd.Decision, slice int64) {
	t.Helper()
	sched := make([]int64, len(ds))
	for i, d := range ds {
		if !d.Granted || d.Start < d.Scheduled {
			t.Errorf("%s: grant %+v", what, d)
		}
		sched[i] = d.Scheduled
	}
	slices.Sort(sched)
	for i := 1; i < len(sched); i++ {
		if gap := sched[i] - sched[i-1]; gap != slice {
			t.Errorf("%s: scheduled times %d and %d are %d ns apart, want %d", what, i-1, i, gap, slice)
			return
		}
	}
}

func stTestBatching(t *testing.T, f stFactory) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	rdb := f(t)
	defer rdb.Close()
	names := []string{"b0", "b1", "b2"}
	const goroutines, per = 32, 8
	schedules := map[string]map[string][]limitd.Decision{}
	for _, mode := range []string{"direct", "batched"} {
		var s *Store
		if mode == "direct" {
			s = stStore(t, rdb)
		} else {
			s = stStore(t, rdb, WithBatching(64))
		}
		for _, n := range names {
			stPut(t, s, n, stSched(1000, 1))
		}
		schedules[mode] = stSchedules(t, s, names, goroutines, per)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range names {
		direct, batched := schedules["direct"][n], schedules["batched"][n]
		if len(direct) != len(batched) || len(batched) == 0 {
			t.Fatalf("%s: %d direct grants, %d batched", n, len(direct), len(batched))
		}
		stCheckSpacing(t, n+" direct", direct, 1e6)
		stCheckSpacing(t, n+" batched", batched, 1e6)
	}

	// After Close a batched store refuses at once, never hangs.
	s := stStore(t, rdb, WithBatching(4))
	stPut(t, s, "c", stSched(1000, 1))
	stAcquire(t, s, "c", 1, limitd.Forever)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_ = s.Close() // twice is fine
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	for i := range 200 {
		if _, err := s.Acquire(ctx, "c", 1, limitd.Forever); !errors.Is(err, ErrClosed) {
			t.Fatalf("Acquire %d after Close: %v, want ErrClosed", i, err)
		}
	}
	_ = rdb.Close()
}

// ---- Redis unavailable, deadlines, NewClient ----

func TestStoreUnavailable(t *testing.T) {
	srv := redistest.Server(t)
	rdb, err := NewClient("redis://" + srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	for _, batched := range []bool{false, true} {
		var s *Store
		if batched {
			s = stStore(t, rdb, WithBatching(8))
		} else {
			s = stStore(t, rdb)
		}
		ctx := t.Context()
		stPut(t, s, "up", stSched(10, 1))
		stAcquire(t, s, "up", 1, limitd.Forever)
		g, err := s.Grant(ctx, "up", 2, limitd.Forever)
		if err != nil {
			t.Fatal(err)
		}
		srv.Stop()
		ops := map[string]func() error{
			"Ping": func() error { return s.Ping(ctx) },
			"Put":  func() error { _, _, err := s.Put(ctx, "up", stSched(20, 1)); return err },
			"Get":  func() error { _, err := s.Get(ctx, "up"); return err },
			"Patch": func() error {
				_, err := s.Patch(ctx, "up", func(c limiter.Config) (limiter.Config, error) { return c, nil })
				return err
			},
			"Delete": func() error { return s.Delete(ctx, "up") },
			"List":   func() error { _, _, err := s.List(ctx, "", 10); return err },
			"Acquire": func() error {
				_, err := s.Acquire(ctx, "up", 1, limitd.Forever)
				return err
			},
			"AcquireMany": func() error { return s.AcquireMany(ctx, []Request{{Name: "up", Permits: 1}})[0].Err },
			"Grant":       func() error { _, err := s.Grant(ctx, "up", 1, limitd.Forever); return err },
			"Release":     func() error { _, err := s.Release(ctx, g, 1); return err },
			"Wait":        func() error { _, err := s.Wait(ctx, "up"); return err },
			"Reset":       func() error { _, err := s.Reset(ctx, "up"); return err },
			"PutTemplate": func() error {
				_, err := s.PutTemplate(ctx, limitd.Template{ID: "t", Pattern: "t*", Limiter: stSched(1, 1)})
				return err
			},
			"GetTemplate":    func() error { _, err := s.GetTemplate(ctx, "t"); return err },
			"Templates":      func() error { _, err := s.Templates(ctx); return err },
			"DeleteTemplate": func() error { return s.DeleteTemplate(ctx, "t") },
			"Resolve": func() error {
				s.templates.invalidate() // else the cached templates answer
				_, err := s.Resolve(ctx, "t1")
				return err
			},
		}
		for name, op := range ops {
			start := time.Now()
			err := op()
			took := time.Since(start)
			if !errors.Is(err, ErrUnavailable) {
				t.Errorf("batched=%v %s with Redis down: %v, want ErrUnavailable", batched, name, err)
			}
			if took > 600*time.Millisecond {
				t.Errorf("batched=%v %s took %v to fail, want well under a second", batched, name, took)
			}
		}
		srv.Restart()
		// The client reconnects once Redis is back (empty: it restarted).
		deadline := time.Now().Add(5 * time.Second)
		for s.Ping(ctx) != nil && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if _, created, err := s.Put(ctx, "up", stSched(10, 1)); err != nil || !created {
			t.Errorf("after restart Put = %v, %v", created, err)
		}
	}
}

// stBlackhole is a Redis that hangs: it accepts connections, and nothing
// comes back.
func stBlackhole(t *testing.T) string {
	t.Helper()
	m, _ := redistest.Mini(t)
	p := faultproxy.Start(t, m.Addr())
	p.Stall()
	return p.Addr()
}

// TestAcquireWithin: on a Redis that never answers, reached by a client
// whose own timeouts are long (5 s to read a reply), every caller gives up at
// its bound, queued or sent, batched or not, with no timer of its own when
// queued. The check is a liveness bound, half the client's timeout, which
// only callers that waited for the client would pass.
func TestAcquireWithin(t *testing.T) {
	rdb, err := NewClient("redis://" + stBlackhole(t) + "?read_timeout=5s&max_retries=0")
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	stHungCallers(t, rdb, 2500*time.Millisecond, func(s *Store) error {
		_, err := s.AcquireWithin(context.Background(), "x", 1, limitd.Forever, 50*time.Millisecond)
		return err
	}, nil)
}

func TestStoreContextDeadline(t *testing.T) {
	rdb, err := NewClient("redis://" + stBlackhole(t) + "?read_timeout=30s")
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	// Many callers at once, each with a 100 ms deadline, far below the
	// client's read timeout (30 s) and a batch's own (2 s): all of them give
	// up by their deadlines. The bound is liveness, not timing: a caller
	// that ignored its deadline would wait 2 s or 30 s.
	stHungCallers(t, rdb, time.Second, func(s *Store) error {
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		_, err := s.Acquire(ctx, "x", 1, limitd.Forever)
		return err
	}, func(batched bool, s *Store) {
		// An expired context fails at once.
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		start := time.Now()
		_, err := s.Acquire(ctx, "x", 1, limitd.Forever)
		if !errors.Is(err, context.Canceled) || time.Since(start) > time.Second {
			t.Errorf("batched=%v: Acquire with a canceled context: %v after %v", batched, err, time.Since(start))
		}
	})
}

// stHungCallers runs 16 callers of call at once on a store over rdb, plain
// and batching, and fails t unless each returns ErrUnavailable within limit
// (a liveness bound); then, if not nil, runs once on each store after.
func stHungCallers(t *testing.T, rdb redis.UniversalClient, limit time.Duration, call func(*Store) error, then func(batched bool, s *Store)) {
	t.Helper()
	for _, batched := range []bool{false, true} {
		var s *Store
		if batched {
			s = stStore(t, rdb, WithBatching(8))
		} else {
			s = stStore(t, rdb)
		}
		var wg sync.WaitGroup
		var slow atomic.Int64
		for range 16 {
			wg.Go(func() {
				start := time.Now()
				err := call(s)
				if took := time.Since(start); took > limit {
					slow.Store(int64(took))
				}
				if !errors.Is(err, ErrUnavailable) {
					t.Errorf("batched=%v: a call on a hung Redis: %v, want ErrUnavailable", batched, err)
				}
			})
		}
		wg.Wait()
		if d := slow.Load(); d != 0 {
			t.Errorf("batched=%v: a call that should give up at once took %v (limit %v)", batched, time.Duration(d), limit)
		}
		if then != nil {
			then(batched, s)
		}
	}
}

func TestNewClient(t *testing.T) {
	for _, c := range []struct {
		url     string
		cluster bool
		addrs   []string
		check   func(*redis.Options) string
	}{
		{url: "redis://127.0.0.1:6390/2", addrs: []string{"127.0.0.1:6390"}, check: func(o *redis.Options) string {
			if o.DB != 2 || o.TLSConfig != nil {
				return fmt.Sprintf("db %d, tls %v", o.DB, o.TLSConfig != nil)
			}
			return ""
		}},
		{url: " rediss://user:secret@cache.example:6390 ", addrs: []string{"cache.example:6390"}, check: func(o *redis.Options) string {
			if o.TLSConfig == nil || o.Username != "user" || o.Password != "secret" {
				return "rediss: no TLS or credentials lost"
			}
			return ""
		}},
		{url: "redis://127.0.0.1:6390?dial_timeout=2s&read_timeout=3s&max_retries=4", addrs: []string{"127.0.0.1:6390"}, check: func(o *redis.Options) string {
			if o.DialTimeout != 2*time.Second || o.ReadTimeout != 3*time.Second || o.MaxRetries != 4 {
				return fmt.Sprintf("URL options overridden: %v %v %d", o.DialTimeout, o.ReadTimeout, o.MaxRetries)
			}
			return ""
		}},
		{url: "127.0.0.1:7000", addrs: []string{"127.0.0.1:7000"}},
		{url: "127.0.0.1:7000,127.0.0.1:7001, [::1]:7002", cluster: true, addrs: []string{"127.0.0.1:7000", "127.0.0.1:7001", "[::1]:7002"}},
	} {
		rdb, err := NewClient(c.url)
		if err != nil {
			t.Errorf("NewClient(%q): %v", c.url, err)
			continue
		}
		switch r := rdb.(type) {
		case *redis.Client:
			o := r.Options()
			if c.cluster || o.Addr != c.addrs[0] {
				t.Errorf("NewClient(%q): single node %s", c.url, o.Addr)
			}
			if c.check == nil && (o.DialTimeout != 500*time.Millisecond || o.ReadTimeout != 500*time.Millisecond || o.WriteTimeout != 500*time.Millisecond || o.MaxRetries != 1) {
				t.Errorf("NewClient(%q): timeouts %v %v %v retries %d", c.url, o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.MaxRetries)
			}
			if !o.ContextTimeoutEnabled {
				t.Errorf("NewClient(%q): context deadlines ignored", c.url)
			}
			if c.check != nil {
				if msg := c.check(o); msg != "" {
					t.Errorf("NewClient(%q): %s", c.url, msg)
				}
			} else if o.DialTimeout != DialTimeout {
				t.Errorf("NewClient(%q): dial timeout %v", c.url, o.DialTimeout)
			}
		case *redis.ClusterClient:
			o := r.Options()
			if !c.cluster || !slices.Equal(o.Addrs, c.addrs) {
				t.Errorf("NewClient(%q): cluster of %v", c.url, o.Addrs)
			}
			if o.DialTimeout != 500*time.Millisecond || o.ReadTimeout != 500*time.Millisecond || o.WriteTimeout != 500*time.Millisecond || o.MaxRetries != 1 || !o.ContextTimeoutEnabled {
				t.Errorf("NewClient(%q): timeouts %v %v %v retries %d", c.url, o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.MaxRetries)
			}
		default:
			t.Errorf("NewClient(%q): %T", c.url, rdb)
		}
		_ = rdb.Close()
	}

	for _, c := range []struct{ url, names string }{
		{"", "empty"},
		{"   ", "empty"},
		{"http://127.0.0.1:6390", `"http"`},
		{"unix:///tmp/redis.sock", `"unix"`},
		{"redis://127.0.0.1:notaport", "port"},
		{"redis://127.0.0.1:6390/notadb", "notadb"},
		{"redis://127.0.0.1:6390?bogus=1", "bogus"},
		{"redis://user:hunter2@127.0.0.1:99999", "99999"},
		{"redis://127.0.0.1:6390,redis://127.0.0.1:6391", "scheme"},
		{"127.0.0.1", `"127.0.0.1"`},
		{"127.0.0.1:7000,,127.0.0.1:7001", "address 2"},
		{"127.0.0.1:7000,localhost", `"localhost"`},
		{"127.0.0.1:7000,127.0.0.1:0", `"0"`},
		{"127.0.0.1:7000,:7001", `":7001"`},
		{"127.0.0.1:7000,127.0.0.1:x", `"x"`},
	} {
		rdb, err := NewClient(c.url)
		if err == nil {
			_ = rdb.Close()
			t.Errorf("NewClient(%q) accepted", c.url)
			continue
		}
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.names) {
			t.Errorf("NewClient(%q) = %v; want ErrInvalid naming %s", c.url, err, c.names)
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("NewClient(%q) error shows the password: %v", c.url, err)
		}
	}
}

// ---- exact time on miniredis ----

// TestStoreExactTimeMiniredis drives a limiter at exact Redis times
// (miniredis SetTime), far in the future and across a long uptime.
func TestStoreExactTimeMiniredis(t *testing.T) {
	m, rdb := redistest.Mini(t)
	s := stStore(t, rdb)
	base := time.Date(2199, 12, 31, 23, 0, 0, 0, time.UTC)
	m.SetTime(base)
	stPut(t, s, "x", limiter.Config{Rate: 3, Burst: limiter.B(1), MaxReserve: limiter.D(48 * time.Hour)}) // slice 333,333,333⅓ ns
	d0 := stAcquire(t, s, "x", 1, limitd.Forever)
	if d0.Now != base.UnixNano() || d0.Start != d0.Now {
		t.Fatalf("first acquire %+v at %d", d0, base.UnixNano())
	}
	// 3 permits a second for 30 simulated days, in big strides: exact.
	var total int64 = 1
	for day := 1; day <= 30; day++ {
		m.SetTime(base.Add(time.Duration(day) * 24 * time.Hour))
		d := stAcquire(t, s, "x", 259200, limitd.Forever) // one day of permits
		if want := d0.Scheduled + total*1e9/3; d.Scheduled != want {
			t.Fatalf("day %d: scheduled %d, want %d (off by %d ns)", day, d.Scheduled, want, d.Scheduled-want)
		}
		total += 259200
	}
	// Reset at an exact time: the next permit is due then.
	at := base.Add(40 * 24 * time.Hour)
	m.SetTime(at)
	w := stWait(t, s, "x")
	if want := at.UnixNano() - (d0.Scheduled + total*1e9/3); w.Wait != want {
		t.Errorf("backlog %d, want %d", w.Wait, want)
	}
	if _, err := s.Reset(t.Context(), "x"); err != nil {
		t.Fatal(err)
	}
	if d := stAcquire(t, s, "x", 1, limitd.Forever); d.Scheduled != at.UnixNano() || d.Delay != 0 {
		t.Errorf("after reset: %+v, want due at %d", d, at.UnixNano())
	}
}

// TestStoreInstanceFirstCallAfterTemplateChange: a template instance whose
// first call after a template change is a reset or a release must end up
// exactly as the model says (limiter.Reconfigure once, then the call).
//
// Regression: lua/reset.lua and lua/release.lua once saved the retuned state
// of an instance that resolve() had moved to the new template version but not
// its parameters (save_params when L.new_params, as acquire_main does): the
// instance kept the old version and cap in Redis, and the next call retuned it
// a second time, rescaling the stored permits by new cap / old cap twice.
func TestStoreInstanceFirstCallAfterTemplateChange(t *testing.T) {
	ten := 10.0
	cfg := func(burstSeconds float64) limiter.Config {
		return limiter.Config{Kind: limiter.KindSmooth, Rate: 10, MaxBurstSeconds: &burstSeconds, InitialPermits: &ten}
	}
	setup := func(t *testing.T) (*Store, limitd.Grant) {
		m, rdb := redistest.Mini(t)
		s := stStore(t, rdb)
		m.SetTime(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)) // time stands still
		if _, err := s.PutTemplate(t.Context(), limitd.Template{ID: "u", Pattern: "u:*", Limiter: cfg(2)}); err != nil {
			t.Fatal(err)
		}
		// 1 s of initial permits stored, one spent: 900 ms stored of at most 2 s.
		g, err := s.Grant(t.Context(), "u:1", 1, limitd.Forever)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.PutTemplate(t.Context(), limitd.Template{ID: "u", Pattern: "u:*", Limiter: cfg(1)}); err != nil {
			t.Fatal(err)
		}
		// At most 1 s now: the stored time is rescaled once, to 450 ms.
		if w := stWait(t, s, "u:1"); w.Wait != 450e6 {
			t.Fatalf("after the template change %v stored, want 450ms", time.Duration(w.Wait))
		}
		return s, g
	}
	t.Run("Reset", func(t *testing.T) {
		s, _ := setup(t)
		if _, err := s.Reset(t.Context(), "u:1"); err != nil {
			t.Fatal(err)
		}
		// Model: a reset stores the new initial permits, 10 × 100 ms.
		if w := stWait(t, s, "u:1"); w.Wait != 1e9 {
			t.Errorf("after the reset %v stored, want 1s", time.Duration(w.Wait))
		}
		stAcquire(t, s, "u:1", 10, limitd.Forever)
		if d := stAcquire(t, s, "u:1", 1, limitd.Forever); d.Delay != 0 {
			t.Errorf("after 10 permits from the reset instance the next waits %v, want 0 (10 were stored)", time.Duration(d.Delay))
		}
	})
	t.Run("Release", func(t *testing.T) {
		s, g := setup(t)
		if _, err := s.Release(t.Context(), g, 1); err != nil {
			t.Fatal(err)
		}
		// The permit cost nothing on the schedule (it was stored), so the
		// hand-back changes no stored time.
		if w := stWait(t, s, "u:1"); w.Wait != 450e6 {
			t.Errorf("after the release %v stored, want 450ms", time.Duration(w.Wait))
		}
	})
}
