package core

import (
	"context"

	"github.com/limitd/limitd"
)

// Shadow mode: a limiter whose config says "shadow": true (or every limiter,
// with Options.Shadow) decides and counts as usual but never refuses. A
// refusal is reported as granted, with Decision.Shadow set, and takes
// nothing; the observer sees outcome "shadow" (so metrics count what the
// limit would have refused). The service applies it to the acquires of rate
// limiters (Acquire, AcquireAll) and of concurrency slots (a refusal is a
// grant without a lease: SlotLease.Shadow, nothing to renew or release), so
// every front end gets it. A pool's grant (Grant) is left as decided, its
// permits having a place on the schedule; a share limiter never refuses (it
// gives less), so shadow has no effect there.
//
// Only a refusal asks whether its limiter is in shadow mode: a named
// limiter's config (remembered by version, which every decision carries),
// a template instance's template (the store's template cache).

// shadowGrant is d, a refusal in shadow mode of n permits, as reported: a
// grant that starts now and took nothing.
func shadowGrant(d limitd.Decision, n int64) limitd.Decision {
	return limitd.Decision{Granted: true, Shadow: true, Permits: n, Scheduled: d.Now, Start: d.Now,
		Wait: d.Wait, RetryAfter: d.RetryAfter, Version: d.Version, Now: d.Now, Instance: d.Instance, Position: d.Position}
}

// inShadow reports whether the limiter that refused d (name; d.Instance: a
// template's instance) is in shadow mode, its own or the service's.
// Unknown (Redis failing) is false: the refusal stands.
func (s *Service) inShadow(ctx context.Context, name string, d limitd.Decision) bool {
	return s.shadow || s.limiterShadow(ctx, name, d)
}

// limiterShadow reports whether the limiter that decided d (name; a
// template instance when d.Instance) is in shadow mode by its own config,
// whatever the service's global shadow mode says.
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

// slotInShadow reports whether the concurrency limiter name, which refused
// a slot, is in shadow mode: its refusal is then a grant without a lease
// (SlotLease.Shadow), which its holder neither renews nor releases.
func (s *Service) slotInShadow(ctx context.Context, name string) bool {
	if s.shadow {
		return true
	}
	info, err := s.store.Get(ctx, name)
	return err == nil && info.Config.Shadow
}

// shadowHint is a named limiter's shadow mode as of a config version.
type shadowHint struct {
	version int64
	shadow  bool
}
