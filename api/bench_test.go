package api_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/api"
	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/internal/testkit/redistest"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

// The two benchmarks measure the same acquire, one permit of a limiter that
// always grants, against a private real redis-server: directly through the
// store, and as POST /v1/limiters/{name}/acquire through the real handler on
// a loopback server with keep-alive. Both run 16 goroutines per CPU (32 on
// two cores), with the store batching concurrent acquires into pipelines as
// limitd serve does (batched) and without (unbatched: one round trip each).
// Compare their ops/s in one run:
//
//	go test -run='^$' -bench=. -benchtime=2s -count=3 ./api/
//
// p99-µs is the 99th percentile of one call: the store call for the store,
// the whole server-side request (middleware, JSON, store call) for HTTP.

const benchParallelism = 16

// benchStores runs bench once over a batching store and once over a plain
// one, both on one redis-server, with a limiter "bench" that always grants.
func benchStores(b *testing.B, bench func(*testing.B, *store.Store)) {
	rdb := redistest.Server(b).Client()
	for _, c := range []struct {
		name string
		opts []store.Option
	}{{"batched", []store.Option{store.WithBatching(64)}}, {"unbatched", nil}} {
		st := store.New(rdb, c.opts...)
		b.Cleanup(func() { _ = st.Close() })
		if _, _, err := st.Put(context.Background(), "bench", limiter.Config{Rate: limiter.MaxRate, Burst: limiter.B(limiter.Inf)}); err != nil {
			b.Fatal(err)
		}
		b.Run(c.name, func(b *testing.B) { bench(b, st) })
	}
}

func BenchmarkStoreAcquire(b *testing.B) { benchStores(b, storeAcquire) }

func BenchmarkHTTPAcquire(b *testing.B) { benchStores(b, httpAcquire) }

func storeAcquire(b *testing.B, st *store.Store) {
	lat := newLatencies(b.N)
	ctx := context.Background()
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			t := time.Now()
			d, err := st.Acquire(ctx, "bench", 1, limitd.Forever)
			lat.add(time.Since(t))
			if err != nil || !d.Granted {
				b.Errorf("acquire: %+v, %v", d, err)
				return
			}
		}
	})
	lat.report(b, time.Since(start))
}

func httpAcquire(b *testing.B, st *store.Store) {
	lat := newLatencies(b.N)
	h := api.New(api.Options{Service: core.New(st, core.Options{})})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t := time.Now()
		h.ServeHTTP(w, r)
		lat.add(time.Since(t))
	}))
	defer srv.Close()
	tr := &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	url := srv.URL + "/v1/limiters/bench/acquire"
	body := []byte(`{"permits":1}`)

	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := client.Post(url, "application/json", bytes.NewReader(body))
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body) // read to the end: the connection is reused
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
	lat.report(b, time.Since(start))
}

// latencies collects one duration per operation without a lock.
type latencies struct {
	d []time.Duration
	n atomic.Int64
}

func newLatencies(n int) *latencies { return &latencies{d: make([]time.Duration, n)} }

func (l *latencies) add(d time.Duration) {
	if i := l.n.Add(1) - 1; i < int64(len(l.d)) {
		l.d[i] = d
	}
}

func (l *latencies) report(b *testing.B, elapsed time.Duration) {
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
	n := min(int(l.n.Load()), len(l.d))
	if n == 0 {
		return
	}
	s := slices.Clone(l.d[:n])
	slices.Sort(s)
	b.ReportMetric(float64(s[n*99/100])/1e3, "p99-µs")
}
