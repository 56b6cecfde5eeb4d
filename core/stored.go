package core

import (
	"context"
	"time"

	"github.com/limitd/limitd/store"
)

// The store's calls that answer what core answers in turn, each converting
// the store's types into core's (types.go) where core receives them.

func (s *Service) get(ctx context.Context, name string) (Info, error) {
	i, err := s.store.Get(ctx, name)
	return infoOf(i), err
}

func (s *Service) resolve(ctx context.Context, name string) (Template, error) {
	t, err := s.store.Resolve(ctx, name)
	return templateOf(t), err
}

func (s *Service) wait(ctx context.Context, name string) (WaitInfo, error) {
	w, err := s.store.Wait(ctx, name)
	return waitInfoOf(w), err
}

func (s *Service) acquireWithin(ctx context.Context, name string, n int64, maxWait, within time.Duration) (Decision, error) {
	d, err := s.store.AcquireWithin(ctx, name, n, maxWait, within)
	return decisionOf(d), err
}

func (s *Service) acquireSlotStored(ctx context.Context, name string) (SlotLease, error) {
	l, err := s.store.AcquireSlot(ctx, name)
	return slotLeaseOf(l), err
}

func (s *Service) getTemplate(ctx context.Context, id string) (Template, error) {
	t, err := s.store.GetTemplate(ctx, id)
	return templateOf(t), err
}

func decisionsOf(ds []store.Decision) []Decision {
	out := make([]Decision, len(ds))
	for i, d := range ds {
		out[i] = decisionOf(d)
	}
	return out
}
