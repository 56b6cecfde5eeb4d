package envoyrules

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/limiter"
)

// Domain is one entry of the boot file's `domains:` list (package boot
// shows one), in the reference Envoy rate limit server's format: one of its
// config files.
type Domain struct {
	Domain      string       `yaml:"domain" json:"domain"`
	Descriptors []Descriptor `yaml:"descriptors" json:"descriptors"`
}

// Descriptor is one level of a domain's descriptor tree. Key is required;
// Value is a fixed value, a pattern with `*` (any run of characters), or
// empty: any value, each with its own counter. A descriptor limits when it
// has RateLimit (the reference's fixed window per unit) or Limiter (any
// limitd rate config).
type Descriptor struct {
	Key       string          `yaml:"key" json:"key"`
	Value     string          `yaml:"value" json:"value,omitempty"`
	RateLimit *RateLimit      `yaml:"rate_limit" json:"rate_limit,omitempty"`
	Limiter   *limiter.Config `yaml:"limiter" json:"limiter,omitempty"`
	// Name and Replaces are rate_limit's name and replaces for a rule
	// with a limiter.
	Name        string       `yaml:"name" json:"name,omitempty"`
	Replaces    []Replace    `yaml:"replaces" json:"replaces,omitempty"`
	Descriptors []Descriptor `yaml:"descriptors" json:"descriptors,omitempty"`
	// ShadowMode decides and counts but never refuses.
	ShadowMode bool `yaml:"shadow_mode" json:"shadow_mode,omitempty"`
	// DetailedMetric labels this rule's counters with the request's own
	// keys and values, not the rule's.
	DetailedMetric bool `yaml:"detailed_metric" json:"detailed_metric,omitempty"`
	// ValueToMetric puts the request's value of this level into the rule
	// label where the rule has none (or a pattern).
	ValueToMetric bool `yaml:"value_to_metric" json:"value_to_metric,omitempty"`
	// ShareThreshold makes every value matching this level's pattern share
	// one counter.
	ShareThreshold bool `yaml:"share_threshold" json:"share_threshold,omitempty"`
	// QuotaMode makes the rule a quota (core.Counter.Quota); it needs the
	// reference counting.
	QuotaMode bool           `yaml:"quota_mode" json:"quota_mode,omitempty"`
	Metadata  map[string]any `yaml:"metadata" json:"metadata,omitempty"` // accepted, not used
}

// RateLimit is the reference's limit: RequestsPerUnit per Unit in fixed
// windows aligned to the Unix epoch, or Unlimited.
type RateLimit struct {
	Unit            string    `yaml:"unit" json:"unit,omitempty"`
	RequestsPerUnit uint32    `yaml:"requests_per_unit" json:"requests_per_unit"`
	Unlimited       bool      `yaml:"unlimited" json:"unlimited,omitempty"`
	Name            string    `yaml:"name" json:"name,omitempty"`
	Replaces        []Replace `yaml:"replaces" json:"replaces,omitempty"`
}

// Replace names a rule (by its rate_limit name) that a rule replaces.
type Replace struct {
	Name string `yaml:"name" json:"name"`
}

// units are the reference's units and their windows. Its week, month and
// year are 7, 30 and 365 days counted from the Unix epoch, not calendar
// periods; limitd keeps that so that counts and resets agree.
var units = map[string]struct {
	code   Unit
	period time.Duration
}{
	"second": {UnitSecond, time.Second},
	"minute": {UnitMinute, time.Minute},
	"hour":   {UnitHour, time.Hour},
	"day":    {UnitDay, 24 * time.Hour},
	"week":   {UnitWeek, 7 * 24 * time.Hour},
	"month":  {UnitMonth, 30 * 24 * time.Hour},
	"year":   {UnitYear, 365 * 24 * time.Hour},
}

// Unit is a rate limit unit as the protocol numbers it
// (envoy.service.ratelimit.v3.RateLimitResponse.RateLimit.Unit).
type Unit int32

const (
	UnitUnknown Unit = 0
	UnitSecond  Unit = 1
	UnitMinute  Unit = 2
	UnitHour    Unit = 3
	UnitDay     Unit = 4
	UnitMonth   Unit = 5
	UnitYear    Unit = 6
	UnitWeek    Unit = 7
)

// Rules are the compiled domains: the descriptor trees the server matches
// requests against, and the limitd templates their rules count in. A Rules
// is immutable; a reload compiles a new one.
type Rules struct {
	domains   map[string]*node
	rules     []*Rule // every rule, in the config's order
	templates []limitd.Template
	quotas    int // rules in quota mode
}

// node is one level of a descriptor tree (see match for the order).
type node struct {
	exact    map[entry]*node
	patterns []pattern
	anyValue map[string]*node // by key
	rule     *Rule            // nil: no limit at this level
}

type entry struct{ key, value string }

type pattern struct {
	key   string
	parts []string // the value split at each *
	node  *node
}

type level struct {
	key, value    string // value: as written (fixed, pattern or "")
	variable      bool   // each request value has its own counter
	valueToMetric bool
}

// Rule is a descriptor with a limit, as the answer and the metrics read it.
type Rule struct {
	Domain    string
	label     string // the reference's key of the rule without its domain: "message_type_marketing.to_number"
	levels    []level
	template  string // the limitd template its counters are instances of ("" for unlimited)
	Unlimited bool
	quota     bool // quota_mode
	detailed  bool
	Name      string   // rate_limit.name: what replaces refers to
	replaces  []string // names of the rules this one replaces
	Unit      Unit     // the answer's current_limit
	Limit     uint32
	config    limiter.Config
	fixed     *core.FixedWindow // a rate_limit rule's window (core.Counter.Fixed); nil for a limiter
}

// fullKey names the rule as the reference server does (its FullKey):
// "mongo_cps.database_users".
func (rl *Rule) fullKey() string { return rl.Domain + "." + rl.label }

// TemplatePrefix starts the id of every template a rule counts in.
const TemplatePrefix = "envoy."

const maxDomainHint = 40 // how much of a domain's name a template id keeps

// Compile checks domains and builds their rules. Errors name the field
// ("domains[0].descriptors[1].rate_limit.unit") and the rule broken.
func Compile(domains []Domain) (*Rules, error) {
	r := &Rules{domains: map[string]*node{}}
	for i, d := range domains {
		path := fmt.Sprintf("domains[%d]", i)
		if d.Domain == "" {
			return nil, fieldErr(path+".domain", "must not be empty", nil)
		}
		if _, dup := r.domains[d.Domain]; dup {
			return nil, fieldErr(path+".domain", "must be unique: this domain is defined above", quote(d.Domain))
		}
		root := newNode()
		if err := r.load(root, d.Domain, nil, d.Descriptors, path); err != nil {
			return nil, err
		}
		r.domains[d.Domain] = root
	}
	return r, nil
}

func newNode() *node { return &node{exact: map[entry]*node{}, anyValue: map[string]*node{}} }

// load adds descriptors under n; parents are the levels above.
func (r *Rules) load(n *node, domain string, parents []level, ds []Descriptor, path string) error {
	for i, d := range ds {
		p := fmt.Sprintf("%s.descriptors[%d]", path, i)
		if d.Key == "" {
			return fieldErr(p+".key", "must not be empty", nil)
		}
		wild := strings.Contains(d.Value, "*")
		if d.ShareThreshold && !wild {
			return fieldErr(p+".share_threshold", "needs a value with a wildcard (*)", quote(d.Value))
		}
		child := newNode()
		switch {
		case d.Value == "":
			if _, dup := n.anyValue[d.Key]; dup {
				return fieldErr(p+".key", "must be unique among its siblings without a value", quote(d.Key))
			}
			n.anyValue[d.Key] = child
		case wild:
			for _, q := range n.patterns {
				if q.key == d.Key && strings.Join(q.parts, "*") == d.Value {
					return fieldErr(p+".value", "must be unique among its siblings of the same key", quote(d.Value))
				}
			}
			n.patterns = append(n.patterns, pattern{key: d.Key, parts: strings.Split(d.Value, "*"), node: child})
		default:
			e := entry{d.Key, d.Value}
			if _, dup := n.exact[e]; dup {
				return fieldErr(p+".value", "must be unique among its siblings of the same key", quote(d.Value))
			}
			n.exact[e] = child
		}
		lv := level{key: d.Key, value: d.Value, variable: d.Value == "" || wild && !d.ShareThreshold, valueToMetric: d.ValueToMetric}
		levels := append(append([]level(nil), parents...), lv)
		rl, err := r.rule(domain, levels, d, p)
		if err != nil {
			return err
		}
		child.rule = rl
		if err := r.load(child, domain, levels, d.Descriptors, p); err != nil {
			return err
		}
	}
	return nil
}

func (r *Rules) rule(domain string, levels []level, d Descriptor, path string) (*Rule, error) {
	if d.RateLimit == nil && d.Limiter == nil {
		if d.Name != "" || len(d.Replaces) > 0 {
			return nil, fieldErr(path+".name", "names a rule: it needs a limiter", nil)
		}
		return nil, nil
	}
	if d.RateLimit != nil && d.Limiter != nil {
		return nil, fieldErr(path+".limiter", "must not be given with rate_limit: a rule has one limit", nil)
	}
	es := make([]Entry, len(levels))
	for i, l := range levels {
		es[i] = Entry{l.key, l.value}
	}
	rl := &Rule{Domain: domain, label: labelOf(es), levels: levels, quota: d.QuotaMode, detailed: d.DetailedMetric}
	name, replaces, namePath := d.Name, d.Replaces, path
	if d.RateLimit != nil {
		if d.Name != "" || len(d.Replaces) > 0 {
			return nil, fieldErr(path+".name", "goes in rate_limit with a rate_limit (name and replaces beside it are for a limiter)", nil)
		}
		name, replaces, namePath = d.RateLimit.Name, d.RateLimit.Replaces, path+".rate_limit"
	}
	rl.Name = name
	for j, rep := range replaces {
		f := fmt.Sprintf("%s.replaces[%d].name", namePath, j)
		if rep.Name == "" {
			return nil, fieldErr(f, "must not be empty", nil)
		}
		if rep.Name == name {
			return nil, fieldErr(f, "must not name the rule itself", quote(rep.Name))
		}
		rl.replaces = append(rl.replaces, rep.Name)
	}
	if rate := d.RateLimit; rate != nil {
		u, known := units[strings.ToLower(rate.Unit)]
		if rate.Unlimited {
			if rate.Unit != "" {
				return nil, fieldErr(path+".rate_limit.unit", "must not be given when unlimited is true", quote(rate.Unit))
			}
			rl.Unlimited = true
			r.rules = append(r.rules, rl)
			return rl, nil
		}
		if !known {
			return nil, fieldErr(path+".rate_limit.unit", "must be one of second, minute, hour, day, week, month, year", quote(rate.Unit))
		}
		// requests_per_unit 0 refuses every hit (a block list)
		rl.Unit, rl.Limit = u.code, rate.RequestsPerUnit
		cfg, err := limiter.WindowConfig(int64(rate.RequestsPerUnit), u.period)
		if err != nil {
			if fe, ok := err.(*limiter.FieldError); ok && fe.Field == "limit" {
				return nil, fieldErr(path+".rate_limit.requests_per_unit", fe.Rule, fe.Value)
			}
			return nil, fieldErr(path+".rate_limit", err.Error(), nil)
		}
		rl.config = cfg
		rl.fixed = &core.FixedWindow{Limit: int64(rate.RequestsPerUnit), Period: u.period}
	} else {
		c := *d.Limiter
		norm, _, err := c.Normalize()
		if err == nil && !limiter.IsRate(norm.Kind) {
			return nil, fieldErr(path+".limiter.kind", "must be a rate kind ("+limiter.RateKinds()+"): a descriptor counts requests", quote(string(norm.Kind)))
		}
		if err == nil {
			_, err = limiter.Compile(norm)
		}
		if err != nil {
			if fe, ok := err.(*limiter.FieldError); ok {
				return nil, fieldErr(path+".limiter."+fe.Field, fe.Rule, fe.Value)
			}
			return nil, fieldErr(path+".limiter", err.Error(), nil)
		}
		rl.config = norm
		rl.Unit, rl.Limit = limitOf(norm)
	}
	rl.config.Shadow = d.ShadowMode
	if d.QuotaMode {
		r.quotas++
	}
	rl.template = templateID(domain, rl.label, counterShape(rl.config))
	r.templates = append(r.templates, limitd.Template{ID: rl.template, Pattern: rl.template + ":*", Order: templateOrder, Limiter: rl.config,
		Description: rl.fullKey(), FixedWindows: rl.fixed != nil})
	r.rules = append(r.rules, rl)
	return rl, nil
}

// templateOrder is where the rules' templates (disjoint from each other)
// stand among an operator's own.
const templateOrder = 1000

// limitOf words a limiter config as the protocol's current_limit: a
// window's limit per its period's unit, a schedule or smooth rate per the
// smallest unit that makes it whole (UnitUnknown when there is none).
func limitOf(c limiter.Config) (Unit, uint32) {
	if limiter.Counts(c.Kind) {
		n := uint32(0)
		if c.Limit != nil {
			n = uint32(min(max(*c.Limit, 0), int64(^uint32(0))))
		}
		if u, ok := units[c.Period]; ok { // day, week, month, year: calendar periods
			return u.code, n
		}
		if d, err := time.ParseDuration(c.Period); err == nil && !c.Sliding {
			for _, u := range units {
				if u.period == d && u.code <= UnitDay {
					return u.code, n
				}
			}
		}
		return UnitUnknown, n
	}
	for _, u := range []struct {
		code Unit
		secs float64
	}{{UnitSecond, 1}, {UnitMinute, 60}, {UnitHour, 3600}, {UnitDay, 86400}} {
		n := c.Rate * u.secs
		if n >= 1 && n <= float64(^uint32(0)) && n == float64(uint64(n)) {
			return u.code, uint32(n)
		}
	}
	return UnitUnknown, 0
}

// templateID names a rule's template: "envoy.<domain>.<hash>", the domain
// made safe and cut, the hash of domain, the rule's path and its shape.
func templateID(domain, label, shape string) string {
	sum := sha256.Sum256([]byte(domain + "\x00" + label + "\x00" + shape))
	hint := make([]byte, 0, maxDomainHint)
	for i := 0; i < len(domain) && len(hint) < maxDomainHint; i++ {
		c := domain[i]
		if !safe(c) {
			c = '-'
		}
		hint = append(hint, c)
	}
	return TemplatePrefix + string(hint) + "." + hex.EncodeToString(sum[:6])
}

// counterShape is what a rule's counts are counted in: the kind, and for a
// window its period, sliding or not, and zone. A rule whose shape changes
// counts in counters of another name, so that nothing kept for the old
// shape applies; a limit changed within one unit keeps the window's count,
// as the reference's key is the same.
func counterShape(c limiter.Config) string {
	if c.Period == "" { // a kind with no window: its name alone
		return string(c.Kind)
	}
	return fmt.Sprintf("%s/%s/%t/%s", c.Kind, c.Period, c.Sliding, c.Zone)
}

func safe(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '-'
}

var unitNames = map[Unit]string{UnitUnknown: "UNKNOWN", UnitSecond: "SECOND", UnitMinute: "MINUTE", UnitHour: "HOUR",
	UnitDay: "DAY", UnitMonth: "MONTH", UnitYear: "YEAR", UnitWeek: "WEEK"}

// Dump prints every rule as the reference server's /rlconfig does, one line
// each, in the config's order:
//
//	mongo_cps.database_users: unit=SECOND requests_per_unit=500, shadow_mode: false, quota_mode: false
//
// A rule with a limitd limiter words its rate as limitOf does and adds the
// limiter's config.
func (r *Rules) Dump() string {
	var b strings.Builder
	for _, rl := range r.rules {
		fmt.Fprintf(&b, "%s: unit=%s requests_per_unit=%d, shadow_mode: %t, quota_mode: %t", rl.fullKey(),
			unitNames[rl.Unit], rl.Limit, rl.config.Shadow, rl.quota)
		if !rl.Unlimited && !limiter.Counts(rl.config.Kind) {
			c := rl.config
			c.Shadow = false // said above
			j, _ := json.Marshal(c)
			fmt.Fprintf(&b, ", limiter: %s", j)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// Templates are the limitd templates the rules count in, one per rule with
// a limit.
func (r *Rules) Templates() []limitd.Template { return r.templates }

// Domains is the number of domains.
func (r *Rules) Domains() int { return len(r.domains) }

// Len is the number of rules (descriptors with a limit, unlimited included).
func (r *Rules) Len() int { return len(r.rules) }

// Quotas is the number of rules in quota mode.
func (r *Rules) Quotas() int { return r.quotas }

func fieldErr(field, rule string, value any) error {
	return &limiter.FieldError{Field: field, Rule: rule, Value: value}
}

func quote(s string) string { return fmt.Sprintf("%q", s) }

// Has reports whether the rules define domain.
func (r *Rules) Has(domain string) bool { return r.domains[domain] != nil }
