package main

import (
	"context"
	"github.com/limitd/limitd/internal/testkit/logtest"
	"github.com/limitd/limitd/internal/testkit/xdstest"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// startRatelimit runs limitd ratelimit with env on loopback ports of its
// own, and returns its log and the addresses of its startup line
// (grpc_addr, http_addr, debug_addr, metrics_addr).
func startRatelimit(t *testing.T, env map[string]string) (*logtest.Buffer, map[string]string) {
	t.Helper()
	base := map[string]string{"HOST": "127.0.0.1", "PORT": "0", "DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0",
		"GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0", "LOG_LEVEL": "info"}
	for k, v := range env {
		base[k] = v
	}
	logs := &logtest.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	errc := make(chan error, 1)
	go func() { errc <- serveRatelimit(ctx, base, logs, func(net.Addr) { close(started) }) }()
	select {
	case <-started:
	case err := <-errc:
		cancel()
		t.Fatalf("limitd ratelimit: %v\n%s", err, logs)
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatalf("limitd ratelimit did not start:\n%s", logs)
	}
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-errc:
			if err != nil {
				t.Errorf("stop: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("limitd ratelimit did not stop:\n%s", logs)
		}
	})
	addrs := map[string]string{}
	for _, m := range regexp.MustCompile(`(\w+_addr)=(\S+)`).FindAllStringSubmatch(logs.String(), -1) {
		addrs[m[1]] = m[2]
	}
	return logs, addrs
}

// rlConn dials the gRPC address.
func rlConn(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// eventually retries check until it passes or 15 s pass.
func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// fetch GETs url: status and body.
func fetch(t *testing.T, url string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// limitOf asks for one descriptor and returns the limit the answer names
// (0: none).
func limitOf(ctx context.Context, c rlv3.RateLimitServiceClient, domain string, kv ...string) (uint32, *rlv3.RateLimitResponse, error) {
	r, err := c.ShouldRateLimit(ctx, rlRequest(domain, kv...))
	if err != nil {
		return 0, nil, err
	}
	return r.Statuses[0].GetCurrentLimit().GetRequestsPerUnit(), r, nil
}

func domainFile(domain, key string, perMinute int) string {
	return "domain: " + domain + "\ndescriptors:\n  - key: " + key + "\n    rate_limit:\n      unit: minute\n      requests_per_unit: " + strconv.Itoa(perMinute) + "\n"
}

// limitd ratelimit reads a runtime directory laid out as the reference's
// (RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config/*.yaml): every file is loaded,
// a change to one is applied without a restart, a bad change is refused
// with the rules in place still answering; the reference's Redis, metrics
// and header variables act, and the ones it ignores are named.
func TestRatelimitRuntimeDir(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("a.yaml", domainFile("a", "k", 3))
	write("b.yaml", domainFile("b", "k", 5))
	write("c.yaml", domainFile("c", "k", 7))
	write(".hidden.yaml", "not: [a domain") // RUNTIME_IGNOREDOTFILES
	mini := miniredis.RunT(t)
	logs, addrs := startRatelimit(t, map[string]string{
		"RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_IGNOREDOTFILES": "true", "RUNTIME_WATCH_ROOT": "false",
		"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": mini.Addr(), "CACHE_KEY_PREFIX": "rl_",
		"USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": "127.0.0.1:0", "LIMIT_RESPONSE_HEADERS_ENABLED": "true",
		"USE_STATSD": "true", "STATSD_PORT": "9125",
	})
	c := rlv3.NewRateLimitServiceClient(rlConn(t, addrs["grpc_addr"]))
	ctx := t.Context()
	for domain, want := range map[string]uint32{"a": 3, "b": 5, "c": 7} {
		got, r, err := limitOf(ctx, c, domain, "k", "x")
		if err != nil || got != want {
			t.Errorf("domain %s: limit %d, %v; want %d", domain, got, err, want)
		}
		if err == nil && (len(r.ResponseHeadersToAdd) != 3 || r.ResponseHeadersToAdd[0].Key != "RateLimit-Limit") {
			t.Errorf("domain %s: headers %v, want RateLimit-Limit, -Remaining, -Reset", domain, r.ResponseHeadersToAdd)
		}
	}
	if code, body := fetch(t, "http://"+addrs["http_addr"]+"/healthcheck"); code != 200 || body != "OK" {
		t.Errorf("/healthcheck: %d %q", code, body)
	}

	write("b.yaml", domainFile("b", "k", 9))
	eventually(t, "the changed file applied", func() error {
		if got, _, err := limitOf(ctx, c, "b", "k", "x"); err != nil || got != 9 {
			return status.Errorf(codes.Unknown, "limit %d, %v", got, err)
		}
		return nil
	})
	write("c.yaml", "domain: c\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	eventually(t, "the bad file logged", func() error {
		if !strings.Contains(logs.String(), "the runtime directory changed and is invalid") {
			return io.EOF
		}
		return nil
	})
	if !strings.Contains(logs.String(), "c.yaml: line 4: descriptors[0].rate_limit.unit") {
		t.Errorf("the error does not name the file, line and field:\n%s", logs)
	}
	for domain, want := range map[string]uint32{"a": 3, "b": 9, "c": 7} {
		if got, _, err := limitOf(ctx, c, domain, "k", "y"); err != nil || got != want {
			t.Errorf("after a bad change, domain %s: limit %d, %v; want %d (the rules in place)", domain, got, err, want)
		}
	}

	_, metrics := fetch(t, "http://"+addrs["metrics_addr"]+"/metrics")
	for _, want := range []string{
		`ratelimit_service_rate_limit_total_hits{domain="a",key1="k",key2=""} 2`,
		`limitd_ratelimit_hits_total{domain="a",rule="k"} 2`,
		"ratelimit_service_config_load_success 2",
		"ratelimit_service_config_load_error 1",
		"# TYPE limitd_limiters_scraped gauge", // the sampler's, without the admin API
		// The Go and process collectors, without limitd's API, as the
		// reference's default registry has them; every call timed.
		"\ngo_goroutines ", "\nprocess_start_time_seconds ",
		`ratelimit_service_response_time_seconds_bucket{grpc_method="ShouldRateLimit",le="0.005"}`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// /rlconfig as the reference prints it: a line per rule.
	if code, body := fetch(t, "http://"+addrs["debug_addr"]+"/rlconfig"); code != 200 ||
		!strings.Contains(body, "a.k: unit=MINUTE requests_per_unit=3, shadow_mode: false, quota_mode: false\n") ||
		!strings.Contains(body, "b.k: unit=MINUTE requests_per_unit=9, shadow_mode: false, quota_mode: false\n") || strings.Count(body, "\n") != 3 {
		t.Errorf("/rlconfig: %d %s", code, body)
	}
	if code, body := fetch(t, "http://"+addrs["debug_addr"]+"/rlconfig?format=json"); code != 200 || !strings.Contains(body, `"domains": 3`) ||
		!strings.Contains(body, `"name": "a.k"`) {
		t.Errorf("/rlconfig?format=json: %d %s", code, body)
	}
	var prefixed bool
	for _, k := range mini.Keys() {
		prefixed = prefixed || strings.HasPrefix(k, "rl:")
	}
	if !prefixed {
		t.Errorf("no key under CACHE_KEY_PREFIX's prefix: %v", mini.Keys())
	}
	for _, want := range []string{"ignored: USE_STATSD", "ignored: STATSD_PORT", "mode=ratelimit"} {
		if strings.Count(logs.String(), want) != 1 {
			t.Errorf("the log names %q %d times, want once:\n%s", want, strings.Count(logs.String(), want), logs)
		}
	}
}

// xdsServer is a management server as Envoy Gateway runs one: go-control-
// plane's snapshot cache behind its ADS server. requests records what the
func rlConfig(name, domain, key string, unit rlsconfv3.RateLimitUnit, n uint32) *rlsconfv3.RateLimitConfig {
	return &rlsconfv3.RateLimitConfig{Name: name, Domain: domain, Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: key, RateLimit: &rlsconfv3.RateLimitPolicy{Unit: unit, RequestsPerUnit: n}}}}
}

// healthOf is the gRPC health of the service "ratelimit" and /healthcheck.
func healthOf(t *testing.T, conn *grpc.ClientConn, httpAddr string) (healthpb.HealthCheckResponse_ServingStatus, int) {
	t.Helper()
	h, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{Service: "ratelimit"})
	if err != nil {
		t.Fatal(err)
	}
	code, _ := fetch(t, "http://"+httpAddr+"/healthcheck")
	return h.Status, code
}

// limitd ratelimit takes its rules over xDS from a management server, as
// Envoy Gateway feeds its rate limit deployment: rules applied, a changed
// snapshot applied without a restart, a bad one NACKed with its error while
// the rules in place keep answering, and health before the first snapshot
// as FORCE_START_WITHOUT_INITIAL_CONFIG and
// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED say.
func TestRatelimitXDS(t *testing.T) {
	x := xdstest.Start(t, nil)
	env := map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": x.Addr,
		"CONFIG_GRPC_XDS_NODE_ID": "envoy-ratelimit", "CONFIG_GRPC_XDS_NODE_METADATA": "zone=a,team=edge",
		"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "100ms", "XDS_CLIENT_BACKOFF_MAX_INTERVAL": "1s",
		"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL": "100ms", "REDIS_URL": miniredis.RunT(t).Addr()}
	_, addrs := startRatelimit(t, env)
	conn := rlConn(t, addrs["grpc_addr"])
	c := rlv3.NewRateLimitServiceClient(conn)
	ctx := t.Context()

	// Before the first snapshot: not healthy (FORCE_START_WITHOUT_INITIAL_CONFIG
	// is false), and calls are UNAVAILABLE, for Envoy's failure mode to decide.
	if h, code := healthOf(t, conn, addrs["http_addr"]); h != healthpb.HealthCheckResponse_NOT_SERVING || code != 500 {
		t.Errorf("before any rules: health %v, /healthcheck %d; want NOT_SERVING, 500", h, code)
	}
	if _, err := c.ShouldRateLimit(ctx, rlRequest("web", "ip", "1.2.3.4")); status.Code(err) != codes.Unavailable {
		t.Errorf("a call before any rules: %v, want UNAVAILABLE", err)
	}

	x.Set(t, "envoy-ratelimit", "1", rlConfig("web", "web", "ip", rlsconfv3.RateLimitUnit_MINUTE, 3))
	eventually(t, "the first snapshot applied", func() error {
		if got, _, err := limitOf(ctx, c, "web", "ip", "1.2.3.4"); err != nil || got != 3 {
			return status.Errorf(codes.Unknown, "limit %d, %v", got, err)
		}
		return nil
	})
	if h, code := healthOf(t, conn, addrs["http_addr"]); h != healthpb.HealthCheckResponse_SERVING || code != 200 {
		t.Errorf("with rules: health %v, /healthcheck %d; want SERVING, 200", h, code)
	}

	x.Set(t, "envoy-ratelimit", "2", rlConfig("web", "web", "ip", rlsconfv3.RateLimitUnit_MINUTE, 7),
		rlConfig("api", "api", "user", rlsconfv3.RateLimitUnit_SECOND, 2))
	eventually(t, "the changed snapshot applied", func() error {
		if got, _, err := limitOf(ctx, c, "web", "ip", "1.2.3.4"); err != nil || got != 7 {
			return status.Errorf(codes.Unknown, "web: limit %d, %v", got, err)
		}
		if got, _, err := limitOf(ctx, c, "api", "user", "u"); err != nil || got != 2 {
			return status.Errorf(codes.Unknown, "api: limit %d, %v", got, err)
		}
		return nil
	})

	// A rate_limit without a unit does not compile: NACKed, naming it.
	x.Set(t, "envoy-ratelimit", "3", rlConfig("web", "web", "ip", rlsconfv3.RateLimitUnit_UNKNOWN, 1))
	var nack *discoveryv3.DiscoveryRequest
	eventually(t, "the bad snapshot NACKed", func() error {
		for _, r := range x.Requests() {
			if r.ErrorDetail != nil {
				nack = r
				return nil
			}
		}
		return io.EOF
	})
	if msg := nack.ErrorDetail.GetMessage(); !strings.Contains(msg, `RateLimitConfig "web" (domain "web"): descriptors[0].rate_limit.unit: must be one of`) {
		t.Errorf("NACK detail %q, want the resource, the field and the rule", msg)
	}
	if nack.VersionInfo != "2" {
		t.Errorf("NACK version %q, want 2, the last ACKed", nack.VersionInfo)
	}
	if got, _, err := limitOf(ctx, c, "web", "ip", "5.6.7.8"); err != nil || got != 7 {
		t.Errorf("after the NACK: limit %d, %v; want 7, the rules in place", got, err)
	}
	var acked []string
	for _, r := range x.Requests() {
		if r.ErrorDetail == nil && r.VersionInfo != "" && r.ResponseNonce != "" {
			acked = append(acked, r.VersionInfo)
		}
		if r.Node.GetId() != "envoy-ratelimit" || r.Node.GetMetadata().GetFields()["zone"].GetStringValue() != "a" {
			t.Errorf("request from node %v, want envoy-ratelimit with zone=a", r.Node)
		}
		if r.TypeUrl != resourcev3.RateLimitConfigType {
			t.Errorf("type %s", r.TypeUrl)
		}
	}
	if strings.Join(acked, ",") != "1,2" {
		t.Errorf("ACKed versions %v, want 1,2", acked)
	}

	// Health as the variables say, for a node no snapshot is for yet.
	t.Run("health", func(t *testing.T) {
		for _, tc := range []struct {
			vars map[string]string
			want healthpb.HealthCheckResponse_ServingStatus
		}{
			{map[string]string{"FORCE_START_WITHOUT_INITIAL_CONFIG": "true"}, healthpb.HealthCheckResponse_SERVING},
			{map[string]string{"FORCE_START_WITHOUT_INITIAL_CONFIG": "true", "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "true"}, healthpb.HealthCheckResponse_NOT_SERVING},
		} {
			e := map[string]string{}
			for k, v := range env {
				e[k] = v
			}
			for k, v := range tc.vars {
				e[k] = v
			}
			e["CONFIG_GRPC_XDS_NODE_ID"] = "other"
			_, a := startRatelimit(t, e)
			if h, code := healthOf(t, rlConn(t, a["grpc_addr"]), a["http_addr"]); h != tc.want || (code == 200) != (tc.want == healthpb.HealthCheckResponse_SERVING) {
				t.Errorf("%v: health %v, /healthcheck %d; want %v", tc.vars, h, code, tc.want)
			}
		}
	})
}
