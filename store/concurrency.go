package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/lua"
)

// Concurrency limiters (a distributed semaphore): lua/concurrency.lua keeps
// the leased slots in a sorted set, prefix:{name}:s, lease id → expiry, and
// reclaims expired leases on every call, so that a crashed holder cannot keep
// a slot for ever.

// SlotLease is the answer to AcquireSlot and RenewSlot.
type SlotLease struct {
	Granted    bool
	ID         string // lease id (16 random bytes in hex), set when granted
	Expires    int64  // Unix ns, Redis clock
	RetryAfter int64  // ns; when not granted: until the earliest lease expires
	InUse      int64
	Limit      int64
}

// AcquireSlot takes a slot of a concurrency limiter if one is free. A full
// limiter is not an error: the lease is not Granted and RetryAfter tells when
// the earliest lease ends.
func (s *Store) AcquireSlot(ctx context.Context, name string) (SlotLease, error) {
	if err := CheckName(name); err != nil {
		return SlotLease{}, err
	}
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	id := hex.EncodeToString(b[:])
	l, err := s.slotCall(ctx, name, "acquire", id)
	if err != nil {
		return SlotLease{}, err
	}
	if !l.Granted {
		l.ID, l.Expires = "", 0
	}
	return l, nil
}

// RenewSlot extends a held lease by the limiter's lease time from now.
// ErrNotFound when the lease is lost (it expired, was released, or never was).
func (s *Store) RenewSlot(ctx context.Context, name, id string) (SlotLease, error) {
	if err := CheckName(name); err != nil {
		return SlotLease{}, err
	}
	if err := checkLeaseID(id); err != nil {
		return SlotLease{}, err
	}
	return s.slotCall(ctx, name, "renew", id)
}

// ReleaseSlot frees a lease's slot. ErrNotFound when it is not held (it
// expired, was released, or never was).
func (s *Store) ReleaseSlot(ctx context.Context, name, id string) error {
	if err := CheckName(name); err != nil {
		return err
	}
	if err := checkLeaseID(id); err != nil {
		return err
	}
	_, err := s.slotCall(ctx, name, "release", id)
	return err
}

func (s *Store) slotCall(ctx context.Context, name, op, id string) (SlotLease, error) {
	v, err := s.run(ctx, lua.Concurrency, []string{s.limiterKey(name), s.slotsKey(name)}, op, id)
	if err != nil {
		return SlotLease{}, err
	}
	if err := leaseReplyErr(name, limiter.KindConcurrency, v); err != nil {
		return SlotLease{}, err
	}
	if len(v) < 7 {
		return SlotLease{}, fmt.Errorf("store: concurrency: unexpected reply %v", v)
	}
	if toInt(v[0]) == -2 {
		return SlotLease{}, fmt.Errorf("lease %q on limiter %q is not held (expired, released or never granted): %w", id, name, ErrNotFound)
	}
	l := SlotLease{Granted: toInt(v[1]) == 1, RetryAfter: toInt(v[4]), InUse: toInt(v[5]), Limit: toInt(v[6])}
	if l.Granted {
		l.ID, l.Expires = id, toInt(v[2])*1000+toInt(v[3])
	}
	return l, nil
}

// checkLeaseID accepts what AcquireSlot hands out: 32 lower-case hex digits.
func checkLeaseID(id string) error {
	ok := len(id) == 32
	for i := 0; ok && i < len(id); i++ {
		c := id[i]
		ok = c >= '0' && c <= '9' || c >= 'a' && c <= 'f'
	}
	if !ok {
		return &limiter.FieldError{Field: "lease_id", Rule: "must be a lease id as acquire returns it: 32 lower-case hex digits", Value: fmt.Sprintf("%q", id)}
	}
	return nil
}
