package core

import (
	"context"
	"errors"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

// FixedTemplates says which templates' instances count in fixed windows of
// their own (Counter.Fixed, under CountEvery) rather than in their state:
// the Envoy rules' rate_limit templates, as the front end that counts them
// knows them (grpcapi, from envoyrules.Rules). A view of such an instance
// (Get, Views, Wait) reads the count of its window now, as the next call
// counting in it would see it, not its state, which those calls never touch.
type FixedTemplates interface {
	FixedWindow(template string) (FixedWindow, bool)
}

// SetFixedTemplates sets the templates whose instances count in fixed
// windows (nil: none, every instance counts in its state); the views that
// start after it read them.
func (s *Service) SetFixedTemplates(f FixedTemplates) {
	if f == nil {
		s.fixed.Store(nil)
		return
	}
	s.fixed.Store(&f)
}

// fixedOf is the fixed window info's counts are in, if info is an instance
// of a template of SetFixedTemplates.
func (s *Service) fixedOf(info limitd.Info) (FixedWindow, bool) {
	f := s.fixed.Load()
	if f == nil || info.Template == "" || !limiter.Counts(info.Config.Kind) {
		return FixedWindow{}, false
	}
	return (*f).FixedWindow(info.Template)
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

// fixedInstance reads name's info where some templates count in fixed
// windows: ok says name is an instance of one, counting in f. Without such
// templates it reads nothing.
func (s *Service) fixedInstance(ctx context.Context, name string) (info limitd.Info, f FixedWindow, ok bool, err error) {
	if s.fixed.Load() == nil {
		return info, f, false, nil
	}
	info, err = s.info(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return info, f, false, nil
	}
	if err != nil {
		return info, f, false, err
	}
	f, ok = s.fixedOf(info)
	return info, f, ok, nil
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
