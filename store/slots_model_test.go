package store

import (
	"fmt"
	"testing"
)

// The concurrency kind's model, which lua/concurrency.lua is tested against:
// a distributed semaphore of Limit slots. A holder gets a lease that expires
// unless renewed, so a crashed process cannot hold a slot for ever: expired
// leases are reclaimed on every call.

// slotsModel is a semaphore's state: lease id → expiry (ns).
type slotsModel map[string]int64

// reclaim drops expired leases.
func (s slotsModel) reclaim(now int64) {
	for id, exp := range s {
		if exp <= now {
			delete(s, id)
		}
	}
}

// AcquireSlot takes a slot for lease id until now+ttl if one of limit is free.
func (s slotsModel) AcquireSlot(now int64, id string, limit int64, ttl int64) (expires int64, ok bool) {
	s.reclaim(now)
	if _, held := s[id]; !held && int64(len(s)) >= limit {
		return 0, false
	}
	s[id] = now + ttl
	return now + ttl, true
}

// Renew extends a lease to now+ttl. A lease the state does not hold (it
// expired, or the state was lost: a Redis restart without persistence, a
// failover that lost writes) is registered again if fewer than limit slots
// are in use, readded true, so that holders rebuild a lost state as they
// renew; else ok is false: the lease is lost.
func (s slotsModel) Renew(now int64, id string, limit, ttl int64) (expires int64, readded, ok bool) {
	s.reclaim(now)
	if _, held := s[id]; !held {
		if int64(len(s)) >= limit {
			return 0, false, false
		}
		readded = true
	}
	s[id] = now + ttl
	return now + ttl, readded, true
}

// ReleaseSlot frees a lease's slot; false if it was not held.
func (s slotsModel) ReleaseSlot(now int64, id string) bool {
	s.reclaim(now)
	_, held := s[id]
	delete(s, id)
	return held
}

// InUse is the number of unexpired leases at now.
func (s slotsModel) InUse(now int64) int64 {
	s.reclaim(now)
	return int64(len(s))
}

// The model itself, at hand-picked instants.
func TestSlotsModel(t *testing.T) {
	s := slotsModel{}
	for i := range 3 {
		if _, ok := s.AcquireSlot(0, fmt.Sprint(i), 3, 10); !ok {
			t.Fatalf("slot %d refused", i)
		}
	}
	if _, ok := s.AcquireSlot(1, "x", 3, 10); ok {
		t.Fatal("a fourth slot was granted on a semaphore of 3")
	}
	if _, readded, ok := s.Renew(5, "0", 3, 10); !ok || readded {
		t.Fatal("renew of a held lease refused or re-added")
	}
	// At 10 leases 1 and 2 expired (0 was renewed to 15): two slots are free.
	if n := s.InUse(10); n != 1 {
		t.Fatalf("in use at 10 = %d, want 1", n)
	}
	// An expired lease renewed while slots are free is registered again; on
	// a full semaphore it is lost.
	if _, readded, ok := s.Renew(11, "1", 3, 10); !ok || !readded {
		t.Fatal("renew after expiry with free slots: not re-registered")
	}
	if _, _, ok := s.Renew(11, "2", 2, 10); ok {
		t.Fatal("renew after expiry on a full semaphore succeeded")
	}
	s.ReleaseSlot(11, "1")
	if !s.ReleaseSlot(12, "0") || s.ReleaseSlot(12, "0") {
		t.Fatal("release: want true once, then false")
	}
}
