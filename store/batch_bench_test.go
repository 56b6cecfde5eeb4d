package store_test

import (
	"context"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/limitd/limitd/internal/testkit/redistest"
	"github.com/limitd/limitd/store"
)

// BenchmarkBatchSize measures what batching does at the concurrencies a
// shared limitd sees: Store.Acquire through WithBatching(64) by 16, 32 and
// 64 goroutines in a loop, on one named limiter and round-robin over
// 10,000, on a redis-server of its own on loopback.
//
//	go test -run='^$' -bench=BenchmarkBatchSize -benchtime=2s ./store/
//
// Metrics: acq/call, the acquires one script or function call decided on
// average (the batch size: INFO commandstats' calls against b.N), which is
// what keeps Redis's time per acquire low; srv-us/op, Redis's time per
// acquire (commandstats, wall time), and srv-cpu-us/op, redis-server's CPU
// time per acquire, network I/O included, which a busy machine moves less;
// cli-cpu-us/op, this process's; ops/s; p50-us and p99-us, the time a caller
// waited for its decision.
func BenchmarkBatchSize(b *testing.B) {
	rdb := redistest.Server(b).Client()
	names := benchKeyNames()
	named := store.New(rdb, store.WithPrefix("bench-size"))
	benchPut(b, named, append([]string{"hot"}, names...), benchConfig)
	s := store.New(rdb, store.WithPrefix("bench-size"), store.WithBatching(64))
	b.Cleanup(func() { _ = s.Close() })
	acquire := benchStoreAcquire(s)
	for _, g := range []int{16, 32, 64} {
		b.Run("g"+strconv.Itoa(g), func(b *testing.B) {
			for _, ks := range []struct {
				name string
				keys benchNames
			}{{"hot", benchNamesOf("hot")}, {"10k-keys", benchNamesOf(names...)}} {
				b.Run(ks.name, func(b *testing.B) {
					ctx := context.Background()
					if err := acquire(ctx, ks.keys.at(0)); err != nil {
						b.Fatal(err)
					}
					if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
						b.Fatal(err)
					}
					var (
						mu    sync.Mutex
						took  []int64
						index uint64
					)
					meters := []benchCPUMeter{
						benchMeter(benchServerCPU(ctx, rdb), "srv-cpu-us/op"),
						benchMeter(benchClientCPU(), "cli-cpu-us/op"),
					}
					procs := runtime.GOMAXPROCS(0)
					b.SetParallelism((g + procs - 1) / procs)
					b.ResetTimer()
					b.RunParallel(func(pb *testing.PB) {
						var mine []int64
						mu.Lock()
						index++
						i := index * 7919 // each goroutine its own names
						mu.Unlock()
						for pb.Next() {
							i++
							start := time.Now()
							if err := acquire(ctx, ks.keys.at(i)); err != nil {
								b.Error(err)
								return
							}
							mine = append(mine, int64(time.Since(start)))
						}
						mu.Lock()
						took = append(took, mine...)
						mu.Unlock()
					})
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
					b.ReportMetric(float64(b.N)/float64(calls), "acq/call")
					b.ReportMetric(us*float64(calls)/float64(b.N), "srv-us/op")
					if len(took) > 0 {
						slices.Sort(took)
						b.ReportMetric(float64(took[len(took)/2])/1e3, "p50-us")
						b.ReportMetric(float64(took[len(took)*99/100])/1e3, "p99-us")
					}
				})
			}
		})
	}
}
