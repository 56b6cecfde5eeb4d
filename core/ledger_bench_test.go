package core

import (
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
)

// BenchmarkLedgerDecided is what counting one decision costs the ledger
// (Decided, its whole cost on a decision's path), from 16 goroutines at once
// over 10,000 instances of one template, as an HTTP or gRPC front end under
// load counts them.
func BenchmarkLedgerDecided(b *testing.B) {
	l := NewLedger(nil, LedgerOptions{})
	names := make([]string, 10_000)
	for i := range names {
		names[i] = "user:" + strconv.Itoa(i)
	}
	b.SetParallelism(max(1, 16/runtime.GOMAXPROCS(0)))
	var next atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(7919))
		for pb.Next() {
			l.Decided(Event{Kind: EventRate, Template: "per-user", Instance: names[i%len(names)], Outcome: "granted", Permits: 1})
			i++
		}
	})
}
