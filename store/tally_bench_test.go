package store

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/internal/testkit/redistest"
)

// BenchmarkTally is what counting a decision costs, its share of the
// flushes included: 16 goroutines at once over 10,000 instances of one
// template, a flush (to miniredis) after every 25,000 decisions, about a
// second of a server deciding 25,000 a second; each flush's interval holds
// all 10,000 names, as limitd serve's does at that rate.
//
//	go test -run='^$' -bench=BenchmarkTally -benchmem -count=6 ./store/
func BenchmarkTally(b *testing.B) {
	_, c := redistest.Mini(b)
	s := New(c)
	tl := s.NewTally(TallyOptions{})
	names := make([]string, 10_000)
	for i := range names {
		names[i] = "user:" + strconv.Itoa(i)
	}
	ctx := context.Background()
	b.SetParallelism(max(1, 16/runtime.GOMAXPROCS(0)))
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := next.Add(1)
			tl.Add(limitd.Subject{Template: "per-user", Instance: names[i%int64(len(names))]}, limitd.Counts{GrantedCalls: 1, GrantedPermits: 1})
			if i%25_000 == 0 {
				if err := tl.Flush(ctx); err != nil {
					b.Error(err)
				}
			}
		}
	})
}
