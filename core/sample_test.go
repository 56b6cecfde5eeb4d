package core

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/limitd/limitd/limiter"
)

// A sampler reads a limiter's config once and then its live state alone
// (rate limiters' in one pipeline), until its version moves: by a change it
// is told of, by one it is not (another process's PUT, a lost notice), or to
// another kind.
func TestSamplerReadsConfigOnce(t *testing.T) {
	s, _, rec := newService(t)
	ctx := context.Background()
	other := over(s.store.backend, Options{}) // another process's writes: rec does not see them
	if _, _, err := s.Put(ctx, "r", limiter.Config{Rate: 5}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Put(ctx, "sem", limiter.Config{Kind: limiter.KindConcurrency, Limit: ptr[int64](2), Lease: limiter.D(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	p := s.Sampler()
	get := func(name string, want ...Op) Limiter {
		t.Helper()
		rec.calls = nil
		ls, errs := p.GetAll(ctx, []string{name})
		if errs[0] != nil {
			t.Fatalf("%s: %v", name, errs[0])
		}
		if !slices.Equal(rec.calls, want) {
			t.Errorf("%s: store calls %v, want %v", name, rec.calls, want)
		}
		return ls[0]
	}
	get("r", OpGet, OpWait, OpTotals)
	get("sem", OpGet, OpHolders, OpTotals)
	for range 3 {
		get("r", OpWaitMany, OpTotals)
		get("sem", OpHolders, OpTotals)
	}
	// Many rate limiters: one pipeline.
	for _, n := range []string{"r2", "r3"} {
		if _, _, err := s.Put(ctx, n, limiter.Config{Rate: 5}); err != nil {
			t.Fatal(err)
		}
	}
	all := []string{"r", "r2", "sem", "r3"}
	p.GetAll(ctx, all)
	rec.calls = nil
	if ls, errs := p.GetAll(ctx, all); errs[0] != nil || errs[1] != nil || errs[2] != nil || errs[3] != nil ||
		ls[1].Name != "r2" || ls[1].State == nil || ls[2].Holders == nil || ls[3].Name != "r3" {
		t.Fatalf("all: %+v, %v", ls, errs)
	}
	if want := []Op{OpHolders, OpWaitMany, OpTotals}; !slices.Equal(rec.calls, want) {
		t.Errorf("all: store calls %v, want %v", rec.calls, want)
	}

	// A change the sampler is not told of: the live state's version gives it away.
	if _, _, err := other.Put(ctx, "r", limiter.Config{Rate: 7}); err != nil {
		t.Fatal(err)
	}
	if l := get("r", OpWaitMany, OpTotals, OpGet, OpWait, OpTotals); l.Config.Rate != 7 || l.Version != l.State.Version {
		t.Errorf("after another's PUT: rate %v, version %d (state's %d), want 7 and the state's", l.Config.Rate, l.Version, l.State.Version)
	}
	get("r", OpWaitMany, OpTotals)
	if _, _, err := other.Put(ctx, "sem", limiter.Config{Kind: limiter.KindConcurrency, Limit: ptr[int64](3), Lease: limiter.D(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if l := get("sem", OpHolders, OpTotals, OpGet, OpHolders, OpTotals); *l.Config.Limit != 3 {
		t.Errorf("after another's PUT: limit %d, want 3", *l.Config.Limit)
	}

	// One it is told of.
	p.Changed("r")
	get("r", OpGet, OpWait, OpTotals)

	// A PUT of another kind.
	if _, _, err := other.Put(ctx, "r", limiter.Config{Kind: limiter.KindConcurrency, Limit: ptr[int64](1), Lease: limiter.D(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if l := get("r", OpWaitMany, OpTotals, OpGet, OpHolders, OpTotals); l.Holders == nil || l.State != nil {
		t.Errorf("after a PUT of another kind: %+v, want holders and no schedule", l)
	}

	// A limiter deleted, then made again.
	if err := other.Delete(ctx, "sem"); err != nil {
		t.Fatal(err)
	}
	rec.calls = nil
	if _, errs := p.GetAll(ctx, []string{"sem"}); !errors.Is(errs[0], ErrNotFound) || !slices.Equal(rec.calls, []Op{OpHolders, OpTotals}) {
		t.Errorf("deleted: %v, store calls %v; want ErrNotFound after %v", errs[0], rec.calls, []Op{OpHolders})
	}
	if _, _, err := other.Put(ctx, "sem", limiter.Config{Rate: 2}); err != nil {
		t.Fatal(err)
	}
	if l := get("sem", OpGet, OpWait, OpTotals); l.Config.Rate != 2 || l.State == nil {
		t.Errorf("made again: %+v, want a rate limiter at 2/s", l)
	}
}
