package store

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/internal/testkit/redistest"
	"github.com/limitd/limitd/limiter"
)

// TestStoreStrictSharedSchedule is the nosqlbench use case on a real
// redis-server: 64 workers share one strict schedule (1000/s, burst 1), each
// following it (sleeping until its permit's start before asking again). The
// shared schedule must be exact to the nanosecond: one permit per slice, no
// permit before its scheduled time, no two starts closer than a slice.
func TestStoreStrictSharedSchedule(t *testing.T) {
	srv := redistest.Server(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 64})
	defer rdb.Close()
	s := stStore(t, rdb)
	stPut(t, s, "strict", limiter.Config{Kind: limiter.KindSchedule, Rate: 1000, Burst: limiter.B(1)})
	const (
		workers = 64
		run     = 3 * time.Second
		slice   = int64(time.Second / 1000)
	)
	var (
		mu  sync.Mutex
		all []limitd.Decision
		wg  sync.WaitGroup
	)
	ctx := t.Context()
	end := time.Now().Add(run)
	for range workers {
		wg.Go(func() {
			var mine []limitd.Decision
			defer func() {
				mu.Lock()
				all = append(all, mine...)
				mu.Unlock()
			}()
			for time.Now().Before(end) {
				d, err := s.Acquire(ctx, "strict", 1, limitd.Forever)
				if err != nil || !d.Granted {
					t.Errorf("Acquire = %+v, %v", d, err)
					return
				}
				mine = append(mine, d)
				time.Sleep(time.Duration(d.Delay)) // start on time, then ask again
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}

	n := int64(len(all))
	// One permit per slice for 3 s, plus the ones granted ahead by workers
	// sleeping toward their start when time ran out.
	if n < 1000 || n > int64(run)/slice+workers+10 {
		t.Errorf("%d permits in %v at 1000/s", n, run)
	}
	sched := make([]int64, 0, n)
	starts := make([]int64, 0, n)
	for _, d := range all {
		if d.Start < d.Scheduled {
			t.Errorf("a permit starts %d ns before its scheduled time", d.Scheduled-d.Start)
		}
		if d.Delay != d.Start-d.Now || d.Delay < 0 || d.Lateness != d.Start-d.Scheduled {
			t.Errorf("inconsistent decision %+v", d)
		}
		sched = append(sched, d.Scheduled)
		starts = append(starts, d.Start)
	}
	slices.Sort(sched)
	slices.Sort(starts)
	bad := 0
	for i := 1; i < len(sched); i++ {
		if gap := sched[i] - sched[i-1]; gap != slice {
			if bad++; bad <= 5 {
				t.Errorf("scheduled times %d and %d are %d ns apart, want exactly %d", i-1, i, gap, slice)
			}
		}
		if gap := starts[i] - starts[i-1]; gap < slice {
			if bad++; bad <= 5 {
				t.Errorf("starts %d and %d are %d ns apart, closer than one slice (%d)", i-1, i, gap, slice)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d violations of the strict schedule among %d permits", bad, n)
	}
	w := stWait(t, s, "strict")
	if w.Permits != n || w.Allocated != n*slice || w.Idle != 0 {
		t.Errorf("limiter totals %+v, want %d permits, %d ns allocated", w, n, n*slice)
	}
	t.Logf("%d permits, schedule spans %v, starts span %v", n, time.Duration(sched[n-1]-sched[0]), time.Duration(starts[n-1]-starts[0]))
}
