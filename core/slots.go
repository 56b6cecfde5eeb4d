package core

import (
	"context"
	"errors"
	"fmt"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/store"
)

// ReleaseSlot frees a lease's slot; a lease the limiter does not hold
// (released already, or expired and its slot reclaimed) is a *NotHeldError
// naming lease_id.
func (s *Service) ReleaseSlot(ctx context.Context, name, leaseID string) error {
	if err := limitd.CheckLeaseID(leaseID); err != nil {
		return err
	}
	err := s.store.ReleaseSlot(ctx, name, leaseID)
	if errors.Is(err, store.ErrNotFound) {
		return s.notHeld(ctx, name, err, "lease_id", "lost",
			fmt.Sprintf("lease_id: limiter %q holds no lease %q: it was released already, or it expired and its slot was reclaimed", name, leaseID))
	}
	if err != nil {
		return err
	}
	s.event(ctx, EventLease, name, "released")
	return nil
}

// RenewSlot extends a held lease by the limiter's lease time; a lost lease
// (the holder must stop and acquire again) is a *NotHeldError naming
// lease_id.
func (s *Service) RenewSlot(ctx context.Context, name, leaseID string) (limitd.SlotLease, error) {
	if err := limitd.CheckLeaseID(leaseID); err != nil {
		return limitd.SlotLease{}, err
	}
	l, err := s.store.RenewSlot(ctx, name, leaseID)
	if errors.Is(err, store.ErrNotFound) {
		return limitd.SlotLease{}, s.notHeld(ctx, name, err, "lease_id", "lost",
			fmt.Sprintf("lease_id: limiter %q holds no lease %q and has no free slot to take it again: it was released or it expired, and its slot is taken; stop using it and acquire again", name, leaseID))
	}
	if err != nil {
		return limitd.SlotLease{}, err
	}
	s.event(ctx, EventLease, name, "renewed")
	l.ID = leaseID
	return l, nil
}

// notHeld turns the store's ErrNotFound into a *NotHeldError naming field
// when the limiter exists; outcome, if not empty, is reported as an
// EventLease.
func (s *Service) notHeld(ctx context.Context, name string, err error, field, outcome, detail string) error {
	_, gerr := s.store.Get(ctx, name)
	if gerr != nil {
		return err
	}
	if outcome != "" {
		s.event(ctx, EventLease, name, outcome)
	}
	return &NotHeldError{Field: field, Detail: detail, Err: err}
}
