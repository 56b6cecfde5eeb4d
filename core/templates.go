package core

import (
	"context"
	"errors"
	"time"

	"github.com/limitd/limitd/store"
)

// PutTemplate creates (created: true) or replaces a template.
func (s *Service) PutTemplate(ctx context.Context, t Template) (out Template, created bool, err error) {
	if err := store.CheckNameAs("id", t.ID); err != nil {
		return Template{}, false, err
	}
	start := time.Now()
	_, err = s.getTemplate(ctx, t.ID)
	s.timed(OpGetTemplate, start)
	created = errors.Is(err, store.ErrNotFound)
	if err != nil && !created {
		return Template{}, false, err
	}
	start = time.Now()
	st, err := s.store.PutTemplate(ctx, t.stored())
	s.timed(OpPutTemplate, start)
	if err != nil {
		return Template{}, false, specFault(err, t.Limiter.Spec, "limiter")
	}
	return templateOf(st), created, nil
}

// GetTemplate returns a template.
func (s *Service) GetTemplate(ctx context.Context, id string) (Template, error) {
	if err := store.CheckNameAs("id", id); err != nil {
		return Template{}, err
	}
	start := time.Now()
	t, err := s.getTemplate(ctx, id)
	s.timed(OpGetTemplate, start)
	return t, err
}

// Instances counts the live instances of template id: exact, or estimated
// from a sample of the keys when Redis holds many (see store.InstanceCount).
func (s *Service) Instances(ctx context.Context, id string) (n int64, exact bool, err error) {
	t, err := s.GetTemplate(ctx, id)
	if err != nil {
		return 0, false, err
	}
	start := time.Now()
	n, exact, err = s.store.InstanceCount(ctx, t.Pattern)
	s.timed(OpInstances, start)
	return n, exact, err
}

// DeleteTemplate removes a template.
func (s *Service) DeleteTemplate(ctx context.Context, id string) error {
	if err := store.CheckNameAs("id", id); err != nil {
		return err
	}
	start := time.Now()
	err := s.store.DeleteTemplate(ctx, id)
	s.timed(OpDeleteTemplate, start)
	return err
}

// Templates returns every template in matching order.
func (s *Service) Templates(ctx context.Context) ([]Template, error) {
	start := time.Now()
	ts, err := s.store.Templates(ctx)
	s.timed(OpTemplates, start)
	return templatesOf(ts), err
}
