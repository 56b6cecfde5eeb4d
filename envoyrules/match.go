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
// specific match at each level (exact value, then the first pattern, then
// the key alone), and a rule only at the level of the descriptor's last
// entry, as the reference matches. nil: no rule limits the descriptor.
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
// stars: each star stands for any run of bytes, the empty one included.
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

// maxName is the longest limiter name (limitd.NameRule).
const maxName = 128

// counter is the limitd name of the counter a request descriptor matched by
// rl counts in: the rule's template id, a colon, and the request's values
// at the rule's variable levels (those without a value, or with a pattern
// and no share_threshold), each escaped and joined by colons. Escaping
// keeps A-Z a-z 0-9 . - and writes every other byte as _ and two hex
// digits ("a b" → "a_20b"), so different values never share a name. When
// the name would pass 128 characters, the values part is "_h" and a hash of
// the values instead.
func (rl *Rule) counter(entries []Entry) string {
	var b strings.Builder
	n := len(rl.template) + len(rl.levels)
	for i, l := range rl.levels {
		if l.variable {
			n += len(entries[i].Value)
		}
	}
	b.Grow(n) // one allocation when no byte needs escaping
	b.WriteString(rl.template)
	b.WriteByte(':')
	first := true
	for i, l := range rl.levels {
		if !l.variable {
			continue
		}
		if !first {
			b.WriteByte(':')
		}
		first = false
		escape(&b, entries[i].Value)
	}
	if b.Len() <= maxName {
		return b.String()
	}
	h := sha256.New()
	for i, l := range rl.levels {
		if l.variable {
			v := entries[i].Value
			h.Write([]byte(strconv.Itoa(len(v)) + ":" + v))
		}
	}
	return rl.template + ":_h" + hex.EncodeToString(h.Sum(nil)[:16])
}

func escape(b *strings.Builder, v string) {
	const digits = "0123456789abcdef"
	for i := 0; i < len(v); i++ {
		c := v[i]
		if safe(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('_')
		b.WriteByte(digits[c>>4])
		b.WriteByte(digits[c&0xf])
	}
}

// MetricLabel is the rule label of a request's counters: the rule's own
// label; with detailed_metric the request's keys and values; with
// value_to_metric on a level without a fixed value, the request's value
// there.
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
