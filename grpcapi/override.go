package grpcapi

import (
	"context"
	"sync"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/envoyrules"
)

// overrideOf reads a descriptor's limit; nil without one. The unit must be
// one the protocol names (the reference cannot count UNKNOWN either);
// unit_multiplier is not read, as the reference does not read it.
func overrideOf(i int, l *rlcommon.RateLimitDescriptor_RateLimitOverride) (*envoyrules.Override, error) {
	if l == nil {
		return nil, nil
	}
	u := envoyrules.Unit(l.GetUnit())
	if _, ok := envoyrules.UnitPeriod(u); !ok {
		return nil, invalidArg("descriptors[%d].limit.unit: must be one of SECOND, MINUTE, HOUR, DAY, WEEK, MONTH, YEAR (got %v)", i, l.GetUnit())
	}
	return &envoyrules.Override{Limit: l.GetRequestsPerUnit(), Unit: u}, nil
}

// overrides are the override templates this process has put in Redis.
type overrides struct {
	mu  sync.Mutex
	put map[string]bool
}

// maxOverrideTemplates bounds the templates remembered as put; past it they
// start over (put again, a template is unchanged).
const maxOverrideTemplates = 4096

func (s *Server) ensureOverride(ctx context.Context, t limitd.Template) error {
	s.overrides.mu.Lock()
	done := s.overrides.put[t.ID]
	s.overrides.mu.Unlock()
	if done {
		return nil
	}
	if _, _, err := s.svc.PutTemplate(ctx, t); err != nil {
		return err
	}
	s.overrides.mu.Lock()
	defer s.overrides.mu.Unlock()
	if s.overrides.put == nil || len(s.overrides.put) >= maxOverrideTemplates {
		s.overrides.put = map[string]bool{}
	}
	s.overrides.put[t.ID] = true
	return nil
}

// forgetOverrides makes the next call put its templates again (Redis lost
// them).
func (s *Server) forgetOverrides() {
	s.overrides.mu.Lock()
	defer s.overrides.mu.Unlock()
	clear(s.overrides.put)
}
