package grpcapi

import (
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// limited gives a descriptor its own limit (Envoy's limit override).
func limited(d *rlcommon.RateLimitDescriptor, rpu uint32, unit typev3.RateLimitUnit) *rlcommon.RateLimitDescriptor {
	d.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit}
	return d
}

const overrideRules = `
domains:
  - domain: web
    descriptors:
      - key: ip
        rate_limit: {unit: hour, requests_per_unit: 5}
`

// A descriptor's own limit counts as the reference's: in place of the rule
// it matches (2/MINUTE over the rule's 5/HOUR), or where no rule matches
// (7/SECOND), each in a counter of its own; in a domain the rules do not
// know, nothing limits it.
func TestOverrideAsReference(t *testing.T) {
	e := newEnv(t, overrideRules)
	// On a rule: the override's limit, not the rule's.
	e.expect(e.call("web", limited(desc("ip", "1.2.3.4"), 2, typev3.RateLimitUnit_MINUTE)), ok, lim(ok, 2, minute, 1, toMinute))
	e.expect(e.call("web", limited(desc("ip", "1.2.3.4"), 2, typev3.RateLimitUnit_MINUTE)), ok, lim(ok, 2, minute, 0, toMinute))
	e.expect(e.call("web", limited(desc("ip", "1.2.3.4"), 2, typev3.RateLimitUnit_MINUTE)), over, lim(over, 2, minute, 0, toMinute))
	// The rule's own counter did not count them.
	e.expect(e.call("web", desc("ip", "1.2.3.4")), ok, lim(ok, 5, hour, 4, toHour))
	// Another override of the same descriptor counts on its own.
	e.expect(e.call("web", limited(desc("ip", "1.2.3.4"), 3, typev3.RateLimitUnit_MINUTE)), ok, lim(ok, 3, minute, 2, toMinute))
	// No rule: the override limits it all the same.
	for i := range 7 {
		e.expect(e.call("web", limited(desc("user", "u1"), 7, typev3.RateLimitUnit_SECOND)), ok, lim(ok, 7, second, uint32(6-i), toSecond))
	}
	e.expect(e.call("web", limited(desc("user", "u1"), 7, typev3.RateLimitUnit_SECOND)), over, lim(over, 7, second, 0, toSecond))
	// Another value has its own counter.
	e.expect(e.call("web", limited(desc("user", "u2"), 7, typev3.RateLimitUnit_SECOND)), ok, lim(ok, 7, second, 6, toSecond))
	// An unknown domain: no limit, as the reference answers.
	e.expect(e.call("api", limited(desc("user", "u1"), 1, typev3.RateLimitUnit_SECOND)), ok, none)
	// The next second: the 7/SECOND window starts over.
	e.advance(time.Second)
	e.expect(e.call("web", limited(desc("user", "u1"), 7, typev3.RateLimitUnit_SECOND)), ok, lim(ok, 7, second, 6, toSecond))
	// Its hits count under the reference's key of the descriptor.
	if got, _ := scrape(t, e, `limitd_ratelimit_hits_total{domain="web",rule="user_u1"}`); got != 9 {
		t.Errorf("hits of user_u1: %v, want 9", got)
	}
}

// An override's unit must be one the protocol names.
func TestOverrideUnknownUnit(t *testing.T) {
	e := newEnv(t, overrideRules)
	_, err := e.client.ShouldRateLimit(t.Context(), &rlv3.RateLimitRequest{Domain: "web",
		Descriptors: []*rlcommon.RateLimitDescriptor{desc("ip", "x"), limited(desc("ip", "y"), 3, typev3.RateLimitUnit_UNKNOWN)}})
	if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != "descriptors[1].limit.unit: must be one of SECOND, MINUTE, HOUR, DAY, WEEK, MONTH, YEAR (got UNKNOWN)" {
		t.Errorf("unit UNKNOWN: %v", err)
	}
}
