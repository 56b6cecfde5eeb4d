package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/lua"
)

// Concurrency limiters (a distributed semaphore): lua/concurrency.lua keeps
// the leased slots in a sorted set, lease id → expiry, and reclaims expired
// leases on every call.

// ErrLeaseNotHeld is the error of RenewSlot and ReleaseSlot for a lease the
// limiter does not hold; it matches ErrNotFound.
var ErrLeaseNotHeld = fmt.Errorf("lease not held: %w", ErrNotFound)

// AcquireSlot takes a slot of a concurrency limiter if one is free. A full
// limiter is not an error: the lease is not Granted and RetryAfter tells when
// the earliest lease ends.
func (s *Store) AcquireSlot(ctx context.Context, name string) (limitd.SlotLease, error) {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	id := hex.EncodeToString(b[:])
	l, err := s.slotCall(ctx, name, "acquire", id)
	if err != nil {
		return limitd.SlotLease{}, err
	}
	if !l.Granted {
		l.ID, l.Expires = "", 0
	}
	return l, nil
}

// RenewSlot extends a lease by the limiter's lease time from now. A lease
// the limiter does not hold (expired, or lost by Redis) is registered again
// if a slot is free (Readded), else ErrLeaseNotHeld.
func (s *Store) RenewSlot(ctx context.Context, name, id string) (limitd.SlotLease, error) {
	return s.slotCall(ctx, name, "renew", id)
}

// ReleaseSlot frees a lease's slot. ErrLeaseNotHeld when it is not held (it
// expired, was released, or never was).
func (s *Store) ReleaseSlot(ctx context.Context, name, id string) error {
	_, err := s.slotCall(ctx, name, "release", id)
	return err
}

func (s *Store) slotCall(ctx context.Context, name, op, id string) (limitd.SlotLease, error) {
	if err := limitd.CheckName(name); err != nil {
		return limitd.SlotLease{}, err
	}
	if err := limitd.CheckLeaseID(id); err != nil {
		return limitd.SlotLease{}, err
	}
	v, err := s.run(ctx, lua.Concurrency, []string{s.limiterKey(name), s.slotsKey(name)}, op, id)
	if err != nil {
		return limitd.SlotLease{}, err
	}
	if err := leaseReplyErr(name, limiter.KindConcurrency, v); err != nil {
		return limitd.SlotLease{}, err
	}
	rep := &reply{v: v} // {code, granted, now_us, lease_ns, retry_after, in_use, limit[, readded]}
	code, granted := rep.int(0), rep.flag(1)
	now, lease, retry, inUse, limit := rep.int(2), rep.int(3), rep.int(4), rep.int(5), rep.int(6)
	readded := rep.has(7) && rep.flag(7)
	if err := rep.check("concurrency", name); err != nil {
		return limitd.SlotLease{}, err
	}
	if code == replyNotHeld { // concurrency.lua: the lease is not held
		return limitd.SlotLease{}, fmt.Errorf("lease %q on limiter %q (expired, released or never granted, and no slot is free to take it again): %w", id, name, ErrLeaseNotHeld)
	}
	l := limitd.SlotLease{Granted: granted, RetryAfter: retry, InUse: inUse, Limit: limit, Readded: readded}
	if l.Granted {
		l.ID, l.Expires = id, now*1000+lease
	}
	return l, nil
}
