package grpcapi

import (
	"context"
	"strings"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/internal/testkit/redistest"
)

// A Redis that refuses limitd's password answers UNAVAILABLE naming the
// condition and the setting to fix (here as limitd ratelimit names it),
// never INTERNAL.
func TestRedisWrongPassUnavailable(t *testing.T) {
	srv := redistest.Server(t)
	srv.AddUser("limitd", "right-pw")
	ctx := context.Background()
	e := newEnvOver(t, srv.UserClient("limitd", "right-pw"), `
domains:
  - domain: d
    descriptors:
      - key: k
        rate_limit: {unit: second, requests_per_unit: 5}
`, func(_ *Options, c *core.Options) {
		c.Redis = core.RedisSettings{Address: "REDIS_URL", Credentials: "REDIS_AUTH"}
	})
	if r := e.call("d", desc("k", "v")); r.OverallCode != rlv3.RateLimitResponse_OK {
		t.Fatalf("with the right password: %v", r)
	}
	// The password changes under limitd, and its connections go.
	srv.SetPassword("limitd", "new-pw")
	var msg string
	for range 5 { // the first call may meet a connection the kill closed
		_, err := e.client.ShouldRateLimit(ctx, &rlv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{desc("k", "v")}})
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("ShouldRateLimit: %v, want UNAVAILABLE", err)
		}
		if msg = status.Convert(err).Message(); strings.Contains(msg, "WRONGPASS") {
			break
		}
	}
	if !strings.Contains(msg, "WRONGPASS: ") || !strings.Contains(msg, "in REDIS_AUTH") || strings.Contains(msg, "pw") {
		t.Errorf("message %q, want WRONGPASS named, REDIS_AUTH to fix, no password", msg)
	}
}
