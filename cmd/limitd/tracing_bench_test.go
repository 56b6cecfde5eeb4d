package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/limitd/limitd/internal/testkit/logtest"
	"github.com/limitd/limitd/internal/testkit/redistest"
)

// BenchmarkRatelimitCall is one ShouldRateLimit call of limitd ratelimit
// over gRPC (one descriptor, a window rule, on a redis-server of its own),
// callers in parallel, with tracing as LIMITD_BENCH_TRACING says: unset,
// off (the default); "on", every call traced and exported over OTLP/gRPC
// to a collector in the process that keeps nothing. scripts/tracing-vs.sh
// runs it against an older tree.
func BenchmarkRatelimitCall(b *testing.B) {
	redistest.Require(b)
	srv := redistest.Server(b)
	root := b.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "config"), 0o700); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "config", "a.yaml"), []byte(domainFile("a", "k", 1_000_000_000)), 0o600); err != nil {
		b.Fatal(err)
	}
	env := map[string]string{"HOST": "127.0.0.1", "PORT": "0", "DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0",
		"GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0", "LOG_LEVEL": "error", "RUNTIME_ROOT": root, "REDIS_URL": srv.Addr()}
	if os.Getenv("LIMITD_BENCH_TRACING") == "on" {
		b.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", benchCollector(b))
		env["TRACING_ENABLED"], env["TRACING_EXPORTER_PROTOCOL"] = "true", "grpc"
	}
	logs := &logtest.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	started, errc := make(chan struct{}), make(chan error, 1)
	go func() { errc <- serveRatelimit(ctx, env, logs, func(net.Addr) { close(started) }) }()
	select {
	case <-started:
	case err := <-errc:
		cancel()
		b.Fatalf("limitd ratelimit: %v\n%s", err, logs)
	}
	defer func() { cancel(); <-errc }()
	addr := ""
	for _, m := range grpcAddrRE.FindAllStringSubmatch(logs.String(), -1) {
		addr = m[1]
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	c := rlv3.NewRateLimitServiceClient(conn)
	req := &rlv3.RateLimitRequest{Domain: "a", Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "k", Value: "x"}}}}}
	for { // the rules loaded: every call answered
		if _, err := c.ShouldRateLimit(ctx, req); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Every call must be answered with the rule's limit; on a machine so
	// busy that Redis misses limitd's timeout a few may fail (UNAVAILABLE),
	// reported as failed/op; more than 1% fails the run.
	var failed atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r, err := c.ShouldRateLimit(ctx, req)
			if err != nil {
				failed.Add(1)
				continue
			}
			if r.OverallCode != rlv3.RateLimitResponse_OK || r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 1_000_000_000 {
				b.Errorf("call: %v", r)
				return
			}
		}
	})
	b.ReportMetric(float64(failed.Load())/float64(b.N), "failed/op")
	if failed.Load()*100 > int64(b.N) {
		b.Errorf("%d of %d calls failed", failed.Load(), b.N)
	}
}

// grpcAddrRE finds the gRPC address in the startup line.
var grpcAddrRE = regexp.MustCompile(`grpc_addr=(\S+)`)

// benchCollector is an OTLP/gRPC collector that drops what it is sent: its
// URL.
func benchCollector(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	g := grpc.NewServer()
	registerDropCollector(g)
	go func() { _ = g.Serve(ln) }()
	b.Cleanup(g.Stop)
	return "http://" + ln.Addr().String()
}
