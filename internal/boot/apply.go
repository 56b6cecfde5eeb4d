package boot

import (
	"context"
	"fmt"
	"slices"

	"github.com/limitd/limitd/core"
)

// Apply writes every limiter and template of the file through svc, then
// its mark (core.Service.Mark). The file was checked whole when loaded, so
// only Redis can fail here.
func (b *File) Apply(ctx context.Context, svc *core.Service) error {
	return b.applySome(ctx, svc, nil, nil)
}

// applySome writes the named limiters and templates of the file (all of
// them when both lists are nil), then the mark.
func (b *File) applySome(ctx context.Context, svc *core.Service, limiters, templates []string) error {
	all := limiters == nil && templates == nil
	for _, l := range b.Limiters {
		if !all && !slices.Contains(limiters, l.Name) {
			continue
		}
		if _, _, err := svc.Put(ctx, l.Name, l.Config); err != nil {
			return fmt.Errorf("limiter %q: %w", l.Name, err)
		}
	}
	for _, t := range b.Templates {
		if !all && !slices.Contains(templates, t.ID) {
			continue
		}
		if _, _, err := svc.PutTemplate(ctx, t); err != nil {
			return fmt.Errorf("template %q: %w", t.ID, err)
		}
	}
	if err := svc.Mark(ctx, b.Sum); err != nil {
		return fmt.Errorf("boot mark: %w", err)
	}
	return nil
}

func (b *File) names() (limiters, templates []string) {
	for _, l := range b.Limiters {
		limiters = append(limiters, l.Name)
	}
	for _, t := range b.Templates {
		templates = append(templates, t.ID)
	}
	return limiters, templates
}
