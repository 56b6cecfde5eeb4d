package core

import (
	"context"

	"github.com/limitd/limitd"
)

// Shadow mode (docs/concepts.md): a refusal is reported as granted with
// Decision.Shadow set, takes nothing, and is observed as "shadow"; a slot,
// as a grant without a lease. Only a refusal asks whether its limiter is in
// shadow mode.

// shadowGrant is d, a refusal in shadow mode of n permits, as reported: a
// grant that starts now and took nothing.
func shadowGrant(d limitd.Decision, n int64) limitd.Decision {
	return limitd.Decision{Granted: true, Shadow: true, Permits: n, Scheduled: d.Now, Start: d.Now,
		Wait: d.Wait, RetryAfter: d.RetryAfter, Version: d.Version, Now: d.Now, Instance: d.Instance, Position: d.Position}
}

// inShadow reports whether the limiter that refused d is in shadow mode,
// its own or the service's. Unknown (Redis failing) is false.
func (s *Service) inShadow(ctx context.Context, name string, d limitd.Decision) bool {
	return s.shadow || s.limiterShadow(ctx, name, d)
}

// limiterShadow reports whether the limiter that decided d (a template
// instance when d.Instance) is in shadow mode by its own config.
func (s *Service) limiterShadow(ctx context.Context, name string, d limitd.Decision) bool {
	if d.Instance {
		t, err := s.store.Resolve(ctx, name)
		return err == nil && t.Limiter.Shadow
	}
	if h, ok := s.shadows.get(name); ok && h.version == d.Version {
		return h.shadow
	}
	info, err := s.store.Get(ctx, name)
	if err != nil {
		return false
	}
	s.shadows.set(name, shadowHint{info.Version, info.Config.Shadow})
	return info.Config.Shadow
}

// slotInShadow reports whether the concurrency limiter name is in shadow
// mode.
func (s *Service) slotInShadow(ctx context.Context, name string) bool {
	if s.shadow {
		return true
	}
	info, err := s.store.Get(ctx, name)
	return err == nil && info.Config.Shadow
}

type shadowHint struct {
	version int64
	shadow  bool
}
