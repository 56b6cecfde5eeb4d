package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/limitd/limitd/api"
	"github.com/limitd/limitd/grpcapi"
)

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConfigDefaults(t *testing.T) {
	c, err := loadConfig(map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	// The gRPC port's bounds default to grpcapi's.
	want := config{Addr: "127.0.0.1:8080", Prefix: "limitd", LogFormat: "text", LogLevel: "info", AccessLog: "off",
		EventsMaxStreams: api.DefaultMaxEventStreams, GRPCCounting: "reference", GRPCNearRatio: 0.8, GRPCLimits: GRPCLimits(grpcapi.DefaultLimits()),
		TracingSampling: 1, TracingService: "limitd"}
	if c != want {
		t.Errorf("defaults = %+v, want %+v", c, want)
	}
	// An empty variable is the default, not an error.
	c, err = loadConfig(map[string]string{"LIMITD_ADDR": "", "LIMITD_PREFIX": "", "LIMITD_LOG_LEVEL": ""})
	if err != nil || c != want {
		t.Errorf("empty variables: %+v, %v", c, err)
	}
}

func TestConfigFromEnv(t *testing.T) {
	c, err := loadConfig(map[string]string{
		"LIMITD_ADDR": "0.0.0.0:9000", "LIMITD_REDIS_URL": "redis://r:6379", "LIMITD_PREFIX": "app1",
		"LIMITD_CONFIG": "/etc/limitd.yaml", "LIMITD_ADMIN_TOKEN": "adm", "LIMITD_TOKEN": "tok",
		"LIMITD_METRICS_TOKEN": "met", "LIMITD_INSECURE": "false", "LIMITD_LOG_FORMAT": "JSON", "LIMITD_LOG_LEVEL": "Debug",
		"LIMITD_ACCESS_LOG": "Errors", "LIMITD_SHADOW_MODE": "true", "LIMITD_GRPC_COUNTING": "Strict", "LIMITD_EVENTS_MAX_STREAMS": "1000",
		"LIMITD_GRPC_MAX_CONCURRENT_STREAMS": "0", "LIMITD_GRPC_MAX_CONNECTIONS": "2000", "LIMITD_GRPC_MAX_RECV_MSG_SIZE": "4096",
		"LIMITD_GRPC_MAX_SEND_MSG_SIZE": "8192", "LIMITD_GRPC_MAX_HEADER_LIST_SIZE": "16384", "LIMITD_GRPC_KEEPALIVE_MIN_TIME": "10s",
		"LIMITD_GRPC_KEEPALIVE_TIME": "0", "LIMITD_GRPC_KEEPALIVE_TIMEOUT": "5s", "LIMITD_GRPC_MAX_CONNECTION_IDLE": "1h",
		"LIMITD_GRPC_MAX_CONNECTION_AGE": "0", "LIMITD_GRPC_MAX_CONNECTION_AGE_GRACE": "2m",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := config{Addr: "0.0.0.0:9000", RedisURL: "redis://r:6379", Prefix: "app1", ConfigFile: "/etc/limitd.yaml",
		AdminToken: "adm", Token: "tok", MetricsToken: "met", LogFormat: "json", LogLevel: "debug", AccessLog: "errors", ShadowMode: true,
		EventsMaxStreams: 1000, GRPCCounting: "strict", GRPCNearRatio: 0.8, TracingSampling: 1, TracingService: "limitd",
		GRPCLimits: GRPCLimits{MaxConnections: 2000, MaxRecvMsgSize: 4096, MaxSendMsgSize: 8192, MaxHeaderListSize: 16384,
			KeepaliveMinTime: 10 * time.Second, KeepaliveTimeout: 5 * time.Second, MaxConnectionIdle: time.Hour, MaxConnectionAgeGrace: 2 * time.Minute}}
	if c != want {
		t.Errorf("got %+v, want %+v", c, want)
	}
}

// Every variable of docs/configuration.md's table is read, and no other.
func TestConfigVariables(t *testing.T) {
	var got []string
	for _, f := range configFields() {
		got = append(got, f.Tag.Get("env"))
	}
	// docs/configuration.md's table, and the bounds of the gRPC port.
	want := "LIMITD_ADDR LIMITD_GRPC_ADDR LIMITD_REDIS_URL LIMITD_PREFIX LIMITD_CONFIG LIMITD_ADMIN_TOKEN LIMITD_TOKEN LIMITD_METRICS_TOKEN LIMITD_INSECURE LIMITD_LOG_FORMAT LIMITD_LOG_LEVEL LIMITD_ACCESS_LOG LIMITD_SHADOW_MODE LIMITD_EVENTS_MAX_STREAMS" +
		" LIMITD_GRPC_COUNTING LIMITD_GRPC_QUOTA_MODE LIMITD_GRPC_NEAR_LIMIT_RATIO LIMITD_GRPC_OVER_LIMIT_CACHE" +
		" LIMITD_TRACING LIMITD_TRACING_SAMPLING_RATE LIMITD_TRACING_SERVICE_NAME LIMITD_TRACING_SERVICE_NAMESPACE LIMITD_TRACING_SERVICE_INSTANCE_ID" +
		" LIMITD_GRPC_MAX_CONCURRENT_STREAMS LIMITD_GRPC_MAX_CONNECTIONS LIMITD_GRPC_MAX_RECV_MSG_SIZE LIMITD_GRPC_MAX_SEND_MSG_SIZE LIMITD_GRPC_MAX_HEADER_LIST_SIZE" +
		" LIMITD_GRPC_KEEPALIVE_MIN_TIME LIMITD_GRPC_KEEPALIVE_TIME LIMITD_GRPC_KEEPALIVE_TIMEOUT LIMITD_GRPC_MAX_CONNECTION_IDLE LIMITD_GRPC_MAX_CONNECTION_AGE LIMITD_GRPC_MAX_CONNECTION_AGE_GRACE"
	if strings.Join(got, " ") != want {
		t.Errorf("variables %v, want %s", got, want)
	}
}

func TestConfigErrorsNameTheVariable(t *testing.T) {
	for _, tc := range []struct {
		key, val, want string
	}{
		{"LIMITD_LOG_LEVEL", "loud", `LIMITD_LOG_LEVEL: must be one of debug, info, warn, error (got "loud")`},
		{"LIMITD_GRPC_COUNTING", "all", `LIMITD_GRPC_COUNTING: must be one of reference, strict (got "all")`},
		{"LIMITD_ACCESS_LOG", "on", `LIMITD_ACCESS_LOG: must be one of off, errors, all (got "on")`},
		{"LIMITD_LOG_FORMAT", "xml", `LIMITD_LOG_FORMAT: must be one of text, json (got "xml")`},
		{"LIMITD_INSECURE", "yes", `LIMITD_INSECURE: must be true or false (got "yes")`},
		{"LIMITD_SHADOW_MODE", "on", `LIMITD_SHADOW_MODE: must be true or false (got "on")`},
		{"LIMITD_ADDR", "8080", `LIMITD_ADDR: must be host:port, like 127.0.0.1:8080 or 0.0.0.0:8080 (got "8080")`},
		{"LIMITD_ADDR", "127.0.0.1:http", `LIMITD_ADDR: the port must be a number from 0 to 65535 (got "127.0.0.1:http")`},
		{"LIMITD_ADDR", "127.0.0.1:70000", `LIMITD_ADDR: the port must be`},
		{"LIMITD_PREFIX", "a{b}", `LIMITD_PREFIX: must be 1 to 64 of`},
		{"LIMITD_PREFIX", "has space", `LIMITD_PREFIX: must be`},
		{"LIMITD_ADMIN_TOKEN", "secret\n", `LIMITD_ADMIN_TOKEN: must not contain spaces or control characters`},
		{"LIMITD_TOKEN", "a b", `LIMITD_TOKEN: must not contain spaces`},
		{"LIMITD_METRICS_TOKEN", "m\n", `LIMITD_METRICS_TOKEN: must not contain spaces`},
		{"LIMITD_GRPC_MAX_CONCURRENT_STREAMS", "-1", `LIMITD_GRPC_MAX_CONCURRENT_STREAMS: must be a whole number from 0 to 4294967295 (got "-1")`},
		{"LIMITD_GRPC_MAX_CONNECTIONS", "many", `LIMITD_GRPC_MAX_CONNECTIONS: must be a whole number from 0 to`},
		{"LIMITD_GRPC_MAX_HEADER_LIST_SIZE", "8KiB", `LIMITD_GRPC_MAX_HEADER_LIST_SIZE: must be a whole number`},
		{"LIMITD_GRPC_MAX_RECV_MSG_SIZE", "3000000000", `LIMITD_GRPC_MAX_RECV_MSG_SIZE: must be at most 2147483647 bytes (got 3000000000)`},
		{"LIMITD_GRPC_KEEPALIVE_MIN_TIME", "5", `LIMITD_GRPC_KEEPALIVE_MIN_TIME: must be a duration like 30s or 5m, or 0 (got "5")`},
		{"LIMITD_GRPC_MAX_CONNECTION_AGE", "-30m", `LIMITD_GRPC_MAX_CONNECTION_AGE: must not be negative (got -30m0s)`},
		{"LIMITD_GRPC_KEEPALIVE_TIME", "100ms", `LIMITD_GRPC_KEEPALIVE_TIME: must be 0 (no pings) or at least 1s`},
		{"LIMITD_GRPC_KEEPALIVE_TIMEOUT", "0", `LIMITD_GRPC_KEEPALIVE_TIMEOUT: must be more than 0`},
		{"LIMITD_EVENTS_MAX_STREAMS", "many", `LIMITD_EVENTS_MAX_STREAMS: must be a whole number (got "many")`},
		{"LIMITD_EVENTS_MAX_STREAMS", "0", `LIMITD_EVENTS_MAX_STREAMS: must be from 1 to 100000 (got 0)`},
		{"LIMITD_EVENTS_MAX_STREAMS", "100001", `LIMITD_EVENTS_MAX_STREAMS: must be from 1 to 100000`},
	} {
		_, err := loadConfig(map[string]string{tc.key: tc.val})
		if err == nil {
			t.Errorf("%s=%q: no error", tc.key, tc.val)
			continue
		}
		if !strings.HasPrefix(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s=%q:\n got %q\nwant %q…", tc.key, tc.val, err, tc.want)
		}
	}
}

func TestConfigRefusesExposedWithoutAdminToken(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:8080", ":8080", "[::]:8080", "192.168.1.10:8080", "limitd.example:8080"} {
		_, err := loadConfig(map[string]string{"LIMITD_ADDR": addr})
		if err == nil || !strings.HasPrefix(err.Error(), "LIMITD_ADDR: "+addr+" is reachable from other machines") ||
			!strings.Contains(err.Error(), "LIMITD_ADMIN_TOKEN") || !strings.Contains(err.Error(), "LIMITD_INSECURE=true") {
			t.Errorf("%s: err = %v, want a refusal naming LIMITD_ADDR, LIMITD_ADMIN_TOKEN and LIMITD_INSECURE", addr, err)
		}
		if _, err := loadConfig(map[string]string{"LIMITD_ADDR": addr, "LIMITD_ADMIN_TOKEN": "t"}); err != nil {
			t.Errorf("%s with an admin token: %v", addr, err)
		}
		if _, err := loadConfig(map[string]string{"LIMITD_ADDR": addr, "LIMITD_INSECURE": "true"}); err != nil {
			t.Errorf("%s with LIMITD_INSECURE=true: %v", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:8080", "127.0.0.2:0", "localhost:8080", "[::1]:8080"} {
		if _, err := loadConfig(map[string]string{"LIMITD_ADDR": addr}); err != nil {
			t.Errorf("loopback %s refused: %v", addr, err)
		}
	}
}

func TestEnvHelpListsEveryVariable(t *testing.T) {
	h := envHelp()
	for _, f := range configFields() {
		if key := f.Tag.Get("env"); !strings.Contains(h, "  "+key+" ") && !strings.Contains(h, "  "+key+"\n") {
			t.Errorf("help lacks %s:\n%s", key, h)
		}
	}
	for line := range strings.Lines(h) {
		if len([]rune(strings.TrimRight(line, "\n"))) > 80 {
			t.Errorf("help line over 80 columns: %q", line)
		}
	}
	if !strings.Contains(h, "(default 127.0.0.1:8080)") {
		t.Errorf("help lacks the LIMITD_ADDR default:\n%s", h)
	}
}

// The over-limit cache is a number of counters within its bound, and needs
// the reference counting.
func TestGRPCOverLimitCacheConfig(t *testing.T) {
	c, err := loadConfig(map[string]string{"LIMITD_GRPC_OVER_LIMIT_CACHE": "5000"})
	if err != nil || c.GRPCOverLimitCache != 5000 {
		t.Fatalf("5000: %+v, %v", c.GRPCOverLimitCache, err)
	}
	for v, want := range map[string]string{
		"-1":      "LIMITD_GRPC_OVER_LIMIT_CACHE: must be from 0 (off) to 1000000 counters (got -1)",
		"1000001": "LIMITD_GRPC_OVER_LIMIT_CACHE: must be from 0 (off) to 1000000 counters (got 1000001)",
		"many":    "LIMITD_GRPC_OVER_LIMIT_CACHE: must be a whole number",
	} {
		if _, err := loadConfig(map[string]string{"LIMITD_GRPC_OVER_LIMIT_CACHE": v}); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s: %v, want %s", v, err, want)
		}
	}
	// With strict counting too (the reference's LOCAL_CACHE_SIZE_IN_BYTES
	// with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT).
	if c, err := loadConfig(map[string]string{"LIMITD_GRPC_OVER_LIMIT_CACHE": "10", "LIMITD_GRPC_COUNTING": "strict"}); err != nil || c.GRPCOverLimitCache != 10 {
		t.Errorf("with strict counting: %v, %v", c.GRPCOverLimitCache, err)
	}
}

// Quota mode needs the reference counting: a strict call is all or nothing.
func TestGRPCQuotaNeedsReference(t *testing.T) {
	_, err := loadConfig(map[string]string{"LIMITD_GRPC_QUOTA_MODE": "true", "LIMITD_GRPC_COUNTING": "strict"})
	if err == nil || !strings.HasPrefix(err.Error(), "LIMITD_GRPC_QUOTA_MODE: needs LIMITD_GRPC_COUNTING=reference") {
		t.Errorf("quota mode with strict counting: %v", err)
	}
	if _, err := loadConfig(map[string]string{"LIMITD_GRPC_QUOTA_MODE": "true"}); err != nil {
		t.Errorf("quota mode with the default counting: %v", err)
	}
	boot := writeFile(t, "limitd.yaml", "domains:\n  - domain: d\n    descriptors:\n      - key: k\n        quota_mode: true\n        rate_limit: {unit: second, requests_per_unit: 1}\n")
	err = serve(t.Context(), map[string]string{"LIMITD_CONFIG": boot, "LIMITD_GRPC_COUNTING": "strict", "LIMITD_ADDR": "127.0.0.1:0"}, io.Discard, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "1 rules set quota_mode, which needs LIMITD_GRPC_COUNTING=reference") {
		t.Errorf("a boot file with a quota rule under strict counting: %v", err)
	}
}
