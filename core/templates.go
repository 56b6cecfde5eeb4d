package core

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/store"
)

// PutTemplate creates (created: true) or replaces a template. Under
// CountStrict (Options.Counting) it is put without FixedWindows.
func (s *Service) PutTemplate(ctx context.Context, t limitd.Template) (out limitd.Template, created bool, err error) {
	t.FixedWindows = t.FixedWindows && s.counting == CountEvery
	if err := limitd.CheckNameAs("id", t.ID); err != nil {
		return limitd.Template{}, false, err
	}
	_, err = s.store.GetTemplate(ctx, t.ID)
	created = errors.Is(err, store.ErrNotFound)
	if err != nil && !created {
		return limitd.Template{}, false, err
	}
	st, err := s.store.PutTemplate(ctx, t)
	if err != nil {
		return limitd.Template{}, false, specFault(err, t.Limiter.Spec, "limiter")
	}
	return st, created, nil
}

// GetTemplate returns a template.
func (s *Service) GetTemplate(ctx context.Context, id string) (limitd.Template, error) {
	if err := limitd.CheckNameAs("id", id); err != nil {
		return limitd.Template{}, err
	}
	return s.store.GetTemplate(ctx, id)
}

// Instances counts the live instances of template id (store.InstanceCount).
func (s *Service) Instances(ctx context.Context, id string) (n int64, exact bool, err error) {
	t, err := s.GetTemplate(ctx, id)
	if err != nil {
		return 0, false, err
	}
	return s.store.InstanceCount(ctx, t.Pattern)
}

// DeleteTemplate removes a template.
func (s *Service) DeleteTemplate(ctx context.Context, id string) error {
	if err := limitd.CheckNameAs("id", id); err != nil {
		return err
	}
	return s.store.DeleteTemplate(ctx, id)
}

// Templates returns every template in matching order.
func (s *Service) Templates(ctx context.Context) ([]limitd.Template, error) {
	return s.store.Templates(ctx)
}

const (
	DefaultTopLimit   = 10
	MaxTopLimit       = 100
	DefaultTopMinutes = 5
	MaxTopMinutes     = store.TopMinutes
)

// TopInstances are a template's busiest instances since Since (Unix ns,
// Redis clock: the start of the oldest minute counted), largest first.
type TopInstances struct {
	Since     int64
	Instances []limitd.TopInstance
}

// Top returns template id's busiest instances by "refused" or "granted"
// permits over the last minutes (the current one counts), at most limit, as
// every limitd's Ledger on the Redis counted them.
func (s *Service) Top(ctx context.Context, id, by string, limit, minutes int) (TopInstances, error) {
	if by != "refused" && by != "granted" {
		return TopInstances{}, invalid("by", `must be "refused" or "granted"`, fmt.Sprintf("%q", by))
	}
	if limit < 1 || limit > MaxTopLimit {
		return TopInstances{}, invalid("limit", fmt.Sprintf("must be an integer ≥ 1 and ≤ %d", MaxTopLimit), limit)
	}
	if minutes < 1 || minutes > MaxTopMinutes {
		return TopInstances{}, invalid("minutes", fmt.Sprintf("must be an integer ≥ 1 and ≤ %d", MaxTopMinutes), minutes)
	}
	if _, err := s.GetTemplate(ctx, id); err != nil {
		return TopInstances{}, err
	}
	since, top, err := s.store.Top(ctx, id, by == "refused", limit, minutes)
	if err != nil {
		return TopInstances{}, err
	}
	return TopInstances{Since: since, Instances: top}, nil
}

// instancesFor is how long CachedInstances reuses a count: a count scans keys.
const instancesFor = 5 * time.Second

type instanceCount struct {
	pattern string
	n       int64
	exact   bool
	at      time.Time
}

// CachedInstances is Instances of t, reusing a count of the same pattern
// made in the last instancesFor, so that a polling page does not scan Redis.
func (s *Service) CachedInstances(ctx context.Context, t limitd.Template) (n int64, exact bool, err error) {
	v, ok := s.instances.get(t.ID)
	if ok && v.pattern == t.Pattern && s.clock.Now().Sub(v.at) < instancesFor {
		return v.n, v.exact, nil
	}
	n, exact, err = s.store.InstanceCount(ctx, t.Pattern)
	if err != nil {
		return 0, false, err
	}
	s.instances.set(t.ID, instanceCount{pattern: t.Pattern, n: n, exact: exact, at: s.clock.Now()})
	return n, exact, nil
}
