package limiter

// The concurrency engine: a distributed semaphore of Limit slots. A holder
// gets a lease that expires unless renewed, so a crashed process cannot hold
// a slot for ever: expired leases are reclaimed on every call.

// Slots is a semaphore's state: lease id → expiry (ns).
type Slots map[string]int64

// reclaim drops expired leases.
func (s Slots) reclaim(now int64) {
	for id, exp := range s {
		if exp <= now {
			delete(s, id)
		}
	}
}

// AcquireSlot takes a slot for lease id until now+ttl if one of limit is free.
func (s Slots) AcquireSlot(now int64, id string, limit int64, ttl int64) (expires int64, ok bool) {
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
func (s Slots) Renew(now int64, id string, limit, ttl int64) (expires int64, readded, ok bool) {
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
func (s Slots) ReleaseSlot(now int64, id string) bool {
	s.reclaim(now)
	_, held := s[id]
	delete(s, id)
	return held
}

// InUse is the number of unexpired leases at now.
func (s Slots) InUse(now int64) int64 {
	s.reclaim(now)
	return int64(len(s))
}
