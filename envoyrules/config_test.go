package envoyrules

import (
	"strings"
	"testing"

	"github.com/limitd/limitd"
)

// A rule with a schedule limiter, for the matching tests (no window kind
// needed).
const schedRule = "limiter: {rate: 1}"

// Matching follows the reference: exact value, then the first pattern of
// the key in the config's order, then the key alone; a rule applies only at
// the level of the descriptor's last entry.
func TestMatch(t *testing.T) {
	r := compile(t, `
domains:
  - domain: d
    descriptors:
      - {key: remote_address, `+schedRule+`}
      - {key: remote_address, value: 50.0.0.5, `+schedRule+`}
      - {key: path, value: "/api/*/action", `+schedRule+`}
      - {key: path, value: "/api/*", `+schedRule+`}
      - {key: route, value: "/api/*/resource/*/action", `+schedRule+`}
      - key: message_type
        value: marketing
        descriptors:
          - {key: to_number, `+schedRule+`}
      - {key: to_number, `+schedRule+`}
      - key: key
        value: value
        `+schedRule+`
        descriptors:
          - {key: subkey, `+schedRule+`}
      - key: parent
        descriptors:
          - {key: child, value: "x*", `+schedRule+`}
`)
	for _, c := range []struct {
		entries []string
		want    string // the rule's label, "" for none
	}{
		{[]string{"remote_address", "50.0.0.1"}, "remote_address"},
		{[]string{"remote_address", "50.0.0.5"}, "remote_address_50.0.0.5"},
		{[]string{"path", "/api/123/action"}, "path_/api/*/action"},
		{[]string{"path", "/api/123/other"}, "path_/api/*"},
		{[]string{"path", "/web"}, ""},
		{[]string{"route", "/api/v1/resource/123/action"}, "route_/api/*/resource/*/action"},
		{[]string{"route", "/api/v1/resource/123/other"}, ""},
		{[]string{"message_type", "marketing", "to_number", "2061111111"}, "message_type_marketing.to_number"},
		{[]string{"message_type", "marketing"}, ""}, // a placeholder: no limit of its own
		{[]string{"message_type", "other", "to_number", "2061111111"}, ""},
		{[]string{"to_number", "2061111111"}, "to_number"},
		{[]string{"key", "value"}, "key_value"},
		{[]string{"key", "value", "subkey", "subvalue"}, "key_value.subkey"},
		{[]string{"key", "value", "subkey", "s", "more", "m"}, ""}, // deeper than the config
		{[]string{"parent", "p", "child", "xyz"}, "parent.child_x*"},
		{[]string{"parent", "p", "child", "yz"}, ""},
		{[]string{"to_number", "1", "extra", "e"}, ""}, // a rule at a level above the last entry
	} {
		var es []Entry
		for i := 0; i < len(c.entries); i += 2 {
			es = append(es, Entry{c.entries[i], c.entries[i+1]})
		}
		got := ""
		if rl := r.match("d", es); rl != nil {
			got = rl.label
		}
		if got != c.want {
			t.Errorf("%v: rule %q, want %q", c.entries, got, c.want)
		}
	}
	if r.match("unknown", []Entry{{"to_number", "1"}}) != nil {
		t.Error("an unknown domain has no rules")
	}
}

func TestWildcardMatch(t *testing.T) {
	for _, c := range []struct {
		pattern, value string
		want           bool
	}{
		{"value*", "value1", true}, {"value*", "value", true}, {"value*", "valu", false},
		{"/api/*/action", "/api/123/action", true}, {"/api/*/action", "/api/123/other", false},
		{"/api/*/action", "/api/action", false}, {"/api/*/action", "/api//action", true},
		{"/api/*/resource/*/action", "/api/v1/resource/123/action", true},
		{"/api/*/resource/*/action", "/api/v1/resource/action", false},
		{"*", "", true}, {"a*a", "a", false}, {"a*a", "aa", true}, {"*b*", "abc", true}, {"*b*", "ac", false},
	} {
		if got := wildcardMatch(strings.Split(c.pattern, "*"), c.value); got != c.want {
			t.Errorf("%q ~ %q: %v, want %v", c.pattern, c.value, got, c.want)
		}
	}
}

// Counter names satisfy limitd's name rule whatever the values, differ for
// different values, and are shared where the rule says so.
func TestCounterNames(t *testing.T) {
	r := compile(t, `
domains:
  - domain: "my domain/with unsafe chars and a very long name indeed, longer than forty"
    descriptors:
      - key: message_type
        value: marketing
        descriptors:
          - {key: to_number, `+schedRule+`}
      - {key: files, value: "files/*", share_threshold: true, `+schedRule+`}
      - {key: own, value: "own/*", `+schedRule+`}
      - {key: fixed, value: v, `+schedRule+`}
`)
	domain := "my domain/with unsafe chars and a very long name indeed, longer than forty"
	name := func(kv ...string) string {
		var es []Entry
		for i := 0; i < len(kv); i += 2 {
			es = append(es, Entry{kv[i], kv[i+1]})
		}
		rl := r.match(domain, es)
		if rl == nil {
			t.Fatalf("%v: no rule", kv)
		}
		n := rl.counter(es)
		if err := limitd.CheckNameAs("name", n); err != nil {
			t.Errorf("%v: %q: %v", kv, n, err)
		}
		if !strings.HasPrefix(n, rl.template+":") {
			t.Errorf("%q is not an instance of %q", n, rl.template)
		}
		return n
	}
	a, b := name("message_type", "marketing", "to_number", "206 111"), name("message_type", "marketing", "to_number", "206_111")
	if a == b {
		t.Errorf("two values, one counter: %q", a)
	}
	if !strings.HasSuffix(a, ":206_20111") {
		t.Errorf("escaped value: %q, want it to end :206_20111", a)
	}
	long := strings.Repeat("é", 100)
	l1, l2 := name("message_type", "marketing", "to_number", long), name("message_type", "marketing", "to_number", long+"x")
	if l1 == l2 || !strings.Contains(l1, ":_h") {
		t.Errorf("long values: %q, %q: want distinct hashed names", l1, l2)
	}
	if name("files", "files/a.pdf") != name("files", "files/b.csv") {
		t.Error("share_threshold: every match shares one counter")
	}
	if name("own", "own/a") == name("own", "own/b") {
		t.Error("a pattern without share_threshold counts each value apart")
	}
	if n := name("fixed", "v"); !strings.HasSuffix(n, ":") {
		t.Errorf("a rule without variable levels has one counter: %q", n)
	}
	ids := map[string]bool{}
	for _, tpl := range r.Templates() {
		if ids[tpl.ID] {
			t.Errorf("template id %s twice", tpl.ID)
		}
		ids[tpl.ID] = true
		if _, err := tpl.Normalize(); err != nil {
			t.Errorf("template %+v: %v", tpl, err)
		}
	}
	if len(ids) != 4 {
		t.Errorf("%d templates, want one per rule (4)", len(ids))
	}
}

func TestMetricLabel(t *testing.T) {
	r := compile(t, `
domains:
  - domain: d
    descriptors:
      - {key: key1, detailed_metric: true, `+schedRule+`}
      - {key: key1, value: value1, `+schedRule+`}
      - key: route
        value_to_metric: true
        descriptors:
          - {key: method, `+schedRule+`}
`)
	for _, c := range []struct {
		entries []Entry
		want    string
	}{
		{[]Entry{{"key1", "unspecified_value"}}, "key1_unspecified_value"},
		{[]Entry{{"key1", "value1"}}, "key1_value1"},
		{[]Entry{{"route", "api"}, {"method", "GET"}}, "route_api.method"},
	} {
		if got := r.match("d", c.entries).MetricLabel(c.entries); got != c.want {
			t.Errorf("%v: %q, want %q", c.entries, got, c.want)
		}
	}
}

// A bad config is refused whole, naming the field and the rule.
func TestCompileErrors(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"- descriptors: []", "domains[0].domain: must not be empty"},
		{"- {domain: a}\n- {domain: a}", "domains[1].domain: must be unique"},
		{"- {domain: a, descriptors: [{value: v, " + schedRule + "}]}", "domains[0].descriptors[0].key: must not be empty"},
		{"- {domain: a, descriptors: [{key: k, " + schedRule + "}, {key: k, " + schedRule + "}]}", "domains[0].descriptors[1].key: must be unique"},
		{"- {domain: a, descriptors: [{key: k, value: v}, {key: k, value: v}]}", "domains[0].descriptors[1].value: must be unique"},
		{"- {domain: a, descriptors: [{key: k, rate_limit: {unit: fortnight, requests_per_unit: 1}}]}", "domains[0].descriptors[0].rate_limit.unit: must be one of second"},
		{"- {domain: a, descriptors: [{key: k, rate_limit: {unlimited: true, unit: second}}]}", "rate_limit.unit: must not be given when unlimited"},
		{"- {domain: a, descriptors: [{key: k, rate_limit: {unlimited: true, name: x, replaces: [{name: x}]}}]}", "rate_limit.replaces[0].name: must not name the rule itself"},
		{"- {domain: a, descriptors: [{key: k, rate_limit: {unlimited: true, replaces: [{}]}}]}", "rate_limit.replaces[0].name: must not be empty"},
		{"- {domain: a, descriptors: [{key: k, share_threshold: true, " + schedRule + "}]}", "share_threshold: needs a value with a wildcard"},
		{"- {domain: a, descriptors: [{key: k, limiter: {rate: -1}}]}", "domains[0].descriptors[0].limiter.rate"},
		{"- {domain: a, descriptors: [{key: k, limiter: {kind: concurrency, limit: 3}}]}", "limiter.kind: must be a rate kind"},
		{"- {domain: a, descriptors: [{key: k, limiter: {rate: 1}, rate_limit: {unlimited: true}}]}", "limiter: must not be given with rate_limit"},
		{"- {domain: a, descriptors: [{key: k, name: x}]}", "domains[0].descriptors[0].name: names a rule: it needs a limiter"},
		{"- {domain: a, descriptors: [{key: k, limiter: {kind: window, limit: 4294967296, period: 1m}}]}", "domains[0].descriptors[0].limiter.limit: must be"},
		{"- {domain: a, descriptors: [{key: k, limiter: {kind: window, limit: 5}}]}", "domains[0].descriptors[0].limiter.period"},
		{"- {domain: a, descriptors: [{key: k, descriptors: [{key: s, value: v, " + schedRule + ", replaces: [{}]}]}]}", "domains[0].descriptors[0].descriptors[0].replaces[0].name: must not be empty"},
	} {
		_, err := Compile(parseDomains(t, "domains:\n"+indent(c.yaml)))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s:\n got %v\nwant %q", c.yaml, err, c.want)
		}
	}
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(s, "\n", "\n  ") + "\n"
}
