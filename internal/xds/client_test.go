package xds

import (
	"slices"
	"strings"
	"testing"
	"time"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/types/known/anypb"
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
