package limiter

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// Configs of the share and concurrency kinds: defaults, rules, the JSON and
// YAML forms, and what they compile to.

func engI(v int64) *int64 { return &v }

func TestShareConfigNormalizeDefaults(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   Config
		want Config
	}{
		{"share: fair_share, 60s lease, 5s refresh, learning = lease",
			Config{Kind: KindShare, Capacity: engF(120)},
			Config{Kind: KindShare, Capacity: engF(120), Algorithm: AlgorithmFair, Lease: D(time.Minute),
				RefreshInterval: D(5 * time.Second), Learning: D(time.Minute)}},
		{"share: short lease caps the default refresh",
			Config{Kind: KindShare, Capacity: engF(1), Lease: D(2 * time.Second)},
			Config{Kind: KindShare, Capacity: engF(1), Algorithm: AlgorithmFair, Lease: D(2 * time.Second),
				RefreshInterval: D(2 * time.Second), Learning: D(2 * time.Second)}},
		{"share: everything given",
			Config{Kind: KindShare, Capacity: engF(100), Algorithm: AlgorithmProportional, Lease: D(10 * time.Second),
				RefreshInterval: D(time.Second), SafeCapacity: engF(10), Learning: D(0)},
			Config{Kind: KindShare, Capacity: engF(100), Algorithm: AlgorithmProportional, Lease: D(10 * time.Second),
				RefreshInterval: D(time.Second), SafeCapacity: engF(10), Learning: D(0)}},
		{"share: safe_capacity 0 is the default (capacity / clients)",
			Config{Kind: KindShare, Capacity: engF(5), Algorithm: AlgorithmStatic, SafeCapacity: engF(0)},
			Config{Kind: KindShare, Capacity: engF(5), Algorithm: AlgorithmStatic, Lease: D(time.Minute),
				RefreshInterval: D(5 * time.Second), Learning: D(time.Minute)}},
		{"share: safe_capacity = capacity", Config{Kind: KindShare, Capacity: engF(5), Algorithm: AlgorithmNone, SafeCapacity: engF(5)},
			Config{Kind: KindShare, Capacity: engF(5), Algorithm: AlgorithmNone, SafeCapacity: engF(5), Lease: D(time.Minute),
				RefreshInterval: D(5 * time.Second), Learning: D(time.Minute)}},
		{"concurrency: 30s lease", Config{Kind: KindConcurrency, Limit: engI(10)},
			Config{Kind: KindConcurrency, Limit: engI(10), Lease: D(30 * time.Second)}},
		{"concurrency kept", Config{Kind: KindConcurrency, Limit: engI(1e6), Lease: D(time.Millisecond)},
			Config{Kind: KindConcurrency, Limit: engI(1e6), Lease: D(time.Millisecond)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, verb, err := tc.in.Normalize()
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) || verb != VerbStart {
				t.Errorf("Normalize(%s) =\n %s, %s\nwant\n %s", engJSON(tc.in), engJSON(got), verb, engJSON(tc.want))
			}
			if err := tc.in.Validate(); err != nil {
				t.Errorf("Validate: %v", err)
			}
			again, _, err := got.Normalize()
			if err != nil || !reflect.DeepEqual(again, got) {
				t.Errorf("Normalize is not idempotent: %s → %s, %v", engJSON(got), engJSON(again), err)
			}
		})
	}
}

func TestShareConfigValidateErrors(t *testing.T) {
	share := func(c Config) Config {
		c.Kind = KindShare
		if c.Capacity == nil {
			c.Capacity = engF(100)
		}
		return c
	}
	conc := func(c Config) Config {
		c.Kind = KindConcurrency
		if c.Limit == nil {
			c.Limit = engI(5)
		}
		return c
	}
	for _, tc := range []struct {
		cfg   Config
		field string
		rule  string
	}{
		{Config{Kind: KindShare}, "capacity", "required"},
		{share(Config{Capacity: engF(0)}), "capacity", "> 0"},
		{share(Config{Capacity: engF(-1)}), "capacity", "> 0"},
		{share(Config{Capacity: engF(math.NaN())}), "capacity", "finite"},
		{share(Config{Capacity: engF(math.Inf(1))}), "capacity", "finite"},
		{share(Config{Algorithm: "fair"}), "algorithm", "fair_share"},
		{share(Config{Algorithm: "FAIR_SHARE"}), "algorithm", "fair_share"},
		{share(Config{Lease: D(0)}), "lease", "> 0"},
		{share(Config{Lease: D(-time.Second)}), "lease", "> 0"},
		{share(Config{Lease: D(time.Duration(Horizon + 1))}), "lease", "2^50"},
		{share(Config{RefreshInterval: D(0)}), "refresh_interval", "> 0"},
		{share(Config{Lease: D(time.Second), RefreshInterval: D(2 * time.Second)}), "refresh_interval", "≤ lease"},
		{share(Config{RefreshInterval: D(2 * time.Minute)}), "refresh_interval", "≤ lease"},
		{share(Config{SafeCapacity: engF(-1)}), "safe_capacity", "≥ 0"},
		{share(Config{SafeCapacity: engF(101)}), "safe_capacity", "≤ capacity"},
		{share(Config{SafeCapacity: engF(math.NaN())}), "safe_capacity", "≥ 0"},
		{share(Config{SafeCapacity: engF(math.Inf(1))}), "safe_capacity", "≤ capacity"},
		{share(Config{Learning: D(-1)}), "learning", "≥ 0"},
		{share(Config{Learning: D(time.Duration(Horizon + 1))}), "learning", "2^50"},
		// Settings of other kinds.
		{share(Config{Rate: 5}), "rate", "not a setting of kind share"},
		{share(Config{Burst: B(2)}), "burst", "not a setting of kind share"},
		{share(Config{MaxBacklog: D(time.Second)}), "max_backlog", "not a setting"},
		{share(Config{Warmup: D(time.Second)}), "warmup", "not a setting"},
		{share(Config{Limit: engI(3)}), "limit", "not a setting of kind share"},
		{share(Config{Spec: "100"}), "spec", "only for kind schedule"},
		{Config{Kind: KindConcurrency}, "limit", "required"},
		{conc(Config{Limit: engI(0)}), "limit", "≥ 1"},
		{conc(Config{Limit: engI(-5)}), "limit", "≥ 1"},
		{conc(Config{Limit: engI(1e6 + 1)}), "limit", "≤ 1e6"},
		{conc(Config{Lease: D(0)}), "lease", "> 0"},
		{conc(Config{Lease: D(time.Duration(Horizon + 1))}), "lease", "2^50"},
		{conc(Config{Rate: 1}), "rate", "not a setting of kind concurrency"},
		{conc(Config{Capacity: engF(1)}), "capacity", "not a setting of kind concurrency"},
		{conc(Config{Algorithm: AlgorithmFair}), "algorithm", "not a setting"},
		{conc(Config{RefreshInterval: D(time.Second)}), "refresh_interval", "not a setting"},
		{conc(Config{SafeCapacity: engF(1)}), "safe_capacity", "not a setting"},
		{conc(Config{Learning: D(time.Second)}), "learning", "not a setting"},
		{conc(Config{ColdFactor: engF(3)}), "cold_factor", "not a setting"},
		// The share and concurrency fields on the rate kinds.
		{Config{Rate: 5, Capacity: engF(1)}, "capacity", "not a setting of kind schedule"},
		{Config{Rate: 5, Lease: D(time.Second)}, "lease", "not a setting of kind schedule"},
		{Config{Kind: KindSmooth, Rate: 5, Limit: engI(1)}, "limit", "not a setting of kind smooth"},
		{Config{Kind: KindSmooth, Rate: 5, Algorithm: AlgorithmNone}, "algorithm", "not a setting of kind smooth"},
		{Config{Kind: KindSmooth, Rate: 5, Learning: D(0)}, "learning", "not a setting of kind smooth"},
		{Config{Kind: "shares", Capacity: engF(1)}, "kind", "share or concurrency"},
	} {
		what := engJSON(tc.cfg)
		engCheckFieldErr(t, "Validate("+what+")", tc.cfg.Validate(), tc.field, "")
		var fe *FieldError
		if err := tc.cfg.Validate(); errors.As(err, &fe) && !strings.Contains(fe.Rule, tc.rule) {
			t.Errorf("Validate(%s): rule %q does not say %q", what, fe.Rule, tc.rule)
		}
		if n, _, err := tc.cfg.Normalize(); err == nil || !reflect.DeepEqual(n, Config{}) {
			t.Errorf("Normalize(%s) = %+v, %v; want a zero config and an error", what, n, err)
		}
		if _, err := tc.cfg.Share(); err == nil {
			t.Errorf("Share(%s) accepted it", what)
		}
		if _, _, err := tc.cfg.Concurrency(); err == nil {
			t.Errorf("Concurrency(%s) accepted it", what)
		}
	}
}

func TestShareConfigCompile(t *testing.T) {
	sc := Config{Kind: KindShare, Capacity: engF(120), Algorithm: AlgorithmProportional, Lease: D(10 * time.Second),
		RefreshInterval: D(time.Second), SafeCapacity: engF(7.5), Learning: D(3 * time.Second)}
	p, err := sc.Share()
	if err != nil {
		t.Fatal(err)
	}
	want := ShareParams{Capacity: 120, Algorithm: AlgorithmProportional, Lease: 10e9, Refresh: 1e9, SafeCapacity: 7.5, Learning: 3e9}
	if p != want {
		t.Errorf("Share() = %+v, want %+v", p, want)
	}
	if p, err := (Config{Kind: KindShare, Capacity: engF(3)}).Share(); err != nil ||
		p != (ShareParams{Capacity: 3, Algorithm: AlgorithmFair, Lease: 60e9, Refresh: 5e9, Learning: 60e9}) {
		t.Errorf("Share() of the defaults = %+v, %v", p, err)
	}
	limit, lease, err := Config{Kind: KindConcurrency, Limit: engI(4)}.Concurrency()
	if err != nil || limit != 4 || lease != 30e9 {
		t.Errorf("Concurrency() = %d, %d, %v; want 4, 30e9", limit, lease, err)
	}
	// Each kind compiles only with its own function.
	for _, c := range []Config{sc, {Kind: KindConcurrency, Limit: engI(4)}} {
		_, err := Compile(c)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != "kind" || !strings.Contains(fe.Rule, "has no schedule") || !errors.Is(err, ErrInvalid) {
			t.Errorf("Compile(%s) = %v; want a FieldError on kind saying it has no schedule", engJSON(c), err)
		}
	}
	if _, _, err := sc.Concurrency(); err == nil {
		t.Error("Concurrency() of a share config accepted it")
	}
	if _, err := (Config{Kind: KindConcurrency, Limit: engI(4)}).Share(); err == nil {
		t.Error("Share() of a concurrency config accepted it")
	}
	if _, err := (Config{Rate: 5}).Share(); err == nil {
		t.Error("Share() of a schedule config accepted it")
	}
	if _, err := Compile(Config{Rate: 5}); err != nil {
		t.Errorf("Compile(schedule) = %v", err)
	}
}

func shareRoundTripConfigs(t *testing.T) []Config {
	cs := []Config{
		{Kind: KindShare, Capacity: engF(120)},
		{Kind: KindShare, Capacity: engF(0.1), Algorithm: AlgorithmNone, Lease: D(1500 * time.Microsecond)},
		{Kind: KindShare, Capacity: engF(1e300), Algorithm: AlgorithmStatic, SafeCapacity: engF(1e21), Learning: D(0)},
		{Kind: KindShare, Capacity: engF(69.69230769230769), Algorithm: AlgorithmProportional, Lease: D(time.Hour),
			RefreshInterval: D(90 * time.Second), SafeCapacity: engF(1.0 / 3), Learning: D(2 * time.Hour)},
		{Kind: KindConcurrency, Limit: engI(1)},
		{Kind: KindConcurrency, Limit: engI(1e6), Lease: D(time.Duration(Horizon))},
	}
	out := make([]Config, 0, len(cs))
	for _, c := range cs {
		n, _, err := c.Normalize()
		if err != nil {
			t.Fatalf("Normalize(%s): %v", engJSON(c), err)
		}
		out = append(out, n)
	}
	return out
}

func TestShareConfigJSONAndYAML(t *testing.T) {
	for _, n := range shareRoundTripConfigs(t) {
		b, err := json.Marshal(n)
		if err != nil {
			t.Fatal(err)
		}
		var back Config
		if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, n) {
			t.Errorf("JSON round trip: %s → %s, %v", b, engJSON(back), err)
		}
		y, err := yaml.Marshal(n)
		if err != nil {
			t.Fatal(err)
		}
		back = Config{}
		if err := yaml.Unmarshal(y, &back); err != nil || !reflect.DeepEqual(back, n) {
			t.Errorf("YAML round trip:\n%s→ %s, %v", y, engJSON(back), err)
		}
	}
	// The forms the README documents.
	for in, want := range map[string]string{
		`{"kind":"share","capacity":120,"algorithm":"fair_share","lease":"60s","refresh_interval":"5s","safe_capacity":10}`: `{"kind":"share","capacity":120,"algorithm":"fair_share","lease":"1m0s","refresh_interval":"5s","safe_capacity":10,"learning":"1m0s"}`,
		`{"kind":"concurrency","limit":10,"lease":"30s"}`:                                                                   `{"kind":"concurrency","lease":"30s","limit":10}`,
		`{"kind":"concurrency","limit":3}`:                                                                                  `{"kind":"concurrency","lease":"30s","limit":3}`,
	} {
		var c Config
		if err := json.Unmarshal([]byte(in), &c); err != nil {
			t.Fatalf("Unmarshal(%s): %v", in, err)
		}
		n, _, err := c.Normalize()
		if err != nil {
			t.Fatalf("Normalize(%s): %v", in, err)
		}
		if got := engJSON(n); got != want {
			t.Errorf("%s normalized is\n %s\nwant\n %s", in, got, want)
		}
	}
	doc := "kind: share\ncapacity: 120\nalgorithm: proportional_share\nlease: 10s\nrefresh_interval: 1s\nsafe_capacity: 5\nlearning: 0s\n"
	var c Config
	if err := yaml.Unmarshal([]byte(doc), &c); err != nil {
		t.Fatal(err)
	}
	want := Config{Kind: KindShare, Capacity: engF(120), Algorithm: AlgorithmProportional, Lease: D(10 * time.Second),
		RefreshInterval: D(time.Second), SafeCapacity: engF(5), Learning: D(0)}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("YAML decode: %s", engJSON(c))
	}
	// Bad values name their field.
	for in, field := range map[string]string{
		`{"kind":"share","capacity":"lots"}`:               "capacity",
		`{"kind":"share","capacity":1,"lease":"1 minute"}`: "lease",
		`{"kind":"share","capacity":1,"learning":5}`:       "learning",
		`{"kind":"concurrency","limit":2.5}`:               "limit",
		`{"kind":"concurrency","limit":"2"}`:               "limit",
	} {
		var c Config
		err := json.Unmarshal([]byte(in), &c)
		var ute *json.UnmarshalTypeError
		if !errors.As(err, &ute) || ute.Field != field {
			t.Errorf("Unmarshal(%s): error %v, want a json.UnmarshalTypeError on field %q", in, err, field)
		}
	}
}
