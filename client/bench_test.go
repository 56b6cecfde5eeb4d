package client_test

// The cost of a permit from the client's pool, beside what a user would pick
// instead, in one run on one redis-server (DESIGN §9):
//
//   - limitd-pool: Limiter.Allow and Limiter.Wait on a limiter shared through
//     Redis, at 1e8 permits/s, a rate no caller here reaches: every call is
//     granted from the local pool, and Redis is asked only for the next grant
//     (one round trip per ~20 ms of the caller's demand).
//   - xtime-rate: golang.org/x/time/rate Allow, a purely local limiter that
//     shares nothing: the cost to match. Goal: the pool within 2× of it,
//     while sharing one schedule across processes.
//   - redis-rate: github.com/go-redis/redis_rate/v10 Allow on the same
//     redis-server, one round trip per permit, at 1e6/s (cbPeerRate: a rate
//     at which it writes, checked): the throughput to beat.
//     Goal: the pool at least 100× its permits/s.
//
// Each contender runs from one goroutine (g1) and from 8 goroutines per CPU
// (p8, RunParallel), where redis_rate gains from pipelined round trips and
// the pool pays for its lock. Metrics besides ns/op: permits/s, the figure to
// compare, and for the pool calls/permit, the round trips per permit. The
// machines are small and noisy: compare medians of -count=5 and their ratios.
//
//	go test -run='^$' -bench=BenchmarkPermit -count=5 ./client/ | tee /tmp/client-bench.txt
//	benchstat /tmp/client-bench.txt

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/client"
	"github.com/limitd/limitd/client/redisclient"
	"github.com/limitd/limitd/internal/testkit/redistest"
	"github.com/limitd/limitd/internal/testkit/rounds"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

const cbRate = 1e8 // permits/s: far above what one process can take, so nothing waits

// cbPeerRate is redis_rate's rate: at 1e8/s its floating-point GCRA would
// never write (the increment is below its clock's precision), deciding
// nothing; at 1e6/s it writes on every call, which cbPeerWrites checks, and
// one round trip per permit stays far below it, so it never refuses.
const cbPeerRate = 1e6

// cbPeerWrites fails b unless a redis_rate Allow at lim changes its key in
// Redis: a peer that does not write makes no decision worth comparing.
func cbPeerWrites(b testing.TB, rdb *redis.Client, rr *redis_rate.Limiter, key string, lim redis_rate.Limit) {
	b.Helper()
	ctx := context.Background()
	before := rdb.Get(ctx, "rate:"+key).Val()
	if res, err := rr.Allow(ctx, key, lim); err != nil || res.Allowed != 1 {
		b.Fatalf("redis_rate Allow: %+v, %v", res, err)
	}
	if rdb.Get(ctx, "rate:"+key).Val() == before {
		b.Fatalf("redis_rate at %d/s left its key unchanged: it decided nothing", lim.Rate)
	}
}

// cbTransport is the client's Redis transport, counting grants.
type cbTransport struct {
	client.Transport
	grants atomic.Int64
}

func (t *cbTransport) Grant(ctx context.Context, name string, k int64, maxWait time.Duration) (limitd.Grant, error) {
	t.grants.Add(1)
	return t.Transport.Grant(ctx, name, k, maxWait)
}

// cbPermit takes one permit; ok false means the contender said no.
type cbPermit func(ctx context.Context) (ok bool, err error)

// cbReport adds the permits/s metric (and calls/permit if calls is not nil).
func cbReport(b *testing.B, denied int64, calls *atomic.Int64) {
	b.Helper()
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(int64(b.N)-denied)/s, "permits/s")
	}
	if calls != nil {
		b.ReportMetric(float64(calls.Load())/float64(b.N), "calls/permit")
	}
	if denied > 0 {
		b.ReportMetric(float64(denied)/float64(b.N), "denied/op")
	}
}

// cbRun takes b.N permits and returns how many were granted.
func cbRun(b *testing.B, parallel bool, take cbPermit, calls *atomic.Int64) int64 {
	b.Helper()
	ctx := context.Background()
	var denied atomic.Int64
	if !parallel {
		var d int64
		for b.Loop() {
			ok, err := take(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if !ok {
				d++
			}
		}
		cbReport(b, d, calls)
		return int64(b.N) - d
	}
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var d int64
		for pb.Next() {
			ok, err := take(ctx)
			if err != nil {
				b.Error(err)
				return
			}
			if !ok {
				d++
			}
		}
		denied.Add(d)
	})
	cbReport(b, denied.Load(), calls)
	return int64(b.N) - denied.Load()
}

func cbPermits(b *testing.B, st *store.Store) int64 {
	b.Helper()
	w, err := st.Wait(context.Background(), "cb-pool")
	if err != nil {
		b.Fatal(err)
	}
	return w.Permits
}

// cbServer starts a redis-server for b with the pool's limiter, cb-pool, and
// returns it, a store on it and a redis_rate limiter on it, checked to write
// at cbPeerRate.
func cbServer(b *testing.B) (*redis.Client, *store.Store, *redis_rate.Limiter, redis_rate.Limit) {
	b.Helper()
	rdb := redistest.Server(b).Client()
	st := store.New(rdb)
	if _, _, err := st.Put(context.Background(), "cb-pool", limiter.Config{Rate: cbRate, Burst: limiter.B(1.1)}); err != nil {
		b.Fatal(err)
	}
	rr, lim := redis_rate.NewLimiter(rdb), redis_rate.PerSecond(cbPeerRate)
	cbPeerWrites(b, rdb, rr, "cb-redis-rate", lim)
	return rdb, st, rr, lim
}

func BenchmarkPermit(b *testing.B) {
	_, st, rr, rrLimit := cbServer(b)
	ctx := context.Background()

	// pool returns a fresh client's handle for one benchmark run, and a check
	// to call after the run: with the client closed (unused permits handed
	// back) the store must count exactly the permits the run was granted, so
	// none came from the local fallback.
	pool := func(b *testing.B) (*client.Limiter, *cbTransport, func(granted int64)) {
		tr := &cbTransport{Transport: redisclient.NewTransport(st)}
		c := client.NewWithTransport(tr)
		b.Cleanup(func() { _ = c.Close() })
		l, err := c.Limiter("cb-pool")
		if err != nil {
			b.Fatal(err)
		}
		before := cbPermits(b, st)
		if _, err := l.Wait(ctx); err != nil { // the first grant, outside the timing
			b.Fatal(err)
		}
		tr.grants.Store(0)
		return l, tr, func(granted int64) {
			b.StopTimer()
			if err := c.Close(); err != nil {
				b.Fatal(err)
			}
			if got := cbPermits(b, st) - before; got != granted {
				b.Fatalf("the store counts %d permits for %d granted by the pool", got, granted)
			}
		}
	}

	for _, par := range []struct {
		name     string
		parallel bool
	}{{"g1", false}, {"p8", true}} {
		b.Run("contender=limitd-pool-allow/"+par.name, func(b *testing.B) {
			l, tr, check := pool(b)
			check(1 + cbRun(b, par.parallel, func(context.Context) (bool, error) { return l.Allow(), nil }, &tr.grants))
		})
		b.Run("contender=limitd-pool-wait/"+par.name, func(b *testing.B) {
			l, tr, check := pool(b)
			check(1 + cbRun(b, par.parallel, func(ctx context.Context) (bool, error) {
				_, err := l.Wait(ctx)
				return err == nil, err
			}, &tr.grants))
		})
		b.Run("contender=xtime-rate-allow/"+par.name, func(b *testing.B) {
			// A finite limit and bucket (not rate.Inf, which short-cuts), so
			// that it really computes tokens.
			lim := rate.NewLimiter(rate.Limit(cbRate), int(cbRate))
			cbRun(b, par.parallel, func(context.Context) (bool, error) { return lim.Allow(), nil }, nil)
		})
		b.Run("contender=redis-rate-allow/"+par.name, func(b *testing.B) {
			cbRun(b, par.parallel, func(ctx context.Context) (bool, error) {
				res, err := rr.Allow(ctx, "cb-redis-rate", rrLimit)
				if err != nil {
					return false, err
				}
				return res.Allowed > 0, nil
			}, nil)
		})
	}
}

// BenchmarkPermitVs is BenchmarkPermit side by side in alternating rounds
// (internal/testkit/rounds): 100 ms per contender per round, the one going first
// rotating, medians over the rounds. pool/xtime is the pool's time per
// permit over x/time/rate's local Allow (goal ≤ 1.0), pool/redis_rate over a
// writing redis_rate's (its inverse is the pool's permits per redis_rate
// permit; goal ≥ 100×).
//
//	go test -run='^$' -bench=BenchmarkPermitVs -benchtime=20x ./client/
func BenchmarkPermitVs(b *testing.B) {
	rdb, _, rr, rrLimit := cbServer(b)
	ctx := context.Background()
	for _, g := range []struct {
		name string
		n    int
	}{{"g1", 1}, {"p8", 8 * runtime.GOMAXPROCS(0)}} {
		b.Run(g.name, func(b *testing.B) {
			c := redisclient.New(rdb)
			b.Cleanup(func() { _ = c.Close() })
			l, err := c.Limiter("cb-pool")
			if err != nil {
				b.Fatal(err)
			}
			x := rate.NewLimiter(rate.Limit(cbRate), int(cbRate))
			rounds.Run(b, g.n, 100*time.Millisecond,
				rounds.Side{Name: "pool", Op: l.Allow},
				rounds.Side{Name: "xtime", Op: x.Allow},
				rounds.Side{Name: "redis_rate", Op: func() bool {
					res, err := rr.Allow(ctx, "cb-redis-rate", rrLimit)
					return err == nil && res.Allowed == 1
				}})
		})
	}
}
