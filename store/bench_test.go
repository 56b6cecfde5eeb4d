package store_test

// Benchmarks of Store.Acquire beside github.com/go-redis/redis_rate/v10, on the
// same redis-server in the same run (DESIGN §9). Every permit is granted (rate
// 1e6/s, burst inf, max wait 0), so they measure the cost of a decision, not
// waiting, and at that rate redis_rate writes on every call (benchPeerWrites).
//
//	go test -run='^$' -bench='BenchmarkAcquire$' -benchtime=2s -count=5 ./store/ | tee /tmp/store-bench.txt
//	benchstat /tmp/store-bench.txt
//
// Names are BenchmarkAcquire/<contender>/<goroutines>/<keys>:
//   - limitd: Store.Acquire, one round trip a call (FCALL on Redis ≥ 7);
//     limitd-batched: the same through WithBatching(64); limitd-eval: the
//     same as scripts (EVALSHA), as on Redis < 7; redis_rate: Limiter.Allow
//     with PerSecond(1e6).
//   - g1: one caller in a loop; g32: RunParallel with 32 goroutines (rounded
//     up to a multiple of GOMAXPROCS).
//   - hot: one key; 10k-keys: keys taken round-robin from 10,000 (for limitd
//     named limiters made by Put); 10k-tpl (limitd only): the same names as
//     instances of the template "k:*", created before timing starts; 1M-tpl
//     (limitd) and 1M-keys (redis_rate): round-robin over 1,000,000 names,
//     most touched for the first time in a run.
//
// Metrics besides ns/op: ops/s, the throughput to compare; srv-us/call, the
// server time of one script or function call (EVALSHA and FCALL in INFO
// commandstats, reset before each timed loop), which includes the Redis
// commands the script issues; srv-us/op, the same per acquire, less than
// srv-us/call where one call decides a batch;
// srv-cpu-us/op (Linux only), the CPU time redis-server spent per acquire,
// network I/O included, which is what caps throughput once Redis's one thread
// is busy; cli-cpu-us/op (Linux only, 10 ms ticks), the CPU time of this
// process per acquire, which competes with Redis for the same cores.
// commandstats time is wall time, so a busy machine inflates it; CPU times
// much less.
//
// The machines are small and noisy: compare medians and their ratios, never a
// lone time. -count runs a variant's repetitions back to back, so load that
// comes and goes favours whichever contender ran in a quiet moment; on a shared
// machine repeat the process instead, which interleaves the contenders:
//
//	for i in 1 2 3 4 5; do go test -run='^$' -bench='BenchmarkAcquire$' -benchtime=2s -count=1 ./store/; done | tee /tmp/store-bench.txt
//
// BenchmarkAcquireVs goes further for the ratio of limitd to redis_rate: the
// two alternate in rounds of a quarter second.

import (
	"context"
	"errors"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/internal/testkit/redistest"
	"github.com/limitd/limitd/internal/testkit/rounds"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

const (
	// benchRate is every contender's rate: far above what one key sees here
	// (never a denial, never a wait), and low enough that redis_rate's
	// floating-point GCRA writes on every call (above ~1e7/s its increment is
	// below its clock's precision and it decides nothing): benchPeerWrites
	// checks it.
	benchRate       = 1e6
	benchKeys       = 10_000
	benchBigKeys    = 1_000_000
	benchGoroutines = 32
)

// benchAcquire takes one permit for key; a denial is an error, since at
// benchRate none is expected.
type benchAcquire func(ctx context.Context, key string) error

var errBenchDenied = errors.New("denied at a rate that should grant everything")

type benchKeySet struct {
	name    string
	keys    benchNames
	acquire benchAcquire
}

// benchNames are key names kept as one string and where each ends, so that
// a million of them give the garbage collector one pointer to scan (as a
// []string, every GC cycle of the process had 1,000,000 strings to scan,
// whatever benchmark it ran).
type benchNames struct {
	all  string
	ends []int32
}

func benchNamesOf(names ...string) benchNames {
	var b strings.Builder
	ends := make([]int32, len(names))
	for i, n := range names {
		b.WriteString(n)
		ends[i] = int32(b.Len())
	}
	return benchNames{all: b.String(), ends: ends}
}

// at is the name i % len: a substring, no allocation.
func (b benchNames) at(i uint64) string {
	i %= uint64(len(b.ends))
	start := int32(0)
	if i > 0 {
		start = b.ends[i-1]
	}
	return b.all[start:b.ends[i]]
}

type benchContender struct {
	name string
	sets []benchKeySet
}

// BenchmarkAcquire runs every contender against one redis-server, started
// here and stopped by redistest when BenchmarkAcquire returns. go test repeats
// each leaf benchmark -count times, not this function, so one server serves
// every variant and every repetition of the process.
func BenchmarkAcquire(b *testing.B) {
	rdb, contenders := benchContenders(b)
	for _, c := range contenders {
		b.Run(c.name, func(b *testing.B) {
			for _, g := range []int{1, benchGoroutines} {
				b.Run("g"+strconv.Itoa(g), func(b *testing.B) {
					for _, ks := range c.sets {
						b.Run(ks.name, func(b *testing.B) { benchLoop(b, rdb, g, ks) })
					}
				})
			}
		})
	}
}

// benchContenders starts a redis-server, stopped when b ends, fills it with
// the limiters and templates of the contenders and returns them.
func benchContenders(b *testing.B) (*redis.Client, []benchContender) {
	rdb := redistest.Server(b).Client()
	ctx := context.Background()
	names := benchKeyNames()
	hot := []string{"hot"}

	// Named limiters and template instances live under their own prefixes, so
	// that the named ones see no templates at all.
	named := store.New(rdb, store.WithPrefix("bench-named"))
	benchPut(b, named, append([]string{"hot"}, names...), benchConfig)
	tpl := store.New(rdb, store.WithPrefix("bench-tpl"))
	if _, err := tpl.PutTemplate(ctx, limitd.Template{ID: "k", Pattern: "k:*", Limiter: benchConfig}); err != nil {
		b.Fatal(err)
	}
	benchTouch(b, tpl, names)
	namedBatched := benchBatched(b, rdb, "bench-named")
	tplBatched := benchBatched(b, rdb, "bench-tpl")
	namedEval := store.New(rdb, store.WithPrefix("bench-named"), store.WithScriptsOnly())
	tplEval := store.New(rdb, store.WithPrefix("bench-tpl"), store.WithScriptsOnly())

	bigNames := make([]string, benchBigKeys) // dropped once packed
	for i := range bigNames {
		bigNames[i] = "k:big:" + strconv.Itoa(i)
	}
	hotKeys, tenK, big := benchNamesOf(hot...), benchNamesOf(names...), benchNamesOf(bigNames...)
	limitd := func(named, tpl *store.Store) []benchKeySet {
		return []benchKeySet{
			{"hot", hotKeys, benchStoreAcquire(named)},
			{"10k-keys", tenK, benchStoreAcquire(named)},
			{"10k-tpl", tenK, benchStoreAcquire(tpl)},
			{"1M-tpl", big, benchStoreAcquire(tpl)},
		}
	}
	rrl := redis_rate.NewLimiter(rdb)
	benchPeerWrites(b, rdb, rrl)
	rr := benchRedisRate(rrl)
	contenders := []benchContender{
		{"limitd", limitd(named, tpl)},
		{"limitd-batched", limitd(namedBatched, tplBatched)},
		{"limitd-eval", limitd(namedEval, tplEval)},
		{"redis_rate", []benchKeySet{{"hot", hotKeys, rr}, {"10k-keys", tenK, rr}, {"1M-keys", big, rr}}},
	}
	return rdb, contenders
}

// benchPeerWrites fails b unless a redis_rate Allow at benchRate changes its
// key in Redis: a peer that does not write decides nothing, and a comparison
// with it says nothing.
func benchPeerWrites(b testing.TB, rdb *redis.Client, l *redis_rate.Limiter) {
	b.Helper()
	ctx := context.Background()
	for range 2 {
		before := rdb.Get(ctx, "rate:bench-peer-check").Val()
		if r, err := l.Allow(ctx, "bench-peer-check", redis_rate.PerSecond(benchRate)); err != nil || r.Allowed != 1 {
			b.Fatalf("redis_rate Allow: %+v, %v", r, err)
		}
		if rdb.Get(ctx, "rate:bench-peer-check").Val() == before {
			b.Fatalf("redis_rate at %g/s left its key unchanged: it decided nothing", float64(benchRate))
		}
	}
}

// benchRound is how long each contender runs in a round of BenchmarkAcquireVs.
const benchRound = 250 * time.Millisecond

// BenchmarkAcquireVs measures limitd against redis_rate in turns, for
// figures that hold on a shared, noisy machine: each iteration is a round in
// which each of the two runs for benchRound on the same redis-server, the one
// going first alternating, and the figures are medians over the rounds. Load
// that comes and goes hits both sides of a round alike, so the median ratio
// moves much less than the ratio of two separate runs.
//
//	go test -run='^$' -bench=BenchmarkAcquireVs -benchtime=40x ./store/
//
// Names are BenchmarkAcquireVs/<goroutines>/<keys> as for BenchmarkAcquire;
// limitd is Store.Acquire, through WithBatching(64) with 32 goroutines, and
// redis_rate is Limiter.Allow. ns/op is the time of a round. Metrics: ratio,
// the median of the rounds' limitd/redis_rate throughput (the figure to
// read); limitd-ops/s and redis_rate-ops/s, the median throughputs;
// srv-ratio, the median of the rounds' limitd/redis_rate server time per
// acquire (INFO commandstats, EVALSHA and FCALL).
func BenchmarkAcquireVs(b *testing.B) {
	rdb, contenders := benchContenders(b)
	set := func(contender, keys string) benchKeySet {
		for _, c := range contenders {
			if c.name == contender {
				for _, ks := range c.sets {
					if ks.name == keys {
						return ks
					}
				}
			}
		}
		b.Fatalf("no contender %s with keys %s", contender, keys)
		return benchKeySet{}
	}
	for _, g := range []int{1, benchGoroutines} {
		limitd := "limitd"
		if g > 1 {
			limitd = "limitd-batched"
		}
		b.Run("g"+strconv.Itoa(g), func(b *testing.B) {
			for _, keys := range []string{"hot", "10k-keys"} {
				sides := [2]benchKeySet{set(limitd, keys), set("redis_rate", keys)}
				b.Run(keys, func(b *testing.B) { benchVs(b, rdb, g, sides, benchVsNames) })
			}
			// template instances: 10,000 that exist, and 1,000,000 names of
			// which a run touches a few hundred thousand, most for the first
			// time (instances created, as redis_rate's keys are)
			b.Run("10k-tpl", func(b *testing.B) {
				benchVs(b, rdb, g, [2]benchKeySet{set(limitd, "10k-tpl"), set("redis_rate", "10k-keys")}, benchVsNames)
			})
			b.Run("1M-tpl", func(b *testing.B) {
				benchVs(b, rdb, g, [2]benchKeySet{set(limitd, "1M-tpl"), set("redis_rate", "1M-keys")}, benchVsNames)
			})
		})
	}
}

// BenchmarkFloorCost measures what the failover floors (floors.go) cost a
// lone caller, whose every acquire carries its limiter's floor and whose
// Redis checks it: Store.Acquire on named limiters, one goroutine, with
// floors (the default) against the same store without (withFloorCap(0)), in
// alternating rounds as BenchmarkAcquireVs. ratio is the median of the
// rounds' with/without throughput, srv-ratio of their Redis time per acquire.
//
//	go test -run='^$' -bench=BenchmarkFloorCost -benchtime=20x ./store/
func BenchmarkFloorCost(b *testing.B) {
	rdb := redistest.Server(b).Client()
	names := benchKeyNames()
	all := append([]string{"hot"}, names...)
	floors := store.New(rdb, store.WithPrefix("bench-floor"))
	benchPut(b, floors, all, benchConfig)
	none := store.New(rdb, store.WithPrefix("bench-floor"), store.WithFloorCap(0))
	// Every name has its floor before timing starts, and only one store
	// keeps any.
	benchTouch(b, floors, all)
	benchTouch(b, none, all)
	if n := store.FloorCount(floors); n != len(all) {
		b.Fatalf("the store with floors keeps %d, want %d", n, len(all))
	}
	if n := store.FloorCount(none); n != 0 {
		b.Fatalf("the store without floors keeps %d", n)
	}
	for _, set := range []struct {
		name  string
		names benchNames
	}{{"hot", benchNamesOf("hot")}, {"10k-keys", benchNamesOf(names...)}} {
		sides := [2]benchKeySet{
			{set.name, set.names, benchStoreAcquire(floors)},
			{set.name, set.names, benchStoreAcquire(none)},
		}
		b.Run(set.name, func(b *testing.B) {
			benchVs(b, rdb, 1, sides, [2]string{"floors", "no-floors"})
		})
	}
}

// benchVsNames are the sides of BenchmarkAcquireVs.
var benchVsNames = [2]string{"limitd", "redis_rate"}

// benchVs runs b.N rounds of the two sides (limitd, then the peer; their
// names label the throughputs reported) and reports the medians.
func benchVs(b *testing.B, rdb *redis.Client, goroutines int, sides [2]benchKeySet, names [2]string) {
	ctx := context.Background()
	for _, ks := range sides { // load the scripts, open connections
		if err := ks.acquire(ctx, ks.keys.at(0)); err != nil {
			b.Fatal(err)
		}
	}
	var ops, srv [2][]float64
	var ratio, srvRatio []float64
	for i := range b.N {
		var round [2]benchRoundResult
		for k := range 2 {
			side := (i + k) % 2 // alternate which side goes first
			r, err := benchRoundRun(ctx, rdb, goroutines, sides[side])
			if err != nil {
				b.Fatal(err)
			}
			round[side] = r
		}
		for side := range 2 {
			ops[side] = append(ops[side], round[side].opsPerSec)
			srv[side] = append(srv[side], round[side].srvUSPerOp)
		}
		ratio = append(ratio, round[0].opsPerSec/round[1].opsPerSec)
		srvRatio = append(srvRatio, round[0].srvUSPerOp/round[1].srvUSPerOp)
	}
	b.ReportMetric(rounds.Median(ratio), "ratio")
	b.ReportMetric(rounds.Median(ops[0]), names[0]+"-ops/s")
	b.ReportMetric(rounds.Median(ops[1]), names[1]+"-ops/s")
	b.ReportMetric(rounds.Median(srvRatio), "srv-ratio")
}

type benchRoundResult struct {
	opsPerSec  float64
	srvUSPerOp float64 // server time per acquire
}

// benchRoundRun runs ks with the given number of goroutines for benchRound.
func benchRoundRun(ctx context.Context, rdb *redis.Client, goroutines int, ks benchKeySet) (benchRoundResult, error) {
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		return benchRoundResult{}, err
	}
	var (
		stop  atomic.Bool
		total atomic.Int64
		next  atomic.Uint64
		wg    sync.WaitGroup
		errs  = make(chan error, goroutines)
	)
	start := time.Now()
	for range goroutines {
		wg.Go(func() {
			n := int64(0)
			for !stop.Load() {
				i := next.Add(1)
				if err := ks.acquire(ctx, ks.keys.at(i)); err != nil {
					errs <- err
					break
				}
				n++
			}
			total.Add(n)
		})
	}
	time.Sleep(benchRound)
	stop.Store(true)
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return benchRoundResult{}, err
	}
	us, calls, err := benchScriptCost(ctx, rdb)
	if err != nil {
		return benchRoundResult{}, err
	}
	n := float64(total.Load())
	return benchRoundResult{opsPerSec: n / elapsed.Seconds(), srvUSPerOp: us * float64(calls) / n}, nil
}

// benchConfig is every limitd contender's limiter. Burst inf: no pace
// between grants, as redis_rate's PerSecond, whose burst is the rate. A
// batched call decides its acquires at one time, where a pace would deny all
// but the first.
var benchConfig = limiter.Config{Rate: benchRate, Burst: limiter.B(math.Inf(1))}

// benchKeyNames are the benchKeys names "k:0", "k:1", ….
func benchKeyNames() []string {
	names := make([]string, benchKeys)
	for i := range names {
		names[i] = "k:" + strconv.Itoa(i)
	}
	return names
}

// benchLoop times b.N acquires by the given number of goroutines and reports
// throughput, CPU time per acquire and the server's time per script call.
func benchLoop(b *testing.B, rdb *redis.Client, goroutines int, ks benchKeySet) {
	ctx := context.Background()
	// One untimed call loads the script and opens a connection, so that the
	// stats below count only EVALSHAs of the timed loop.
	if err := ks.acquire(ctx, ks.keys.at(0)); err != nil {
		b.Fatal(err)
	}
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	meters := []benchCPUMeter{
		benchMeter(benchServerCPU(ctx, rdb), "srv-cpu-us/op"),
		benchMeter(benchClientCPU(), "cli-cpu-us/op"),
	}
	b.ReportAllocs()
	b.ResetTimer()
	if goroutines == 1 {
		for i := range b.N {
			if err := ks.acquire(ctx, ks.keys.at(uint64(i))); err != nil {
				b.Fatal(err)
			}
		}
	} else {
		procs := runtime.GOMAXPROCS(0)
		b.SetParallelism((goroutines + procs - 1) / procs)
		var next atomic.Uint64
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				i := next.Add(1)
				if err := ks.acquire(ctx, ks.keys.at(i)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
	for _, m := range meters {
		m.report(b)
	}
	us, calls, err := benchScriptCost(ctx, rdb)
	if err != nil {
		b.Fatal(err)
	}
	if calls == 0 {
		b.Fatalf("INFO commandstats counts no script call for %d acquires", b.N)
	}
	b.ReportMetric(us, "srv-us/call")
	// A batched call decides many acquires: its server time per acquire.
	b.ReportMetric(us*float64(calls)/float64(b.N), "srv-us/op")
}

func benchStoreAcquire(s *store.Store) benchAcquire {
	return func(ctx context.Context, key string) error {
		d, err := s.Acquire(ctx, key, 1, 0)
		if err == nil && !d.Granted {
			err = errBenchDenied
		}
		return err
	}
}

func benchRedisRate(l *redis_rate.Limiter) benchAcquire {
	limit := redis_rate.PerSecond(benchRate)
	return func(ctx context.Context, key string) error {
		r, err := l.Allow(ctx, key, limit)
		if err == nil && r.Allowed != 1 {
			err = errBenchDenied
		}
		return err
	}
}

func benchBatched(b *testing.B, rdb *redis.Client, prefix string) *store.Store {
	s := store.New(rdb, store.WithPrefix(prefix), store.WithBatching(64))
	b.Cleanup(func() { _ = s.Close() })
	return s
}

// benchPut creates the limiters, a few at a time so that setup stays short.
func benchPut(b *testing.B, s *store.Store, names []string, cfg limiter.Config) {
	b.Helper()
	var (
		wg   sync.WaitGroup
		next atomic.Int64
		errs = make(chan error, 16)
	)
	for range 16 {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(len(names)); i = next.Add(1) - 1 {
				if _, _, err := s.Put(context.Background(), names[i], cfg); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
}

// benchTouch acquires once on every name, so that template instances exist
// before timing starts.
func benchTouch(b *testing.B, s *store.Store, names []string) {
	b.Helper()
	for chunk := range slices.Chunk(names, 500) {
		reqs := make([]store.Request, len(chunk))
		for i, n := range chunk {
			reqs[i] = store.Request{Name: n, Permits: 1}
		}
		for i, o := range s.AcquireMany(context.Background(), reqs) {
			if o.Err != nil || !o.Granted {
				b.Fatalf("%s: granted %v, err %v", chunk[i], o.Granted, o.Err)
			}
		}
	}
}

// TestPeerWrites: at the benchmarks' rate the peer they compare with,
// redis_rate, writes its key on every call, as benchPeerWrites checks before
// every benchmark; and at 1e9/s, where it would not, the check fails.
func TestPeerWrites(t *testing.T) {
	t.Parallel()
	rdb := redistest.Server(t).Client()
	benchPeerWrites(t, rdb, redis_rate.NewLimiter(rdb))
	ctx := context.Background()
	l := redis_rate.NewLimiter(rdb)
	if _, err := l.Allow(ctx, "fast", redis_rate.PerSecond(1e9)); err != nil {
		t.Fatal(err)
	}
	before := rdb.Get(ctx, "rate:fast").Val()
	if _, err := l.Allow(ctx, "fast", redis_rate.PerSecond(1e9)); err != nil {
		t.Fatal(err)
	}
	if after := rdb.Get(ctx, "rate:fast").Val(); after != before {
		t.Errorf("redis_rate at 1e9/s wrote its key (%q → %q): the rate no longer shows a peer that decides nothing", before, after)
	}
}

// TestBenchNames: the packed names give back each name, round-robin.
func TestBenchNames(t *testing.T) {
	t.Parallel()
	names := []string{"hot", "k:0", "", "k:big:999999"}
	b := benchNamesOf(names...)
	for i := range uint64(2 * len(names)) {
		if got, want := b.at(i), names[i%uint64(len(names))]; got != want {
			t.Errorf("at(%d) = %q, want %q", i, got, want)
		}
	}
}
