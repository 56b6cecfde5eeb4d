package envoyrules

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/limiter"
)

// Request is one checked descriptor of a request (Override nil: none).
type Request struct {
	Entries  []Entry
	Hits     uint64
	Override *Override
}

// Counters turns a request's descriptors in domain into core's counters and
// the rule that answers each (nil: none, or one another matched rule
// replaces); put puts an override's template in Redis before it counts.
func (r *Rules) Counters(domain string, ds []Request, put func(limitd.Template) error) ([]core.Counter, []*Rule, error) {
	matched := make([]*Rule, len(ds))
	names := make([]string, len(ds)) // an override's counter
	replaced := map[string]bool{}
	for i, d := range ds {
		if d.Override != nil && r.Has(domain) {
			rl, name, t, err := d.Override.rule(domain, d.Entries)
			if err != nil {
				return nil, nil, fieldErr(fmt.Sprintf("descriptors[%d].limit", i), err.Error(), nil)
			}
			if err := put(t); err != nil {
				return nil, nil, err
			}
			matched[i], names[i] = rl, name
			continue
		}
		if matched[i] = r.match(domain, d.Entries); matched[i] != nil {
			for _, n := range matched[i].replaces {
				replaced[n] = true
			}
		}
	}
	cs := make([]core.Counter, len(ds))
	for i, d := range ds {
		rl, c := matched[i], &cs[i]
		c.Hits = int64(d.Hits)
		switch {
		case rl == nil:
		case names[i] != "":
			c.Name, c.Fixed = names[i], rl.fixed
		case rl.Unlimited: // never replaced, as the reference has it
			c.Unlimited = true
		case rl.Name != "" && replaced[rl.Name]: // another matched rule replaces it: no limit
			matched[i] = nil
		default:
			c.Name, c.Quota, c.Fixed = rl.counter(d.Entries), rl.quota, rl.fixed
		}
	}
	return cs, matched, nil
}

// Override is a descriptor's own limit (Envoy's limit override), counted
// as docs/envoy.md tells: in a domain the rules know, in place of whatever
// rule the descriptor matches, in a template of its limit and unit
// ("envoy.override.<unit>.<limit>") put in Redis the first time this
// process meets it.
type Override struct {
	Limit uint32
	Unit  Unit
}

// UnitPeriod is a unit's window, by name.
func UnitPeriod(u Unit) (string, bool) {
	name := strings.ToLower(unitNames[u])
	_, ok := units[name]
	return name, ok
}

// rule is the override as a rule of domain for entries, with its counter's
// name and template.
func (o *Override) rule(domain string, entries []Entry) (*Rule, string, limitd.Template, error) {
	name, _ := UnitPeriod(o.Unit)
	cfg, err := limiter.WindowConfig(int64(o.Limit), units[name].period)
	if err != nil {
		return nil, "", limitd.Template{}, err
	}
	id := TemplatePrefix + "override." + name + "." + strconv.FormatUint(uint64(o.Limit), 10)
	t := limitd.Template{ID: id, Pattern: id + ":*", Order: templateOrder, Limiter: cfg, FixedWindows: true}
	rl := &Rule{Domain: domain, label: labelOf(entries), template: t.ID, Unit: o.Unit, Limit: o.Limit, config: t.Limiter,
		fixed: &core.FixedWindow{Limit: int64(o.Limit), Period: units[name].period}}
	parts := []string{domain}
	for _, e := range entries {
		parts = append(parts, e.Key, e.Value)
	}
	// hashed as pairs of entries, the domain's with an empty value
	hashed := append([]string{domain, ""}, parts[1:]...)
	return rl, counterName(t.ID, parts, hashed), t, nil
}
