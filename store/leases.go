package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/lua"
)

// Capacity asks a share limiter (Doorman capacity leases) for capacity on
// behalf of one client: lua/share.lua runs limiter.ShareParams.Request for it
// alone, so what clients hold never exceeds the capacity. An unknown limiter
// is ErrNotFound; a limiter of another kind ErrConflict.
func (s *Store) Capacity(ctx context.Context, name string, r limitd.CapacityRequest) (limitd.CapacityLease, error) {
	if err := limitd.CheckName(name); err != nil {
		return limitd.CapacityLease{}, err
	}
	if err := r.Check(); err != nil {
		return limitd.CapacityLease{}, err
	}
	v, err := s.run(ctx, lua.Share, []string{s.limiterKey(name), s.clientsKey(name)},
		"request", r.ClientID, ff(r.Wants), ff(r.Has), ff(r.Priority))
	if err != nil {
		return limitd.CapacityLease{}, err
	}
	if err := leaseReplyErr(name, limiter.KindShare, v); err != nil {
		return limitd.CapacityLease{}, err
	}
	rep := &reply{v: v} // {1, gets, now_us, lease_ns, refresh_ns, safe_capacity, learning, version}
	l := limitd.CapacityLease{
		Gets:         rep.float(1),
		Expires:      rep.int(2)*1000 + rep.int(3),
		Refresh:      rep.int(4),
		SafeCapacity: rep.float(5),
		Learning:     rep.flag(6),
		Version:      rep.int(7),
	}
	if err := rep.check("capacity", name); err != nil {
		return limitd.CapacityLease{}, err
	}
	return l, nil
}

// ReturnCapacity ends a client's lease at once, freeing its capacity (the
// client leaves). ErrNotFound if the client holds no lease.
func (s *Store) ReturnCapacity(ctx context.Context, name, clientID string) error {
	if err := limitd.CheckName(name); err != nil {
		return err
	}
	if err := limitd.CheckNameAs("client_id", clientID); err != nil {
		return err
	}
	v, err := s.run(ctx, lua.Share, []string{s.limiterKey(name), s.clientsKey(name)}, "return", clientID)
	if err != nil {
		return err
	}
	if err := leaseReplyErr(name, limiter.KindShare, v); err != nil {
		return err
	}
	if v[0] == int64(replyNotHeld) { // share.lua: no lease held
		return fmt.Errorf("client %q holds no lease on limiter %q: %w", clientID, name, ErrNotFound)
	}
	return nil
}

// leaseFields are the parameters configure_lease.lua writes into a share or
// concurrency limiter's hash, as field/value pairs.
func leaseFields(c limiter.Config) ([]any, error) {
	if c.Kind == limiter.KindConcurrency {
		limit, lease, err := c.Concurrency()
		if err != nil {
			return nil, err
		}
		return []any{"cc_limit", limit, "cc_lease", lease, "cc_lease_us", ceilUS(lease)}, nil
	}
	p, err := c.Share()
	if err != nil {
		return nil, err
	}
	return []any{"sh_cap", ff(p.Capacity), "sh_alg", string(p.Algorithm),
		"sh_lease", p.Lease, "sh_lease_us", ceilUS(p.Lease), "sh_refresh", p.Refresh,
		"sh_safe", ff(p.SafeCapacity), "sh_learn_us", ceilUS(p.Learning)}, nil
}

// ceilUS is ns rounded up to µs (see lua/share.lua for why that is exact).
func ceilUS(ns int64) int64 { return (ns + 999) / 1000 }

// leaseReplyErr maps the errors of share.lua and concurrency.lua, whose -2
// is replyNotHeld (the caller's to read), not replyPermitsRange.
func leaseReplyErr(name string, want limiter.Kind, v []any) error {
	if r := (reply{v: v}); r.int(0) == replyNotHeld && r.err == nil {
		return nil
	}
	return replyErr(string(want), name, v)
}

// kindConflict is the error of a call a limiter of kind k does not take: it
// names the kind and the calls that kind does take.
func kindConflict(name string, k limiter.Kind) error {
	var use string
	switch {
	case k == limiter.KindShare:
		use = "ask for capacity: POST /v1/limiters/" + name + "/capacity (Store.Capacity, ReturnCapacity)"
	case k == limiter.KindConcurrency:
		use = "lease slots: POST /v1/limiters/" + name + "/acquire, /renew and /release (Store.AcquireSlot, RenewSlot, ReleaseSlot)"
	case limiter.IsRate(k):
		use = "acquire permits: POST /v1/limiters/" + name + "/acquire, GET /wait, POST /reset (Store.Acquire, Grant, Wait, Reset)"
	default:
		return fmt.Errorf("%w: limiter %q is of kind %s, which this call does not take", ErrConflict, name, strconv.Quote(string(k)))
	}
	return fmt.Errorf("%w: limiter %q is of kind %s: %s", ErrConflict, name, k, use)
}

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
