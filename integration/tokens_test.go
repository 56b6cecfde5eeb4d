//go:build linux

package integration

// An LLM gateway's token budget across a fleet: three `limitd serve`
// processes over one redis-server, each serving Envoy's rate limit protocol
// with the same rule, asked in turn as a fleet of Envoys would. Each request
// is checked with its descriptor's hits_addend 0 and, once its answer is
// known, the tokens it used are added with hits_addend N (Envoy Gateway's
// rate limit cost; Envoy AI Gateway's token usage). The budget holds across
// the processes, counted on Redis' clock.

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/limitd/limitd/internal/testkit/redistest"
)

const tkBoot = `domains:
  - domain: llm
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 1000}
`

func TestTokenBudgetAcrossProcesses(t *testing.T) {
	srv := redistest.Server(t)
	boot := filepath.Join(t.TempDir(), "limitd.yaml")
	if err := os.WriteFile(boot, []byte(tkBoot), 0o600); err != nil {
		t.Fatal(err)
	}
	var clients []rlsv3.RateLimitServiceClient
	for range 3 {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(redistest.FreePort(t)))
		svServe(t, map[string]string{
			"LIMITD_REDIS_URL": "redis://" + srv.Addr(), "LIMITD_PREFIX": "tk",
			"LIMITD_CONFIG": boot, "LIMITD_GRPC_ADDR": addr,
		})
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		clients = append(clients, rlsv3.NewRateLimitServiceClient(conn))
	}
	call := 0
	// ask sends one descriptor of user with hits through the next process.
	ask := func(user string, hits uint64) *rlsv3.RateLimitResponse {
		t.Helper()
		c := clients[call%len(clients)]
		call++
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "llm", Descriptors: []*rlcommon.RateLimitDescriptor{{
			Entries:    []*rlcommon.RateLimitDescriptor_Entry{{Key: "user", Value: user}},
			HitsAddend: wrapperspb.UInt64(hits),
		}}})
		if err != nil {
			t.Fatalf("ShouldRateLimit(%s, %d): %v", user, hits, err)
		}
		return r
	}
	// serve runs requests of user that each use tokens, until a check
	// refuses or 10 are admitted; it returns how many were admitted and
	// the reset the refusal told.
	serve := func(user string, tokens uint64) (int, time.Duration) {
		for n := 0; n < 10; n++ {
			r := ask(user, 0)
			if r.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
				return n, r.Statuses[0].DurationUntilReset.AsDuration()
			}
			ask(user, tokens)
		}
		return 10, 0
	}
	// A minute boundary between the steps starts a new budget: a run that
	// crosses one (Redis' clock read before and after) is run again, by
	// another user.
	rdb := srv.Client()
	minute := func() int64 {
		now, err := rdb.Time(context.Background()).Result()
		if err != nil {
			t.Fatal(err)
		}
		return now.Unix() / 60
	}
	within := func(user string, tokens uint64) (n int, reset time.Duration) {
		for try := 0; ; try++ {
			m := minute()
			n, reset = serve(user+strconv.Itoa(try), tokens)
			if minute() == m || try == 2 {
				return n, reset
			}
		}
	}
	if n, reset := within("ann", 300); n != 4 || reset <= 0 || reset > time.Minute {
		t.Errorf("300-token answers: %d admitted (reset %v), want 4 in the minute", n, reset)
	}
	if n, _ := within("bob", 1500); n != 1 {
		t.Errorf("a 1,500-token answer: %d admitted, want 1", n)
	}
}
