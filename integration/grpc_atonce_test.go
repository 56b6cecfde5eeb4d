//go:build linux

package integration

import (
	"context"
	"fmt"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/limitd/limitd/internal/testkit/redistest"
)

// TestGRPCUnlimitedPaceAtTwoThousandCallers: a `limiter:` rule of 1e6/s with
// unlimited burst, which no fleet of callers here can reach, answers OK to
// every one of 100,000 calls from 2,000 concurrent callers (20 connections
// of 100 streams, the server's bound per connection), each counter fresh
// when the callers reach it together: the first call of each counter starts
// its schedule, and the calls the server batches with it are decided at the
// same Redis time. A schedule of burst inf starts a call at once within
// AtOnce of its slot (limiter/schedule.go), so that these simultaneous hits
// are not refused (they were: up to 63 of a batch of 64).
func TestGRPCUnlimitedPaceAtTwoThousandCallers(t *testing.T) {
	const (
		conns, streams = 20, 100 // 2,000 callers
		counters       = 50      // each caller asks each counter once: 100,000 calls
	)
	if testing.Short() {
		t.Skip("100,000 gRPC calls through limitd serve: not in -short runs")
	}
	srv := redistest.Server(t)
	boot := filepath.Join(t.TempDir(), "limitd.yaml")
	if err := os.WriteFile(boot, []byte(gbBoot), 0o600); err != nil {
		t.Fatal(err)
	}
	grpcAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(redistest.FreePort(t)))
	p := svServe(t, map[string]string{
		"LIMITD_REDIS_URL":   "redis://" + srv.Addr(),
		"LIMITD_ADMIN_TOKEN": svAdmin,
		"LIMITD_PREFIX":      "atonce",
		"LIMITD_CONFIG":      boot,
		"LIMITD_GRPC_ADDR":   grpcAddr,
	})
	ctx := context.Background()
	var over, failed atomic.Int64
	var firstErr atomic.Pointer[error] // the first wrong answer or unexpected error
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range conns {
		conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		rl := rlsv3.NewRateLimitServiceClient(conn)
		for range streams {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for c := range counters {
					resp, err := rl.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "bench", HitsAddend: 1,
						Descriptors: []*ratelimitv3.RateLimitDescriptor{{
							Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "c" + strconv.Itoa(c)}}}}})
					switch {
					case status.Code(err) == codes.Unavailable:
						// Redis not answering in time on a busy machine: no
						// answer, so no wrong one; bounded below.
						failed.Add(1)
					case err != nil:
						failed.Add(1)
						firstErr.CompareAndSwap(nil, &err)
					case resp.GetOverallCode() != rlsv3.RateLimitResponse_OK:
						over.Add(1)
						e := fmt.Errorf("counter c%d: %v", c, resp)
						firstErr.CompareAndSwap(nil, &e)
					}
				}
			}()
		}
	}
	close(start)
	wg.Wait()
	calls := int64(conns * streams * counters)
	t.Logf("%d OVER_LIMIT, %d failed of %d calls", over.Load(), failed.Load(), calls)
	if first := firstErr.Load(); first != nil {
		t.Errorf("%d OVER_LIMIT of %d calls, want none (first wrong answer or error: %v)", over.Load(), calls, *first)
	}
	if f := failed.Load(); f > calls/20 {
		t.Errorf("%d of %d calls found Redis unavailable, want at most 5%%", f, calls)
	}
	gbCounted(t, p, counters) // the calls made decisions that were written, a counter per value
}
