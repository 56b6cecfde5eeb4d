package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/limitd/limitd/grpcapi"
	"github.com/limitd/limitd/internal/testkit/logtest"
)

const grpcBoot = `
domains:
  - domain: api
    descriptors:
      - key: user
        limiter: {kind: schedule, rate: 1, burst: 1}
`

// grpcClient dials the gRPC address serve's startup line names.
func grpcClient(t *testing.T, logs *logtest.Buffer) *grpc.ClientConn {
	t.Helper()
	m := regexp.MustCompile(`grpc_addr=(\S+)`).FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatalf("no grpc_addr in the startup line:\n%s", logs)
	}
	conn, err := grpc.NewClient(m[1], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func rlRequest(domain string, kv ...string) *rlv3.RateLimitRequest {
	d := &rlcommon.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return &rlv3.RateLimitRequest{Domain: domain, Descriptors: []*rlcommon.RateLimitDescriptor{d}}
}

// serve runs the gRPC front end beside HTTP with LIMITD_GRPC_ADDR: the
// boot file's domains decide, with the token, and its decisions count in
// /metrics; it stops with the HTTP server.
func TestServeGRPC(t *testing.T) {
	file := filepath.Join(t.TempDir(), "boot.yaml")
	if err := os.WriteFile(file, []byte(grpcBoot), 0o600); err != nil {
		t.Fatal(err)
	}
	base, logs, stop := startServe(t, map[string]string{"LIMITD_GRPC_ADDR": "127.0.0.1:0", "LIMITD_CONFIG": file, "LIMITD_TOKEN": "tok"})
	conn := grpcClient(t, logs)
	c := rlv3.NewRateLimitServiceClient(conn)
	ctx := context.Background()
	if _, err := c.ShouldRateLimit(ctx, rlRequest("api", "user", "a")); status.Code(err) != codes.Unauthenticated {
		t.Errorf("without the token: %v, want Unauthenticated", err)
	}
	authed := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer tok")
	r, err := c.ShouldRateLimit(authed, rlRequest("api", "user", "a"))
	if err != nil || r.OverallCode != rlv3.RateLimitResponse_OK {
		t.Fatalf("first: %v, %v", r, err)
	}
	r, err = c.ShouldRateLimit(authed, rlRequest("api", "user", "a"))
	if err != nil || r.OverallCode != rlv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("second at once (1/s strict): %v, %v", r, err)
	}
	h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: grpcapi.ServiceName})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health: %v, %v", h, err)
	}
	res, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	for _, want := range []string{
		`limitd_ratelimit_hits_total{domain="api",rule="user"} 2`,
		`limitd_ratelimit_over_limit_total{domain="api",rule="user"} 1`,
		`limitd_acquire_decisions_total{decision="denied",limiter="",template="envoy.api.`,
		`limitd_grpc_requests_total{code="Unauthenticated"} 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "stopped") {
		t.Errorf("no clean stop:\n%s", logs)
	}
}

func TestGRPCAddrChecked(t *testing.T) {
	for _, v := range []string{"nope", "127.0.0.1:99999"} {
		_, err := loadConfig(map[string]string{"LIMITD_GRPC_ADDR": v})
		if err == nil || !strings.HasPrefix(err.Error(), "LIMITD_GRPC_ADDR: ") {
			t.Errorf("%q: %v", v, err)
		}
	}
	if c, err := loadConfig(map[string]string{}); err != nil || c.GRPCAddr != "" {
		t.Errorf("default: %+v, %v; want off", c, err)
	}
}

// LIMITD_SHADOW_MODE reaches the gRPC front end: a rule over its limit says
// OVER_LIMIT, the call is OK, and nothing was refused.
func TestServeGRPCShadowMode(t *testing.T) {
	file := filepath.Join(t.TempDir(), "boot.yaml")
	if err := os.WriteFile(file, []byte(grpcBoot), 0o600); err != nil {
		t.Fatal(err)
	}
	_, logs, _ := startServe(t, map[string]string{"LIMITD_GRPC_ADDR": "127.0.0.1:0", "LIMITD_CONFIG": file, "LIMITD_SHADOW_MODE": "true"})
	c := rlv3.NewRateLimitServiceClient(grpcClient(t, logs))
	ctx := context.Background()
	for i, want := range []rlv3.RateLimitResponse_Code{rlv3.RateLimitResponse_OK, rlv3.RateLimitResponse_OVER_LIMIT} {
		r, err := c.ShouldRateLimit(ctx, rlRequest("api", "user", "a"))
		if err != nil || r.OverallCode != rlv3.RateLimitResponse_OK || r.Statuses[0].Code != want {
			t.Errorf("call %d: %v, %v; want the call OK, the descriptor %v", i, r, err, want)
		}
	}
}

// serve reloads a changed boot file by itself: the gRPC front end answers
// with the new rules, without a restart.
func TestServeGRPCReload(t *testing.T) {
	file := filepath.Join(t.TempDir(), "boot.yaml")
	if err := os.WriteFile(file, []byte(grpcBoot), 0o600); err != nil {
		t.Fatal(err)
	}
	_, logs, _ := startServe(t, map[string]string{"LIMITD_GRPC_ADDR": "127.0.0.1:0", "LIMITD_CONFIG": file})
	c := rlv3.NewRateLimitServiceClient(grpcClient(t, logs))
	ctx := context.Background()
	if r, err := c.ShouldRateLimit(ctx, rlRequest("api", "path", "/")); err != nil || r.Statuses[0].CurrentLimit != nil {
		t.Fatalf("before: %v, %v; want no rule for path", r, err)
	}
	if err := os.WriteFile(file, []byte(grpcBoot+"      - key: path\n        rate_limit: {unit: minute, requests_per_unit: 7}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		r, err := c.ShouldRateLimit(ctx, rlRequest("api", "path", "/"))
		if err == nil && r.Statuses[0].CurrentLimit.GetRequestsPerUnit() == 7 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the new rule never answered: %v, %v\n%s", r, err, logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), "reloaded the boot file") {
		t.Errorf("no reload line:\n%s", logs)
	}
}
