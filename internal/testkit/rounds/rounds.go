// Package rounds measures contenders side by side in alternating rounds, for
// benchmarks whose figures must hold on a shared, noisy machine: each
// iteration of a benchmark is a round in which every side runs for the same
// time, the one going first rotating, and the figures are medians over the
// rounds. Load that comes and goes hits every side of a round alike, so the
// median ratio moves much less than the ratio of two separate runs.
package rounds

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Side is one contender: its name and one operation, which returns false if
// it failed to do what every side must (a denial where none is expected).
type Side struct {
	Name string
	Op   func() bool
}

// Run measures the sides in b.N rounds, each side running for round in each,
// from goroutines goroutines (1: one loop). It reports each side's median
// ns per operation (<name>-ns/op) and, for every side after the first, the
// median over the rounds of the first side's time per operation divided by
// that side's (<first>/<name>: below 1 the first is cheaper). A failed
// operation fails the benchmark.
func Run(b *testing.B, goroutines int, round time.Duration, sides ...Side) {
	b.Helper()
	if len(sides) < 2 || goroutines < 1 {
		b.Fatalf("rounds: %d sides, %d goroutines", len(sides), goroutines)
	}
	for _, s := range sides { // warm up: caches, pools, first grants
		for range 1000 {
			if !s.Op() {
				b.Fatalf("%s failed while warming up", s.Name)
			}
		}
	}
	ns := make([][]float64, len(sides))
	ratios := make([][]float64, len(sides))
	for i := range b.N {
		per := make([]float64, len(sides))
		for k := range sides {
			j := (i + k) % len(sides) // who goes first rotates
			t, ok := timeSide(goroutines, round, sides[j].Op)
			if !ok {
				b.Fatalf("%s failed in round %d", sides[j].Name, i)
			}
			per[j] = t
		}
		for j := range sides {
			ns[j] = append(ns[j], per[j])
			ratios[j] = append(ratios[j], per[0]/per[j])
		}
	}
	for j, s := range sides {
		b.ReportMetric(Median(ns[j]), s.Name+"-ns/op")
		if j > 0 {
			b.ReportMetric(Median(ratios[j]), sides[0].Name+"/"+s.Name)
		}
	}
}

// timeSide runs op for about d from n goroutines and returns the ns per
// operation, and false if an operation failed.
func timeSide(n int, d time.Duration, op func() bool) (float64, bool) {
	var (
		stop   atomic.Bool
		failed atomic.Bool
		total  atomic.Int64
		wg     sync.WaitGroup
	)
	start := time.Now()
	for range n {
		wg.Go(func() {
			var k int64
			for !stop.Load() {
				for range 64 {
					if !op() {
						failed.Store(true)
						stop.Store(true)
						break
					}
					k++
				}
				if n == 1 && time.Since(start) >= d {
					stop.Store(true)
				}
			}
			total.Add(k)
		})
	}
	if n > 1 {
		time.Sleep(d)
		stop.Store(true)
	}
	wg.Wait()
	elapsed := time.Since(start)
	return float64(elapsed.Nanoseconds()) / float64(max(1, total.Load())), !failed.Load()
}

// Median is the median of xs (0 for none).
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
