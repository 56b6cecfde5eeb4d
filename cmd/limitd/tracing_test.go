package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/alicebob/miniredis/v2"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// collector is an OTLP trace collector in the test: it keeps every span
// exported to it, over gRPC (TraceService) or HTTP (POST /v1/traces,
// protobuf).
type collector struct {
	collectortrace.UnimplementedTraceServiceServer
	mu       sync.Mutex
	spans    []*tracepb.Span
	services []string // service.name of each export
}

func (c *collector) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		for _, a := range rs.GetResource().GetAttributes() {
			if a.Key == "service.name" {
				c.services = append(c.services, a.GetValue().GetStringValue())
			}
		}
		for _, ss := range rs.ScopeSpans {
			c.spans = append(c.spans, ss.Spans...)
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// serveGRPC serves the collector over gRPC on a loopback port: its URL.
func (c *collector) serveGRPC(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(g, c)
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Serve(ln) }()
	t.Cleanup(func() { g.Stop(); <-done })
	return "http://" + ln.Addr().String()
}

// serveHTTP serves the collector over HTTP: its URL.
func (c *collector) serveHTTP(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		var req collectortrace.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(body, &req)
		}
		if r.URL.Path != "/v1/traces" || err != nil {
			http.Error(w, fmt.Sprintf("%s: %v", r.URL.Path, err), http.StatusBadRequest)
			return
		}
		resp, _ := c.Export(r.Context(), &req)
		out, _ := proto.Marshal(resp)
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// parentAndChild finds a span named parent and, in its trace, the child
// spans whose db.system is redis: their names, or an error saying what is
// missing.
func (c *collector) parentAndChild(parent string) ([]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var names, children []string
	for _, p := range c.spans {
		names = append(names, p.Name)
		if p.Name != parent {
			continue
		}
		for _, s := range c.spans {
			if string(s.TraceId) != string(p.TraceId) || string(s.ParentSpanId) != string(p.SpanId) {
				continue
			}
			for _, a := range s.Attributes {
				if (a.Key == "db.system" || a.Key == "db.system.name") && a.GetValue().GetStringValue() == "redis" {
					children = append(children, s.Name)
				}
			}
		}
		if len(children) == 0 {
			return nil, fmt.Errorf("span %q (trace %s) has no Redis child among %v", parent, hex.EncodeToString(p.TraceId), names)
		}
		return children, nil
	}
	return nil, fmt.Errorf("no span %q among %v", parent, names)
}

// A ShouldRateLimit call of limitd ratelimit with the reference's
// TRACING_* variables is a trace at the collector: its span, and under it
// the span of the Redis pipeline it sent (go-redis' redisotel).
func TestTracingRatelimitOTLP(t *testing.T) {
	for _, protocol := range []string{"grpc", "http"} {
		t.Run(protocol, func(t *testing.T) {
			var c collector
			url := c.serveHTTP
			if protocol == "grpc" {
				url = c.serveGRPC
			}
			// The exporter reads its OTEL_* variables itself, from the
			// process' environment, as the reference's does.
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url(t))
			t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50") // ms: export at once
			root := t.TempDir()
			dir := filepath.Join(root, "config")
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(domainFile("a", "k", 3)), 0o600); err != nil {
				t.Fatal(err)
			}
			mini := miniredis.RunT(t)
			_, addrs := startRatelimit(t, map[string]string{"RUNTIME_ROOT": root, "RUNTIME_APPDIRECTORY": "config", "REDIS_URL": mini.Addr(),
				"TRACING_ENABLED": "true", "TRACING_EXPORTER_PROTOCOL": protocol, "TRACING_SERVICE_NAME": "rl-test"})
			client := rlv3.NewRateLimitServiceClient(rlConn(t, addrs["grpc_addr"]))
			if got, _, err := limitOf(t.Context(), client, "a", "k", "x"); err != nil || got != 3 {
				t.Fatalf("ShouldRateLimit: limit %d, %v; want 3", got, err)
			}
			var children []string
			eventually(t, "the call's trace at the collector", func() (err error) {
				children, err = c.parentAndChild(rlv3.RateLimitService_ShouldRateLimit_FullMethodName[1:])
				return err
			})
			if !slices.ContainsFunc(children, func(n string) bool { return strings.HasPrefix(n, "redis.pipeline") }) {
				t.Errorf("the call's Redis spans %v lack the decision's pipeline", children)
			}
			c.mu.Lock()
			defer c.mu.Unlock()
			if len(c.services) == 0 || c.services[0] != "rl-test" {
				t.Errorf("service.name %v, want rl-test (TRACING_SERVICE_NAME)", c.services)
			}
		})
	}
}

// registerDropCollector registers a collector that keeps nothing.
func registerDropCollector(g *grpc.Server) {
	collectortrace.RegisterTraceServiceServer(g, dropCollector{})
}

type dropCollector struct {
	collectortrace.UnimplementedTraceServiceServer
}

func (dropCollector) Export(context.Context, *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// An acquire of limitd serve with LIMITD_TRACING=otlp-http is a trace at
// the collector: the request's span, named by its route, and under it the
// Redis commands it sent; the caller's trace (W3C traceparent) goes on.
func TestTracingServeAcquire(t *testing.T) {
	var c collector
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", c.serveHTTP(t))
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	mini := miniredis.RunT(t)
	base, logs, stop := startServe(t, map[string]string{"LIMITD_REDIS_URL": mini.Addr(), "LIMITD_TRACING": "otlp-http"})
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("stop: %v\n%s", err, logs)
		}
	}()
	do := func(method, path, body string, header ...string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode >= 300 {
			t.Fatalf("%s %s: %d", method, path, resp.StatusCode)
		}
	}
	do("PUT", "/v1/limiters/login", `{"kind":"smooth","rate":5}`)
	const parent = "4bf92f3577b34da6a3ce929d0e0e4736"
	do("POST", "/v1/limiters/login/acquire", `{}`, "traceparent", "00-"+parent+"-00f067aa0ba902b7-01")
	eventually(t, "the acquire's trace at the collector", func() error {
		_, err := c.parentAndChild("POST /v1/limiters/{name}/acquire")
		return err
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.spans {
		if s.Name == "POST /v1/limiters/{name}/acquire" && hex.EncodeToString(s.TraceId) != parent {
			t.Errorf("the acquire's span is in trace %x, want the caller's %s", s.TraceId, parent)
		}
	}
	if len(c.services) == 0 || c.services[0] != "limitd" {
		t.Errorf("service.name %v, want limitd (LIMITD_TRACING_SERVICE_NAME's default)", c.services)
	}
}
