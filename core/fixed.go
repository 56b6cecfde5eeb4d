package core

import (
	"context"
	"errors"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/store"
)

// Counting is Options.Counting.
func (s *Service) Counting() Counting { return s.counting }

// fixedOf is the fixed window the counts of info, an instance, are in: its
// template's, when the template counts in fixed windows (as Redis holds it).
func (s *Service) fixedOf(ctx context.Context, info limitd.Info) (FixedWindow, bool, error) {
	if info.Template == "" {
		return FixedWindow{}, false, nil
	}
	t, err := s.store.Resolve(ctx, info.Name)
	if errors.Is(err, store.ErrNotFound) {
		return FixedWindow{}, false, nil
	}
	if err != nil {
		return FixedWindow{}, false, err
	}
	limit, period, ok := t.FixedWindow()
	if !t.FixedWindows || !ok || t.ID != info.Template {
		return FixedWindow{}, false, nil
	}
	return FixedWindow{Limit: limit, Period: period}, true, nil
}

// fixedView is the view of info, an instance counting in the fixed window f,
// read without counting. Its TTL is the time to the window's end once it
// has counted (the key outlives it, never to be counted again).
func (s *Service) fixedView(ctx context.Context, info limitd.Info, f FixedWindow) (Limiter, error) {
	w, err := s.store.FixedWait(ctx, info.Name, f)
	if err != nil {
		return Limiter{}, err
	}
	w.Version = info.Version
	var ttl int64
	if w.Started {
		ttl = w.Position - w.Now
	}
	return Limiter{Info: info, State: &w, TTL: ttl}, nil
}

func (s *Service) fixedWait(ctx context.Context, info limitd.Info, f FixedWindow) (limitd.WaitInfo, error) {
	l, err := s.fixedView(ctx, info, f)
	if err != nil {
		return limitd.WaitInfo{}, err
	}
	return *l.State, nil
}

// fixedInstance tells whether name is an instance counting in fixed
// windows, with its info (read only when such a template matches name).
func (s *Service) fixedInstance(ctx context.Context, name string) (info limitd.Info, f FixedWindow, ok bool, err error) {
	t, err := s.store.Resolve(ctx, name)
	if errors.Is(err, store.ErrNotFound) || err == nil && !t.FixedWindows {
		return info, f, false, nil
	}
	if err != nil {
		return info, f, false, err
	}
	info, err = s.info(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return info, f, false, nil
	}
	if err != nil {
		return info, f, false, err
	}
	f, ok, err = s.fixedOf(ctx, info)
	return info, f, ok, err
}

// resetFixed deletes the window counts of name, if it is an instance
// counting in fixed windows, after its state was reset or deleted. Not in
// the state's script: no script of the state touches the counts' keys, so
// the two idempotent steps commute, and a call counted between them counts
// as one made before the reset.
func (s *Service) resetFixed(ctx context.Context, name string) error {
	_, f, ok, err := s.fixedInstance(ctx, name)
	if err != nil || !ok {
		return err
	}
	return s.store.FixedReset(ctx, name, f)
}
