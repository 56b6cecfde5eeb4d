package core

import (
	"context"
	"errors"

	"github.com/limitd/limitd"
)

// Sampler reads the same limiters again and again: it keeps each config
// and reads it again only when the version moved (Changed, or the live
// state answered another version) or the kind changed, so a sample reads
// the live states alone (Views). It is not safe for concurrent use.
type Sampler struct {
	s     *Service
	infos map[string]limitd.Info
}

// Sampler returns a Sampler that keeps nothing yet.
func (s *Service) Sampler() *Sampler { return &Sampler{s: s, infos: map[string]limitd.Info{}} }

// Changed forgets the config kept for name: a change to it was published.
func (p *Sampler) Changed(name string) { delete(p.infos, name) }

// GetAll is Service.Get for each of names: out[i] and errs[i] are names[i]'s.
func (p *Sampler) GetAll(ctx context.Context, names []string) (out []Limiter, errs []error) {
	out, errs = make([]Limiter, len(names)), make([]error, len(names))
	var kept []int
	var infos []limitd.Info
	for i, n := range names {
		if info, ok := p.infos[n]; ok {
			kept, infos = append(kept, i), append(infos, info)
		}
	}
	done := make([]bool, len(names))
	views, verrs := p.s.Views(ctx, infos)
	for j, i := range kept {
		l, err := views[j], verrs[j]
		switch {
		case err == nil && l.version() == infos[j].Version:
			out[i], done[i] = l, true
		case errors.Is(err, ErrNotFound):
			delete(p.infos, names[i])
			errs[i], done[i] = err, true
		case err != nil && !errors.Is(err, ErrConflict):
			errs[i], done[i] = err, true
		}
		// Otherwise another version, or another kind: read the config again.
	}
	for i, n := range names {
		if done[i] {
			continue
		}
		if out[i], errs[i] = p.s.Get(ctx, n); errs[i] != nil {
			delete(p.infos, n)
		} else {
			p.infos[n] = out[i].Info
		}
	}
	return out, errs
}

// version is the config version l's live state was read at.
func (l Limiter) version() int64 {
	if l.Holders != nil {
		return l.Holders.Version
	}
	return l.State.Version
}
