package store

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/limitd/limitd/limiter"
)

// The index equals the set of limiters once every operation has finished,
// whatever ran at the same time: new names put while others list (List
// dropped names whose configure had not run yet), and names deleted and put
// again over and over by several goroutines.
func TestIndexExactUnderConcurrency(t *testing.T) {
	for name, f := range map[string]stFactory{"miniredis": stMiniredisFactory(t), "redis": stServerFactory(t)} {
		t.Run(name, func(t *testing.T) { stTestIndexExact(t, f) })
	}
}

func stTestIndexExact(t *testing.T, f stFactory) {
	rdb := f(t)
	s := stStore(t, rdb)
	ctx := t.Context()
	const (
		writers = 8
		churn   = 8 // names deleted and put again
	)
	perW := 250 // new names per writer
	if testing.Short() && raceDetector {
		perW = 60 // the detector needs the paths raced, not raced often; the plain run puts 2,000
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range perW {
				if _, _, err := s.Put(ctx, fmt.Sprintf("n-%d-%03d", w, i), limiter.Config{Rate: 10}); err != nil {
					t.Error(err)
					return
				}
				c := fmt.Sprintf("churn-%d", i%churn)
				if i%2 == w%2 {
					_ = s.Delete(ctx, c) // ErrNotFound is fine
				} else if _, _, err := s.Put(ctx, c, limiter.Config{Rate: 10}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	var lists atomic.Int64
	var lw sync.WaitGroup
	lw.Go(func() {
		for !stop.Load() {
			cursor := ""
			for {
				_, next, err := s.List(ctx, cursor, 100)
				if err != nil {
					t.Error(err)
					return
				}
				if cursor = next; next == "" {
					break
				}
			}
			lists.Add(1)
		}
	})
	wg.Wait()
	stop.Store(true)
	lw.Wait()

	index, err := rdb.ZRange(ctx, s.indexKey(), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	var exist []string
	for _, n := range index {
		if ok, _ := rdb.HExists(ctx, s.limiterKey(n), "cfg").Result(); ok {
			exist = append(exist, n)
		}
	}
	// Every limiter that exists, found by its keys rather than the index.
	var all []string
	iter := rdb.Scan(ctx, 0, s.prefix+":{*}:l", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		all = append(all, k[len(s.prefix)+2:len(k)-3])
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(all)
	if len(exist) != len(index) {
		t.Errorf("the index names %d limiters that do not exist", len(index)-len(exist))
	}
	if !slices.Equal(index, all) {
		missing := 0
		for _, n := range all {
			if _, ok := slices.BinarySearch(index, n); !ok {
				missing++
			}
		}
		t.Errorf("index holds %d names, %d limiters exist, %d of them missing from the index", len(index), len(all), missing)
	}
	if got := len(all) - churnCount(all); got != writers*perW {
		t.Errorf("%d new limiters exist, want %d", got, writers*perW)
	}
	t.Logf("%d listings ran meanwhile; %d limiters", lists.Load(), len(all))
}

func churnCount(names []string) int {
	n := 0
	for _, s := range names {
		if len(s) > 6 && s[:6] == "churn-" {
			n++
		}
	}
	return n
}
