package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/internal/testkit/redistest"
	"github.com/limitd/limitd/limiter"
)

// WaitMany answers for each name what Wait does, in one pipeline: for
// started and unstarted limiters of each rate kind, a template instance, a
// limiter of a lease kind, a missing one and a bad name, also once the
// scripts and the library are gone from Redis.
func stTestWaitMany(t *testing.T, f stFactory) {
	rdb := f(t)
	s := stStore(t, rdb)
	ctx := t.Context()
	limit := int64(5)
	stPut(t, s, "sched", stSched(100, 1))
	stPut(t, s, "idle", stSched(100, 1))
	stPut(t, s, "smooth", stSmooth(100, 1))
	stPut(t, s, "win", limiter.Config{Kind: limiter.KindWindow, Limit: &limit, Period: "1m"})
	stPut(t, s, "sem", limiter.Config{Kind: limiter.KindConcurrency, Limit: &limit})
	if _, err := s.PutTemplate(ctx, limitd.Template{ID: "inst", Pattern: "inst-*", Limiter: stSched(100, 1)}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"sched", "smooth", "win", "inst-1"} {
		stAcquire(t, s, n, 3, limitd.Forever)
	}
	names := []string{"sched", "idle", "smooth", "win", "inst-1", "sem", "nope", "bad name!"}
	check := func(stage string) {
		t.Helper()
		got, errs := s.WaitMany(ctx, names)
		if len(got) != len(names) || len(errs) != len(names) {
			t.Fatalf("%s: %d answers and %d errors for %d names", stage, len(got), len(errs), len(names))
		}
		for i, n := range names {
			want, werr := s.Wait(ctx, n)
			switch {
			case werr != nil || errs[i] != nil:
				if werr == nil || errs[i] == nil || errs[i].Error() != werr.Error() {
					t.Errorf("%s: %s: error %v, Wait's %v", stage, n, errs[i], werr)
				}
			case !sameWait(got[i], want):
				t.Errorf("%s: %s: %+v, Wait's %+v", stage, n, got[i], want)
			}
		}
		if got[0].Permits != 3 || !got[0].Started || got[1].Started || got[4].Instance != true || got[3].Limit != limit {
			t.Errorf("%s: %+v", stage, got[:5])
		}
		if !errors.Is(errs[5], ErrConflict) || !errors.Is(errs[6], ErrNotFound) {
			t.Errorf("%s: lease kind %v, missing %v; want a conflict and not found", stage, errs[5], errs[6])
		}
	}
	check("loaded")
	_ = rdb.ScriptFlush(ctx).Err()
	_ = rdb.FunctionFlush(ctx).Err() // (miniredis has no functions)
	check("flushed")
}

// sameWait compares what does not move with Redis's clock between two reads.
func sameWait(a, b limitd.WaitInfo) bool {
	return a.Version == b.Version && a.Started == b.Started && a.Instance == b.Instance &&
		a.Allocated == b.Allocated && a.Permits == b.Permits && a.Lateness == b.Lateness &&
		a.Limit == b.Limit && a.Position == b.Position && a.Now > 0
}

// A calendar window whose window has passed needs its bounds before a peek:
// WaitMany gets them as Wait does, rather than failing.
func TestWaitManyCalendarBounds(t *testing.T) {
	m, rdb := redistest.Mini(t)
	t0 := time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)
	m.SetTime(t0)
	s := stStore(t, rdb)
	ctx := context.Background()
	limit := int64(10)
	stPut(t, s, "cal", limiter.Config{Kind: limiter.KindWindow, Limit: &limit, Period: "day"})
	stAcquire(t, s, "cal", 4, 0)
	if w, errs := s.WaitMany(ctx, []string{"cal"}); errs[0] != nil || w[0].Wait != 6 {
		t.Fatalf("the same day: %+v, %v; want 6 left", w[0], errs[0])
	}
	m.SetTime(t0.Add(48 * time.Hour))
	if w, errs := s.WaitMany(ctx, []string{"cal"}); errs[0] != nil || w[0].Wait != 10 {
		t.Fatalf("two days on: %+v, %v; want a new day's 10 left", w[0], errs[0])
	}
}
