package core

import (
	"context"
	"errors"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/store"
)

// Counting is Options.Counting: how the Envoy rules count (a front end
// counting them asks with it).
func (s *Service) Counting() Counting { return s.counting }

// fixedOf is the fixed window the counts of info, an instance, are in:
// its template's, when the template counts in fixed windows
// (limitd.Template.FixedWindows, as Redis holds it: whichever process
// counts them). Templates are cached: no round trip as a rule.
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

// fixedView is the view of info, an instance counting in the fixed window f:
// that window's count, its end and Redis' time, read without counting. Its
// TTL is the time to the window's end once it has counted (the count's key
// outlives it by up to a period and a second, never to be counted again).
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

// fixedWait is fixedView's state.
func (s *Service) fixedWait(ctx context.Context, info limitd.Info, f FixedWindow) (limitd.WaitInfo, error) {
	l, err := s.fixedView(ctx, info, f)
	if err != nil {
		return limitd.WaitInfo{}, err
	}
	return *l.State, nil
}

// fixedInstance tells whether name is an instance counting in fixed
// windows (fixedOf), with its info. It reads the info only when a template
// that counts in fixed windows matches name.
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
// counting in fixed windows (store.FixedReset), after its state was reset
// or deleted. Not in the same script as the state: the windows' counts are
// plain keys no script of the state reads or writes, so the two steps
// commute, and a call counted between them counts as one made before the
// reset, which a reset forgets. Both steps are idempotent: a reset that
// failed between them is done whole by the next.
func (s *Service) resetFixed(ctx context.Context, name string) error {
	_, f, ok, err := s.fixedInstance(ctx, name)
	if err != nil || !ok {
		return err
	}
	return s.store.FixedReset(ctx, name, f)
}
