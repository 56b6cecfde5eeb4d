package core

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

// Limiter is a limiter with its live state.
type Limiter struct {
	limitd.Info
	State   *limitd.WaitInfo // a rate limiter's
	Holders *limitd.Holders  // a share or concurrency limiter's
	// Totals are its decisions counted by every limitd on the Redis; nil
	// for a template instance, whose decisions count under its template
	// (see Service.Top): its own would cost a write a second per key.
	Totals *Totals
	// TTL is a template instance's remaining time to live of its state, ns;
	// 0 while it has none.
	TTL int64
}

// Totals count a limiter's decisions, across every limitd sharing the
// Redis. A refusal in shadow mode counts as refused; a charge as granted.
type Totals = limitd.Counts

func (s *Service) view(ctx context.Context, info limitd.Info) (Limiter, error) {
	l, err := s.viewState(ctx, info)
	if err != nil || info.Template != "" {
		return l, err
	}
	ts, err := s.store.Totals(ctx, []string{info.Name})
	if err != nil {
		return Limiter{}, err
	}
	l.Totals = &ts[0]
	return l, nil
}

func (s *Service) viewState(ctx context.Context, info limitd.Info) (Limiter, error) {
	if !limiter.IsRate(info.Config.Kind) {
		h, err := s.store.Holders(ctx, info.Name)
		if err != nil {
			return Limiter{}, err
		}
		return Limiter{Info: info, Holders: &h}, nil
	}
	f, ok, err := s.fixedOf(ctx, info)
	if err != nil {
		return Limiter{}, err
	}
	if ok {
		return s.fixedView(ctx, info, f)
	}
	var ttl int64
	if info.Template != "" {
		if ttl, err = s.store.InstanceTTL(ctx, info.Name); err != nil {
			return Limiter{}, err
		}
	}
	w, err := s.store.Wait(ctx, info.Name)
	if err != nil {
		return Limiter{}, err
	}
	freshWindow(&w, info.Config)
	return Limiter{Info: info, State: &w, TTL: ttl}, nil
}

// freshWindow gives a window limiter that has not counted yet the end of
// the window now as its position (a started one's comes from Redis).
func freshWindow(w *limitd.WaitInfo, cfg limiter.Config) {
	if !w.Window || w.Started {
		return
	}
	if p, err := limiter.Compile(cfg); err == nil { // w.Window: cfg is a window's
		w.Position = p.WindowEnd(w.Now)
	}
}

// Views is view of each of infos: out[i] and errs[i] are infos[i]'s, the
// rate limiters' read in one pipeline (store.WaitMany).
func (s *Service) Views(ctx context.Context, infos []limitd.Info) (out []Limiter, errs []error) {
	out, errs = make([]Limiter, len(infos)), make([]error, len(infos))
	var rate []int
	var names []string
	for i, info := range infos {
		if limiter.IsRate(info.Config.Kind) && info.Template == "" {
			rate, names = append(rate, i), append(names, info.Name)
			continue
		}
		out[i], errs[i] = s.viewState(ctx, info)
	}
	if len(names) > 0 {
		ws, werrs := s.store.WaitMany(ctx, names)
		for j, i := range rate {
			if errs[i] = werrs[j]; errs[i] == nil {
				w := ws[j]
				freshWindow(&w, infos[i].Config)
				out[i] = Limiter{Info: infos[i], State: &w}
			}
		}
	}
	if len(infos) == 0 {
		return out, errs
	}
	all := make([]string, len(infos))
	for i, info := range infos {
		all[i] = info.Name
	}
	ts, err := s.store.Totals(ctx, all)
	for i := range infos {
		if errs[i] == nil && err != nil {
			errs[i] = err
		} else if errs[i] == nil && infos[i].Template == "" {
			out[i].Totals = &ts[i]
		}
	}
	return out, errs
}

// Put creates (created: true) or replaces a limiter; see store.Put.
func (s *Service) Put(ctx context.Context, name string, cfg limiter.Config) (l Limiter, created bool, err error) {
	info, created, err := s.store.Put(ctx, name, cfg)
	if err != nil {
		return Limiter{}, false, specFault(err, cfg.Spec, "")
	}
	if info.Config.Kind == limiter.KindConcurrency {
		s.slots.set(name, struct{}{})
	} else {
		s.slots.forget(name)
	}
	l, err = s.view(ctx, info)
	return l, created, err
}

// Get returns a limiter with its live state, or a template instance's
// (its Info has the template's config, version and id).
func (s *Service) Get(ctx context.Context, name string) (Limiter, error) {
	info, err := s.info(ctx, name)
	if err != nil {
		return Limiter{}, err
	}
	return s.view(ctx, info)
}

// info reads the limiter name, or else the template instance it names.
func (s *Service) info(ctx context.Context, name string) (limitd.Info, error) {
	info, err := s.store.Get(ctx, name)
	if !errors.Is(err, store.ErrNotFound) {
		return info, err
	}
	t, terr := s.store.Resolve(ctx, name) // templates are cached: no round trip
	switch {
	case errors.Is(terr, store.ErrNotFound):
		return limitd.Info{}, err
	case terr != nil:
		return limitd.Info{}, terr
	}
	return limitd.Info{Name: name, Config: t.Limiter, Version: t.Version, Template: t.ID}, nil
}

// Patch reconfigures a limiter in place with the config change makes of its
// canonical config. A kind change is ErrConflict: Put replaces.
func (s *Service) Patch(ctx context.Context, name string, change func(cur limiter.Config) (limiter.Config, error)) (Limiter, error) {
	info, err := s.store.Patch(ctx, name, func(cur limiter.Config) (limiter.Config, error) {
		next, err := change(cur)
		if err != nil {
			return limiter.Config{}, err
		}
		if k := cmp.Or(next.Kind, limiter.DefaultKind); k != cur.Kind {
			return limiter.Config{}, fmt.Errorf("%w: PATCH cannot change the kind of limiter %q from %s to %s; PUT a %s config to replace it",
				store.ErrConflict, name, cur.Kind, k, k)
		}
		if _, _, err := next.Normalize(); err != nil {
			return limiter.Config{}, specFault(err, next.Spec, "")
		}
		return next, nil
	})
	if err != nil {
		return Limiter{}, err
	}
	return s.view(ctx, info)
}

// Delete removes a limiter and its state.
func (s *Service) Delete(ctx context.Context, name string) error {
	err := s.store.Delete(ctx, name)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	s.forgetOver(name)
	// An instance's state is gone even when the store answers not found:
	// its window counts go with it.
	if ferr := s.resetFixed(ctx, name); ferr != nil {
		return ferr
	}
	if err != nil {
		return err
	}
	s.slots.forget(name)
	return nil
}

// Page is one page of limiters in name order, without their state; Next is
// the cursor of the next page, "" after the last.
type Page struct {
	Limiters []limitd.Info
	Totals   []Totals // Limiters[i]'s
	Next     string
}

// List returns the page of at most limit limiters (DefaultListLimit when
// the caller has no preference) after cursor ("" for the first).
func (s *Service) List(ctx context.Context, cursor string, limit int) (Page, error) {
	if limit < 1 || limit > MaxListLimit {
		return Page{}, invalid("limit", fmt.Sprintf("must be an integer ≥ 1 and ≤ %d", MaxListLimit), limit)
	}
	if cursor != "" && limitd.CheckName(cursor) != nil {
		return Page{}, invalid("cursor", "must be the \"next\" of the previous page, a limiter name", fmt.Sprintf("%q", cursor))
	}
	infos, next, err := s.store.List(ctx, cursor, limit)
	if err != nil {
		return Page{}, err
	}
	names := make([]string, len(infos))
	for i, info := range infos {
		names[i] = info.Name
	}
	ts, err := s.store.Totals(ctx, names)
	if err != nil {
		return Page{}, err
	}
	return Page{Limiters: infos, Totals: ts, Next: next}, nil
}

// Wait returns the live state of a limiter (or template instance) without
// changing it.
func (s *Service) Wait(ctx context.Context, name string) (limitd.WaitInfo, error) {
	if info, f, ok, err := s.fixedInstance(ctx, name); err == nil && ok {
		return s.fixedWait(ctx, info, f)
	}
	return s.waitState(ctx, name)
}

func (s *Service) waitState(ctx context.Context, name string) (limitd.WaitInfo, error) {
	w, err := s.store.Wait(ctx, name)
	if err != nil {
		return limitd.WaitInfo{}, err
	}
	if w.Window && !w.Started { // its config says when its window ends
		if info, err := s.info(ctx, name); err == nil {
			freshWindow(&w, info.Config)
		}
	}
	return w, nil
}

// Reset starts a new schedule now (the backlog forfeited, totals kept) and
// returns the state after it.
func (s *Service) Reset(ctx context.Context, name string) (limitd.WaitInfo, error) {
	if _, err := s.store.Reset(ctx, name); err != nil {
		return limitd.WaitInfo{}, err
	}
	s.forgetOver(name)
	info, f, ok, err := s.fixedInstance(ctx, name)
	if err != nil {
		return limitd.WaitInfo{}, err
	}
	if !ok {
		return s.waitState(ctx, name)
	}
	if err := s.store.FixedReset(ctx, name, f); err != nil { // see resetFixed
		return limitd.WaitInfo{}, err
	}
	return s.fixedWait(ctx, info, f)
}

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
