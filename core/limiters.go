package core

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

// Limiter is a limiter with its live state. Share and concurrency limiters
// have no schedule, so no state: State is nil for them.
type Limiter struct {
	Info
	State   *WaitInfo // a rate limiter's
	Holders *Holders  // a share or concurrency limiter's
}

// view returns info with its live state: a rate limiter's schedule, or a
// lease limiter's holders.
func (s *Service) view(ctx context.Context, info Info) (Limiter, error) {
	if !limiter.IsRate(info.Config.Kind) {
		start := time.Now()
		h, err := s.store.Holders(ctx, info.Name)
		s.timed(OpHolders, start)
		if err != nil {
			return Limiter{}, err
		}
		return Limiter{Info: info, Holders: holdersOf(&h)}, nil
	}
	start := time.Now()
	w, err := s.wait(ctx, info.Name)
	s.timed(OpWait, start)
	if err != nil {
		return Limiter{}, err
	}
	return Limiter{Info: info, State: &w}, nil
}

// Views returns the live state of each limiter of infos (as List or Get
// read them): out[i] and errs[i] are what view answers for infos[i], the
// rate limiters' read in one pipeline (store.WaitMany), the others one by
// one. It is how a scrape or a sampler reads many limiters.
func (s *Service) Views(ctx context.Context, infos []Info) (out []Limiter, errs []error) {
	out, errs = make([]Limiter, len(infos)), make([]error, len(infos))
	var rate []int
	var names []string
	for i, info := range infos {
		if limiter.IsRate(info.Config.Kind) {
			rate, names = append(rate, i), append(names, info.Name)
			continue
		}
		out[i], errs[i] = s.view(ctx, info)
	}
	if len(names) == 0 {
		return out, errs
	}
	start := time.Now()
	ws, werrs := s.store.WaitMany(ctx, names)
	s.timed(OpWaitMany, start)
	for j, i := range rate {
		if errs[i] = werrs[j]; errs[i] == nil {
			w := waitInfoOf(ws[j])
			out[i] = Limiter{Info: infos[i], State: &w}
		}
	}
	return out, errs
}

// Put creates (created: true) or replaces a limiter; see store.Put.
func (s *Service) Put(ctx context.Context, name string, cfg limiter.Config) (l Limiter, created bool, err error) {
	start := time.Now()
	info, created, err := s.store.Put(ctx, name, cfg)
	s.timed(OpPut, start)
	if err != nil {
		return Limiter{}, false, specFault(err, cfg.Spec, "")
	}
	s.slots.set(name, info.Config.Kind == limiter.KindConcurrency)
	l, err = s.view(ctx, infoOf(info))
	return l, created, err
}

// Get returns a limiter with its live state.
func (s *Service) Get(ctx context.Context, name string) (Limiter, error) {
	start := time.Now()
	info, err := s.get(ctx, name)
	s.timed(OpGet, start)
	if err != nil {
		return Limiter{}, err
	}
	return s.view(ctx, info)
}

// Patch reconfigures a limiter in place with the config change makes of its
// canonical config (a JSON merge patch, in the HTTP API). A kind change is
// ErrConflict: Put replaces.
func (s *Service) Patch(ctx context.Context, name string, change func(cur limiter.Config) (limiter.Config, error)) (Limiter, error) {
	start := time.Now()
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
	s.timed(OpPatch, start)
	if err != nil {
		return Limiter{}, err
	}
	return s.view(ctx, infoOf(info))
}

// Delete removes a limiter and its state.
func (s *Service) Delete(ctx context.Context, name string) error {
	start := time.Now()
	err := s.store.Delete(ctx, name)
	s.timed(OpDelete, start)
	if err != nil {
		return err
	}
	s.slots.set(name, false)
	return nil
}

// Page is one page of limiters in name order, without their state; Next is
// the cursor of the next page, "" after the last.
type Page struct {
	Limiters []Info
	Next     string
}

// List returns the page of at most limit limiters (DefaultListLimit when
// the caller has no preference) after cursor ("" for the first).
func (s *Service) List(ctx context.Context, cursor string, limit int) (Page, error) {
	if limit < 1 || limit > MaxListLimit {
		return Page{}, invalid("limit", fmt.Sprintf("must be an integer ≥ 1 and ≤ %d", MaxListLimit), limit)
	}
	if cursor != "" && store.CheckName(cursor) != nil {
		return Page{}, invalid("cursor", "must be the \"next\" of the previous page, a limiter name", quoted(cursor))
	}
	start := time.Now()
	infos, next, err := s.store.List(ctx, cursor, limit)
	s.timed(OpList, start)
	if err != nil {
		return Page{}, err
	}
	page := Page{Limiters: make([]Info, len(infos)), Next: next}
	for i, info := range infos {
		page.Limiters[i] = infoOf(info)
	}
	return page, nil
}

// Wait returns the live state of a limiter (or template instance) without
// changing it.
func (s *Service) Wait(ctx context.Context, name string) (WaitInfo, error) {
	start := time.Now()
	w, err := s.wait(ctx, name)
	s.timed(OpWait, start)
	if err != nil {
		return WaitInfo{}, err
	}
	return w, nil
}

// Reset starts a new schedule now (the backlog is forfeited, totals kept)
// and returns the state after it.
func (s *Service) Reset(ctx context.Context, name string) (WaitInfo, error) {
	start := time.Now()
	_, err := s.store.Reset(ctx, name)
	s.timed(OpReset, start)
	if err != nil {
		return WaitInfo{}, err
	}
	return s.Wait(ctx, name)
}
