package store

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/limiter"
)

// stTestInspect: Holders reads a share limiter's leases and a concurrency
// limiter's slots in one transaction at Redis time, and a rate limiter is
// a conflict; InstanceCount counts a template's live instances on every
// node and none of another template's or a named limiter's.
func stTestInspect(t *testing.T, f stFactory) {
	s := stStore(t, f(t))
	ctx := t.Context()
	stPut(t, s, "quota", limiter.Config{Kind: limiter.KindShare, Capacity: new(100.0)})
	for i, c := range []limitd.CapacityRequest{{ClientID: "b", Wants: 60, Priority: 2}, {ClientID: "a", Wants: 10}} {
		if _, err := s.Capacity(ctx, "quota", c); err != nil {
			t.Fatalf("capacity %d: %v", i, err)
		}
	}
	h, err := s.Holders(ctx, "quota")
	if err != nil || h.Kind != limiter.KindShare || h.Version != 1 || len(h.Share) != 2 || h.Slots != nil || h.Now <= 0 {
		t.Fatalf("share holders: %+v, %v", h, err)
	}
	a, b := h.Share[0], h.Share[1]
	if a.ClientID != "a" || b.ClientID != "b" || a.Wants != 10 || b.Wants != 60 || b.Priority != 2 ||
		h.Held != a.Has+b.Has || a.Has <= 0 || b.Has <= 0 || a.Expires <= h.Now || a.Expires > h.Now+int64(time.Minute) {
		t.Errorf("share holders: %+v", h)
	}
	stPut(t, s, "sem", limiter.Config{Kind: limiter.KindConcurrency, Limit: new(int64(5))})
	var leases []limitd.SlotLease
	for range 3 {
		l, err := s.AcquireSlot(ctx, "sem")
		if err != nil || !l.Granted {
			t.Fatalf("slot: %+v, %v", l, err)
		}
		leases = append(leases, l)
	}
	if err := s.ReleaseSlot(ctx, "sem", leases[1].ID); err != nil {
		t.Fatal(err)
	}
	h, err = s.Holders(ctx, "sem")
	if err != nil || h.Kind != limiter.KindConcurrency || len(h.Slots) != 2 || h.Share != nil ||
		h.Slots[0].LeaseID != leases[0].ID || h.Slots[1].LeaseID != leases[2].ID || h.Slots[0].Expires > h.Slots[1].Expires {
		t.Errorf("concurrency holders: %+v, %v (leases %+v)", h, err, leases)
	}
	stPut(t, s, "rate", stSched(10, 1))
	if _, err := s.Holders(ctx, "rate"); !errors.Is(err, ErrConflict) {
		t.Errorf("holders of a rate limiter: %v, want ErrConflict", err)
	}
	if _, err := s.Holders(ctx, "missing"); !errors.Is(err, ErrNotFound) {
		t.Errorf("holders of a missing limiter: %v, want ErrNotFound", err)
	}

	for _, tpl := range []limitd.Template{
		{ID: "users", Pattern: "user:*", IdleTTL: limiter.D(time.Hour), Limiter: stSched(10, 1)},
		{ID: "ips", Pattern: "ip:*", IdleTTL: limiter.D(time.Hour), Limiter: stSched(10, 1)},
	} {
		if _, err := s.PutTemplate(ctx, tpl); err != nil {
			t.Fatal(err)
		}
	}
	stPut(t, s, "user:named", stSched(10, 1)) // a named limiter, not an instance
	for i := range 25 {
		stAcquire(t, s, "user:"+strconv.Itoa(i), 1, 0)
	}
	stAcquire(t, s, "ip:1", 1, 0)
	stAcquire(t, s, "user:named", 1, 0)
	for _, c := range []struct {
		pattern string
		want    int64
	}{{"user:*", 25}, {"ip:*", 1}, {"none:*", 0}} {
		if n, exact, err := s.InstanceCount(ctx, c.pattern); err != nil || n != c.want || !exact {
			t.Errorf("InstanceCount(%s) = %d %v %v, want %d exact", c.pattern, n, exact, err, c.want)
		}
	}
}
