package envoyrules

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/limiter"
)

// Entry is one key and value of a request's descriptor.
type Entry struct{ Key, Value string }

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

// match finds the rule of one request descriptor in domain: the most
// specific match at each level (exact value, then the first pattern in the
// config's order, then the key alone), and a rule only at the level of the
// descriptor's last entry, as the reference matches. nil: none.
func (r *Rules) match(domain string, entries []Entry) *Rule {
	n := r.domains[domain]
	if n == nil {
		return nil
	}
	for i, e := range entries {
		next := n.exact[entry{e.Key, e.Value}]
		if next == nil {
			for _, p := range n.patterns {
				if p.key == e.Key && wildcardMatch(p.parts, e.Value) {
					next = p.node
					break
				}
			}
		}
		if next == nil {
			next = n.anyValue[e.Key]
		}
		if next == nil {
			return nil
		}
		if i == len(entries)-1 {
			return next.rule
		}
		n = next
	}
	return nil
}

// wildcardMatch reports whether value matches a pattern split at its
// stars, each any run of bytes.
func wildcardMatch(parts []string, value string) bool {
	first, last := parts[0], parts[len(parts)-1]
	if len(value) < len(first)+len(last) || !strings.HasPrefix(value, first) || !strings.HasSuffix(value, last) {
		return false
	}
	rest := value[len(first) : len(value)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}

const maxName = 128 // the longest limiter name (limitd.NameRule)

// counter is the limitd name of the counter a request descriptor matched by
// rl counts in: counterName of the rule's template id and the request's
// values at the rule's variable levels (those without a value, or with a
// pattern and no share_threshold).
func (rl *Rule) counter(entries []Entry) string {
	vals := make([]string, 0, len(rl.levels))
	for i, l := range rl.levels {
		if l.variable {
			vals = append(vals, entries[i].Value)
		}
	}
	return counterName(rl.template, vals, vals)
}

// counterName is prefix, a colon, and parts escaped and joined by colons.
// Escaping keeps A-Z a-z 0-9 . - and writes every other byte as _ and two
// hex digits ("a b" → "a_20b"), so different values never share a name.
// When the name would pass maxName, it is prefix, ":_h" and a hash of
// hashed (each as its length, a colon and itself).
func counterName(prefix string, parts, hashed []string) string {
	var b strings.Builder
	n := len(prefix) + len(parts)
	for _, p := range parts {
		n += len(p)
	}
	b.Grow(n) // one allocation when no byte needs escaping
	const digits = "0123456789abcdef"
	b.WriteString(prefix)
	b.WriteByte(':')
	for j, p := range parts {
		if j > 0 {
			b.WriteByte(':')
		}
		for i := 0; i < len(p); i++ {
			if c := p[i]; safe(c) {
				b.WriteByte(c)
			} else {
				b.Write([]byte{'_', digits[c>>4], digits[c&0xf]})
			}
		}
	}
	if b.Len() <= maxName {
		return b.String()
	}
	h := sha256.New()
	for _, v := range hashed {
		h.Write([]byte(strconv.Itoa(len(v)) + ":" + v))
	}
	return prefix + ":_h" + hex.EncodeToString(h.Sum(nil)[:16])
}

// MetricLabel is the rule label of a request's counters: the rule's own,
// with the request's values where detailed_metric or value_to_metric say.
func (rl *Rule) MetricLabel(entries []Entry) string {
	if !rl.detailed {
		changed := false
		for _, l := range rl.levels {
			if l.valueToMetric && (l.value == "" || strings.Contains(l.value, "*")) {
				changed = true
			}
		}
		if !changed {
			return rl.label
		}
	}
	es := make([]Entry, len(rl.levels))
	for i, l := range rl.levels {
		es[i] = Entry{l.key, l.value}
		if (rl.detailed || l.valueToMetric) && l.variable {
			es[i].Value = entries[i].Value // a shared pattern stays a pattern
		}
	}
	return labelOf(es)
}

// labelOf is the reference's key of entries: "message_type_marketing.to_number".
func labelOf(es []Entry) string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.Key
		if e.Value != "" {
			parts[i] += "_" + e.Value
		}
	}
	return strings.Join(parts, ".")
}
