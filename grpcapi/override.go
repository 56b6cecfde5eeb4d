package grpcapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"sync"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/limiter"
)

// A descriptor's own limit (its limit field: Envoy's limit override, from
// a route's dynamic metadata) is counted as the reference counts it: in a
// domain the rules know, it takes the place of whatever rule the
// descriptor matches, or limits a descriptor no rule matches; it is never
// in shadow or quota mode; in a domain they do not know, nothing limits
// the descriptor. Its counter is its own: the domain, every key and value
// of the descriptor, and the override's limit and unit (the reference's
// key has the domain, the keys and values and the unit's window, without
// the limit; see the README's differences). Its hits count in the metrics
// under the reference's key of the descriptor ("key_value.key2_value2").
//
// Each limit and unit counts in a template of its own,
// "envoy.override.<unit>.<limit>", put in Redis the first time this
// process meets it.

// overrideOf reads a descriptor's limit; nil without one. The unit must be
// one the protocol names (the reference cannot count UNKNOWN either);
// unit_multiplier is not read, as the reference does not read it.
func overrideOf(i int, l *rlcommon.RateLimitDescriptor_RateLimitOverride) (*override, error) {
	if l == nil {
		return nil, nil
	}
	u := Unit(l.GetUnit())
	if _, ok := unitPeriod(u); !ok {
		return nil, invalidArg("descriptors[%d].limit.unit: must be one of SECOND, MINUTE, HOUR, DAY, WEEK, MONTH, YEAR (got %v)", i, l.GetUnit())
	}
	return &override{limit: l.GetRequestsPerUnit(), unit: u}, nil
}

// override is a descriptor's own limit.
type override struct {
	limit uint32
	unit  Unit
}

// unitPeriod is a unit's window.
func unitPeriod(u Unit) (string, bool) {
	for name, v := range units {
		if v.code == u && u != UnitUnknown {
			return name, true
		}
	}
	return "", false
}

// template is the override's template.
func (o *override) template() (core.Template, error) {
	name, _ := unitPeriod(o.unit)
	cfg, err := limiter.WindowConfig(int64(o.limit), units[name].period)
	if err != nil {
		return core.Template{}, err
	}
	id := TemplatePrefix + "override." + name + "." + strconv.FormatUint(uint64(o.limit), 10)
	return core.Template{ID: id, Pattern: id + ":*", Order: templateOrder, Limiter: cfg}, nil
}

// rule is the override as a rule of domain for entries: its counter's
// name, and what the answer and the metrics say of it.
func (o *override) rule(domain string, entries []Entry, t core.Template) (*rule, string) {
	var label strings.Builder
	for i, e := range entries {
		if i > 0 {
			label.WriteByte('.')
		}
		label.WriteString(e.Key)
		if e.Value != "" {
			label.WriteString("_" + e.Value)
		}
	}
	rl := &rule{domain: domain, label: label.String(), template: t.ID, unit: o.unit, limit: o.limit, config: t.Limiter}
	var b strings.Builder
	b.WriteString(t.ID)
	b.WriteByte(':')
	escape(&b, domain)
	for _, e := range entries {
		b.WriteByte(':')
		escape(&b, e.Key)
		b.WriteByte(':')
		escape(&b, e.Value)
	}
	if b.Len() <= maxName {
		return rl, b.String()
	}
	h := sha256.New()
	for _, v := range append([]Entry{{domain, ""}}, entries...) {
		h.Write([]byte(strconv.Itoa(len(v.Key)) + ":" + v.Key + strconv.Itoa(len(v.Value)) + ":" + v.Value))
	}
	return rl, t.ID + ":_h" + hex.EncodeToString(h.Sum(nil)[:16])
}

// overrides are the override templates this process has put in Redis.
type overrides struct {
	mu  sync.Mutex
	put map[string]bool
}

// maxOverrideTemplates bounds the templates remembered as put; past it
// they start over (a template put again is unchanged).
const maxOverrideTemplates = 4096

// ensure puts t in Redis unless this process did already.
func (s *Server) ensureOverride(ctx context.Context, t core.Template) error {
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
