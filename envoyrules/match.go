package envoyrules

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// Entry is one key and value of a request's descriptor.
type Entry struct{ Key, Value string }

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
