package store

import (
	"context"
	"testing"

	"github.com/alicebob/miniredis/v2"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/internal/testkit/redistest"
	"github.com/limitd/limitd/limiter"
)

func miniStore(t *testing.T) (*Store, *miniredis.Miniredis) {
	m, c := redistest.Mini(t)
	return New(c), m
}

// Template versions count per template id, 1, 2, 3…, and go on where they
// were when a template is deleted and made again.
func TestTemplateVersionsPerID(t *testing.T) {
	s, _ := miniStore(t)
	ctx := context.Background()
	put := func(id string, rate float64) int64 {
		t.Helper()
		tpl, err := s.PutTemplate(ctx, limitd.Template{ID: id, Pattern: id + ":*", Limiter: limiter.Config{Rate: rate}})
		if err != nil {
			t.Fatal(err)
		}
		return tpl.Version
	}
	for i, c := range []struct {
		id   string
		rate float64
		want int64
	}{{"a", 1, 1}, {"b", 1, 1}, {"a", 2, 2}, {"a", 2, 2}, {"b", 3, 2}, {"a", 4, 3}} {
		if got := put(c.id, c.rate); got != c.want {
			t.Errorf("%d: PUT %s at %v: version %d, want %d", i, c.id, c.rate, got, c.want)
		}
	}
	if err := s.DeleteTemplate(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if got := put("a", 1); got != 4 {
		t.Errorf("a made again: version %d, want 4", got)
	}
}

// Totals add up over flushes and processes; deleting a limiter starts its
// totals over.
func TestTotalsAddAndDelete(t *testing.T) {
	s, m := miniStore(t)
	ctx := context.Background()
	if _, _, err := s.Put(ctx, "orders", limiter.Config{Rate: 5}); err != nil {
		t.Fatal(err)
	}
	one := limitd.Counts{GrantedCalls: 1, GrantedPermits: 3, RefusedCalls: 2, RefusedPermits: 2}
	for range 2 {
		if err := s.AddTotals(ctx, TotalsBatch{Limiters: map[string]limitd.Counts{"orders": one},
			Templates: map[string]limitd.Counts{"per-user": one}}); err != nil {
			t.Fatal(err)
		}
	}
	two := limitd.Counts{GrantedCalls: 2, GrantedPermits: 6, RefusedCalls: 4, RefusedPermits: 4}
	if got, err := s.Totals(ctx, []string{"orders", "nobody"}); err != nil || got[0] != two || !got[1].IsZero() {
		t.Errorf("totals %+v, %v", got, err)
	}
	if got, err := s.TemplateTotals(ctx, "per-user"); err != nil || got != two {
		t.Errorf("template totals %+v, %v", got, err)
	}
	if ttl := m.TTL(s.totalsKey("orders")); ttl <= 0 || ttl > TotalsTTL {
		t.Errorf("a limiter's totals TTL %v", ttl)
	}
	if err := s.Delete(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Totals(ctx, []string{"orders"}); err != nil || !got[0].IsZero() {
		t.Errorf("after delete: %+v, %v", got, err)
	}
}
