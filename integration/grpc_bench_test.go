//go:build linux

package integration

// BenchmarkGRPCvsHTTP measures one decision through `limitd serve`'s two
// front ends in one run (the real binary over a private redis-server), in
// alternating rounds (internal/testkit/rounds: 200 ms a side, the one going first
// rotating, medians): ShouldRateLimit of the Envoy rate limit service over
// gRPC, from 1 or 64 concurrent calls on one HTTP/2 connection, as Envoy
// sends them, and POST /v1/limiters/{name}/acquire over HTTP/1.1 from as
// many keep-alive connections. Both ask a template instance of the same
// config (rate 1e6/s, burst inf: every call granted, so it measures the cost
// of a decision): one key (hot) or round-robin over 10,000 (10k-keys). A
// gRPC call's descriptor is a counter of the boot file's rule, decided
// through core's all-or-nothing AcquireAll; an HTTP acquire is one
// limiter's. Metrics: grpc-ns/op and http-ns/op (the median time per call;
// its inverse is decisions/s), grpc/http (the median ratio of the two:
// below 1, gRPC is the cheaper). After the run it checks that the rule's
// counters exist in Redis, one per value: the gRPC calls decided.
//
//	go test -run='^$' -bench=BenchmarkGRPCvsHTTP -benchtime=10x ./integration/

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/limitd/limitd/internal/testkit/redistest"
	"github.com/limitd/limitd/internal/testkit/rounds"
)

// gbBoot is the benchmark's boot file: one Envoy rule, a counter per value
// of the descriptor key "k", with the config the HTTP side's template has.
const gbBoot = `domains:
  - domain: bench
    descriptors:
      - key: k
        limiter: {rate: 1000000, burst: inf}
`

func BenchmarkGRPCvsHTTP(b *testing.B) {
	srv := redistest.Server(b)
	boot := filepath.Join(b.TempDir(), "limitd.yaml")
	if err := os.WriteFile(boot, []byte(gbBoot), 0o600); err != nil {
		b.Fatal(err)
	}
	grpcAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(redistest.FreePort(b)))
	p := svServe(b, map[string]string{
		"LIMITD_REDIS_URL":   "redis://" + srv.Addr(),
		"LIMITD_ADMIN_TOKEN": svAdmin,
		"LIMITD_PREFIX":      "gb",
		"LIMITD_CONFIG":      boot,
		"LIMITD_GRPC_ADDR":   grpcAddr,
	})
	p.json("PUT", "/v1/templates/k", svAdmin, `{"pattern":"k:*","limiter":{"rate":1000000,"burst":"inf"}}`,
		http.StatusCreated, nil)
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	rl := rlsv3.NewRateLimitServiceClient(conn)
	ctx := context.Background()
	for _, streams := range []int{1, 64} {
		for _, set := range []struct {
			name string
			keys int
		}{{"hot", 1}, {"10k-keys", 10_000}} {
			b.Run(fmt.Sprintf("s%d/%s", streams, set.name), func(b *testing.B) {
				tr := &http.Transport{MaxIdleConns: streams, MaxIdleConnsPerHost: streams, MaxConnsPerHost: streams,
					DisableCompression: true}
				defer tr.CloseIdleConnections()
				hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
				body := []byte(`{"permits":1}`)
				reqs := make([]*rlsv3.RateLimitRequest, set.keys)
				urls := make([]string, set.keys)
				for i := range set.keys {
					v := "v" + strconv.Itoa(i)
					reqs[i] = &rlsv3.RateLimitRequest{Domain: "bench", HitsAddend: 1,
						Descriptors: []*ratelimitv3.RateLimitDescriptor{{
							Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: v}}}}}
					urls[i] = p.base + "/v1/limiters/k:" + v + "/acquire"
				}
				var gi, hi atomic.Int64
				var failed atomic.Value
				grpcOp := func() bool {
					i := gi.Add(1) % int64(set.keys)
					resp, err := rl.ShouldRateLimit(ctx, reqs[i])
					if err == nil && resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
						err = fmt.Errorf("ShouldRateLimit = %v, want OK", resp)
					}
					if err != nil {
						failed.Store(err)
						return false
					}
					return true
				}
				httpOp := func() bool {
					i := hi.Add(1) % int64(set.keys)
					if err := hbAcquire(hc, urls[i], body); err != nil {
						failed.Store(err)
						return false
					}
					return true
				}
				rounds.Run(b, streams, 200*time.Millisecond, rounds.Side{Name: "grpc", Op: grpcOp},
					rounds.Side{Name: "http", Op: httpOp})
				if err := failed.Load(); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
	gbCounted(b, p, 10_000)
}

// gbCounted fails b unless the rule's template has at least n instances in
// Redis: the gRPC calls made decisions that were written, one counter per
// value, as the HTTP acquires did.
func gbCounted(b testing.TB, p *svProc, n int64) {
	b.Helper()
	var list struct {
		Templates []struct {
			ID string `json:"id"`
		} `json:"templates"`
	}
	p.json("GET", "/v1/templates", svAdmin, "", http.StatusOK, &list)
	for _, t := range list.Templates {
		if !strings.HasPrefix(t.ID, "envoy.bench") {
			continue
		}
		var got struct {
			Instances int64 `json:"instances"`
		}
		p.json("GET", "/v1/templates/"+t.ID, svAdmin, "", http.StatusOK, &got)
		if got.Instances < n {
			b.Fatalf("template %s has %d instances after the run, want at least %d", t.ID, got.Instances, n)
		}
		return
	}
	b.Fatalf("no template of the rule (envoy.bench…) in %+v", list)
}
