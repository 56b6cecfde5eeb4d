package core

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/store"
)

// CapacityRequest asks a share limiter for capacity on behalf of one client
// (Doorman): what it wants, what it has, its priority.
type CapacityRequest struct {
	Name     string
	ClientID string  // limitd.NameRule; the same in every request of the client
	Wants    float64 // finite, ≥ 0
	Has      float64 // finite, ≥ 0
	Priority float64 // 0 ≤ Priority ≤ limitd.MaxPriority; 0 counts as 1
}

// Capacity asks a share limiter for capacity on behalf of one client.
func (s *Service) Capacity(ctx context.Context, r CapacityRequest) (limitd.CapacityLease, error) {
	// checked here too, so that bad input never reaches Redis
	sr := limitd.CapacityRequest{ClientID: r.ClientID, Wants: r.Wants, Has: r.Has, Priority: r.Priority}
	if err := sr.Check(); err != nil {
		return limitd.CapacityLease{}, err
	}
	l, err := s.store.Capacity(ctx, r.Name, sr)
	if err != nil {
		return limitd.CapacityLease{}, err
	}
	for _, v := range []float64{l.Gets, l.SafeCapacity} {
		if math.IsNaN(v) || math.IsInf(v, 0) { // no wire can carry it: fail before answering
			return limitd.CapacityLease{}, fmt.Errorf("core: limiter %q answered a capacity lease that is not finite: %+v", r.Name, l)
		}
	}
	s.event(ctx, EventCapacity, r.Name, capacityOutcome(r.Wants, l))
	return l, nil
}

func capacityOutcome(wants float64, l limitd.CapacityLease) string {
	switch {
	case l.Learning:
		return "learning"
	case l.Gets >= wants:
		return "full"
	case l.Gets > 0:
		return "partial"
	}
	return "none"
}

// ReturnCapacity ends a client's lease at once, freeing its capacity; a
// client that holds none is a *NotHeldError naming client_id.
func (s *Service) ReturnCapacity(ctx context.Context, name, clientID string) error {
	if err := limitd.CheckNameAs("client_id", clientID); err != nil {
		return err
	}
	err := s.store.ReturnCapacity(ctx, name, clientID)
	if errors.Is(err, store.ErrNotFound) {
		return s.notHeld(ctx, name, err, "client_id", "",
			fmt.Sprintf("client_id: client %q holds no capacity of limiter %q: it was returned already, or its lease expired", clientID, name))
	}
	return err
}

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
