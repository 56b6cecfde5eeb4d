package xds

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"gopkg.in/yaml.v3"
)

func anyOf(t *testing.T, c *rlsconfv3.RateLimitConfig) *anypb.Any {
	t.Helper()
	a, err := anypb.New(c)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// Decode reads RateLimitConfig resources as the reference's config files:
// units, unlimited, names, replaces, nested descriptors, shadow mode.
func TestDecode(t *testing.T) {
	c := &rlsconfv3.RateLimitConfig{Name: "web", Domain: "web", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: "ip", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: 3, Name: "per-ip"}},
		{Key: "user", ShadowMode: true, Descriptors: []*rlsconfv3.RateLimitDescriptor{
			{Key: "plan", Value: "free", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_DAY, RequestsPerUnit: 10,
				Replaces: []*rlsconfv3.RateLimitReplace{{Name: "per-ip"}}}}}},
		{Key: "health", RateLimit: &rlsconfv3.RateLimitPolicy{Unlimited: true}},
	}}
	f, err := Decode([]*anypb.Any{anyOf(t, c)})
	if err != nil {
		t.Fatal(err)
	}
	if f.Rules.Domains() != 1 || f.Rules.Len() != 3 || len(f.Templates) != 2 || f.Sum == "" {
		t.Errorf("domains %d, rules %d, templates %d, sum %q; want 1, 3 (one unlimited), 2", f.Rules.Domains(), f.Rules.Len(), len(f.Templates), f.Sum)
	}
	again, _ := Decode([]*anypb.Any{anyOf(t, c)})
	c.Descriptors[0].RateLimit.RequestsPerUnit = 4
	changed, _ := Decode([]*anypb.Any{anyOf(t, c)})
	if again.Sum != f.Sum || changed.Sum == f.Sum {
		t.Error("the sum does not tell a change")
	}

	for _, tc := range []struct {
		res  []*anypb.Any
		want string
	}{
		{[]*anypb.Any{anyOf(t, &rlsconfv3.RateLimitConfig{Name: "a", Domain: "a", Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: "k", RateLimit: &rlsconfv3.RateLimitPolicy{RequestsPerUnit: 1}}}})},
			`RateLimitConfig "a" (domain "a"): descriptors[0].rate_limit.unit: must be one of`},
		{[]*anypb.Any{anyOf(t, &rlsconfv3.RateLimitConfig{Name: "a", Domain: "d"}), anyOf(t, &rlsconfv3.RateLimitConfig{Name: "b", Domain: "d"})},
			`RateLimitConfig "b" (domain "d"): domain: must be unique`},
		{[]*anypb.Any{{TypeUrl: "type.googleapis.com/something.Else"}}, "resources[0]: not a type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"},
	} {
		if _, err := Decode(tc.res); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("got %v\nwant %s…", err, tc.want)
		}
	}
}

// The back-off doubles from Initial to Max; the jitter stays within its
// fraction.
func TestBackoff(t *testing.T) {
	b := Backoff{Initial: time.Second, Max: 5 * time.Second}
	var got []time.Duration
	for i := range 5 {
		got = append(got, b.next(i))
	}
	if want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}; !slices.Equal(got, want) {
		t.Errorf("waits %v, want %v", got, want)
	}
	b.Jitter, b.RandomFactor = true, 0.5
	for range 100 {
		if d := b.next(1); d < time.Second || d > 3*time.Second {
			t.Fatalf("jittered wait %v outside 2s ± 50%%", d)
		}
	}
}

// envoyGateway reads a RateLimitConfig written as Envoy Gateway's
// translator prints its output (testdata/envoy-gateway/*.yaml: the
// reference's YAML with every field, units in capitals). Its
// value_to_metric and share_threshold, which RateLimitConfig has no field
// for, must be false: the translator sets neither.
func envoyGateway(t *testing.T, file string) *rlsconfv3.RateLimitConfig {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "envoy-gateway", file))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	var strip func(ds any)
	strip = func(ds any) {
		l, _ := ds.([]any)
		for _, d := range l {
			m := d.(map[string]any)
			for _, k := range []string{"value_to_metric", "share_threshold"} {
				if m[k] != false {
					t.Fatalf("%s: descriptor %v: %s is %v; RateLimitConfig has no such field", file, m["key"], k, m[k])
				}
				delete(m, k)
			}
			strip(m["descriptors"])
		}
	}
	strip(doc["descriptors"])
	j, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var c rlsconfv3.RateLimitConfig
	if err := protojson.Unmarshal(j, &c); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return &c
}

// Every unit Envoy Gateway's BackendTrafficPolicy allows (Second, Minute,
// Hour, Day, Week, Month, Year) decodes and compiles from its translator's
// output, to the window of the unit; quota_mode and metadata are mapped as
// from a file.
func TestDecodeEveryUnit(t *testing.T) {
	f, err := Decode([]*anypb.Any{anyOf(t, envoyGateway(t, "every-unit.yaml")), anyOf(t, envoyGateway(t, "shared-policy.yaml"))})
	if err != nil {
		t.Fatal(err)
	}
	if f.Rules.Domains() != 2 || f.Rules.Len() != 16 {
		t.Errorf("domains %d, rules %d; want 2, 16 (two per unit, the shadow one, the shared one)", f.Rules.Domains(), f.Rules.Len())
	}
	periods := map[string]int{}
	for _, tpl := range f.Templates {
		periods[tpl.Limiter.Period]++
	}
	want := map[string]int{"1s": 3, "1m0s": 2, "1h0m0s": 2, "24h0m0s": 2, "168h0m0s": 3, "720h0m0s": 2, "8760h0m0s": 2}
	if !maps.Equal(periods, want) {
		t.Errorf("windows %v, want %v", periods, want)
	}

	for _, u := range []rlsconfv3.RateLimitUnit{rlsconfv3.RateLimitUnit_WEEK, rlsconfv3.RateLimitUnit_MONTH, rlsconfv3.RateLimitUnit_YEAR} {
		rl := &rlsconfv3.RateLimitPolicy{Unit: u, RequestsPerUnit: 5}
		got := descriptors([]*rlsconfv3.RateLimitDescriptor{{Key: "k", RateLimit: rl}})[0].RateLimit.Unit
		if got != strings.ToLower(u.String()) || got == strconv.Itoa(int(u)) {
			t.Errorf("unit %d reads as %q", u, got)
		}
	}

	meta, _ := structpb.NewStruct(map[string]any{"team": "edge"})
	c := &rlsconfv3.RateLimitConfig{Name: "q", Domain: "q", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: "user", QuotaMode: true, Metadata: meta, RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MONTH, RequestsPerUnit: 1000}}}}
	if q, err := Decode([]*anypb.Any{anyOf(t, c)}); err != nil || q.Rules.Quotas() != 1 {
		t.Errorf("quota_mode: %v quota rules, %v; want 1", q.Rules.Quotas(), err)
	}
	if d := descriptors(c.Descriptors)[0]; !d.QuotaMode || d.Metadata["team"] != "edge" {
		t.Errorf("quota_mode %v, metadata %v; want true and team=edge", d.QuotaMode, d.Metadata)
	}
}
