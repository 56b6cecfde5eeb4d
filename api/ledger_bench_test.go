//go:build unix

package api_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/api"
	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/internal/testkit/redistest"
	"github.com/limitd/limitd/internal/testkit/rounds"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

// BenchmarkHTTPLedger is what the ledger costs an HTTP acquire: 16 callers
// round-robin over 10,000 instances of one template through the real
// handler over a batching store, with the ledger limitd serve runs
// (flushing each second into the same Redis) and without one, in b.N
// alternating rounds of one second (which goes first alternates too). It
// reports the medians of the process' CPU per acquire (callers included)
// with and without, and of their ratio per round:
//
//	go test -run='^$' -bench=BenchmarkHTTPLedger -benchtime=12x ./api/
func BenchmarkHTTPLedger(b *testing.B) {
	rdb := redistest.Server(b).Client()
	st := store.New(rdb, store.WithBatching(64))
	b.Cleanup(func() { _ = st.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	b.Cleanup(func() { cancel(); wg.Wait() })
	if _, err := st.PutTemplate(ctx, limitd.Template{ID: "k", Pattern: "k:*", Limiter: limiter.Config{Rate: limiter.MaxRate, Burst: limiter.B(limiter.Inf)}}); err != nil {
		b.Fatal(err)
	}
	l := core.NewLedger(st, core.LedgerOptions{})
	wg.Go(func() { l.Run(ctx) })
	var sides [2]func(time.Duration) float64 // without, with
	for i, o := range []core.Options{{}, {Ledger: l}} {
		srv := httptest.NewServer(api.New(api.Options{Service: core.New(st, o)}))
		b.Cleanup(srv.Close)
		sides[i] = ledgerLoad(b, srv.URL)
		sides[i](time.Second) // warm up: connections kept alive, every instance made
	}
	var with, without, ratio []float64
	b.ResetTimer()
	for r := range b.N {
		var c [2]float64
		for k := range 2 {
			j := (r + k) % 2
			c[j] = sides[j](time.Second)
		}
		without, with, ratio = append(without, c[0]), append(with, c[1]), append(ratio, c[1]/c[0])
	}
	b.StopTimer()
	b.ReportMetric(rounds.Median(without), "without-cpu-µs/op")
	b.ReportMetric(rounds.Median(with), "with-cpu-µs/op")
	b.ReportMetric(rounds.Median(ratio), "with/without")
	b.ReportMetric(slices.Min(ratio), "with/without-min")
	b.ReportMetric(slices.Max(ratio), "with/without-max")
}

// ledgerLoad returns a round of acquires on the server at base: 16 callers
// for d, round-robin over k:0 … k:9999, the process' CPU per acquire (µs).
func ledgerLoad(b *testing.B, base string) func(d time.Duration) float64 {
	urls := make([]string, 10_000)
	for i := range urls {
		urls[i] = base + "/v1/limiters/k:" + strconv.Itoa(i) + "/acquire"
	}
	tr := &http.Transport{MaxIdleConns: 16, MaxIdleConnsPerHost: 16}
	b.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr}
	var next atomic.Int64
	post := func() error {
		resp, err := client.Post(urls[int(next.Add(1))%len(urls)], "application/json", bytes.NewReader([]byte(`{"permits":1}`)))
		if err != nil {
			return err
		}
		got, err := io.ReadAll(resp.Body) // read to the end: the connection is reused
		_ = resp.Body.Close()
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("POST %s = %d %s, want a grant", resp.Request.URL, resp.StatusCode, got)
		}
		return nil
	}
	return func(d time.Duration) float64 {
		var n atomic.Int64
		var stop atomic.Bool
		var wg sync.WaitGroup
		cpu0 := processCPU(b)
		for range 16 {
			wg.Go(func() {
				for !stop.Load() {
					if err := post(); err != nil {
						b.Error(err)
						return
					}
					n.Add(1)
				}
			})
		}
		time.Sleep(d)
		stop.Store(true)
		wg.Wait()
		return float64(processCPU(b)-cpu0) / 1e3 / float64(n.Load())
	}
}

// processCPU is the CPU time (user and system) this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
