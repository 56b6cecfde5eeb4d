package core

import (
	"context"
	"errors"
)

// Sampler reads the same limiters again and again, as an event stream
// samples them, at one Redis read per limiter and sample: it keeps each
// limiter's config and reads it again only when the limiter's version moved
// (Changed was told, or its live state answered another version) or its
// live state could not be read as its kind's (a PUT of another kind). A
// sampler is not safe for concurrent use: it belongs to one stream.
type Sampler struct {
	s     *Service
	infos map[string]Info
}

// Sampler returns a Sampler that keeps nothing yet.
func (s *Service) Sampler() *Sampler { return &Sampler{s: s, infos: map[string]Info{}} }

// Changed forgets the config kept for name: a change to it was published,
// and the next Get reads it.
func (p *Sampler) Changed(name string) { delete(p.infos, name) }

// Get is Service.Get, with the config kept while the limiter's version is
// the one it was read at.
func (p *Sampler) Get(ctx context.Context, name string) (Limiter, error) {
	if info, ok := p.infos[name]; ok {
		l, err := p.s.view(ctx, info)
		switch {
		case err == nil && l.version() == info.Version:
			return l, nil
		case errors.Is(err, ErrNotFound):
			delete(p.infos, name)
			return Limiter{}, err
		case err != nil && !errors.Is(err, ErrConflict):
			return Limiter{}, err
		}
		// Another version, or another kind: read the config again.
	}
	l, err := p.s.Get(ctx, name)
	if err != nil {
		delete(p.infos, name)
		return Limiter{}, err
	}
	p.infos[name] = l.Info
	return l, nil
}

// version is the config version l's live state was read at.
func (l Limiter) version() int64 {
	if l.Holders != nil {
		return l.Holders.Version
	}
	return l.State.Version
}
