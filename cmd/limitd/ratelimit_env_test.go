package main

import (
	"context"
	"io"
	"strings"
	"testing"
)

// The LIMITD_* variables the reference's set (internal/refenv) pass
// limitd's own check; what either refuses is named under the reference's
// variable.
func TestRatelimitEnv(t *testing.T) {
	for _, env := range []map[string]string{
		{},
		{"REDIS_URL": "redis:6380", "REDIS_TLS": "true", "REDIS_AUTH": "app:pw", "REDIS_TIMEOUT": "2s", "REDIS_POOL_SIZE": "20",
			"LOCAL_CACHE_SIZE_IN_BYTES": "1048576", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true",
			"TRACING_ENABLED": "true", "TRACING_EXPORTER_PROTOCOL": "grpc", "TRACING_SAMPLING_RATE": "0.25", "TRACING_SERVICE_NAMESPACE": "gw",
			"GRPC_HOST": "127.0.0.1", "GRPC_PORT": "9000", "LOG_LEVEL": "TRACE", "LOG_FORMAT": "json", "CACHE_KEY_PREFIX": "ratelimit:",
			"SHADOW_MODE": "true", "NEAR_LIMIT_RATIO": "0.9", "GRPC_MAX_CONNECTION_AGE": "1h"},
		{"REDIS_TYPE": "SENTINEL", "REDIS_URL": "mymaster,s1:26379,s2:26379", "REDIS_AUTH": "mpw", "REDIS_SENTINEL_AUTH": "spw", "TRACING_ENABLED": "true"},
		{"REDIS_TYPE": "cluster", "REDIS_URL": "n1:7000,n2:7001,n3:7002", "LOCAL_CACHE_SIZE_IN_BYTES": "1048576"},
	} {
		out, rm, err := ratelimitEnv(env)
		if err != nil {
			t.Fatalf("%v: %v", env, err)
		}
		if _, err := loadConfig(out); err != nil {
			t.Errorf("%v: limitd's own check refuses it: %v", env, rm.rename(err))
		}
	}
	// Parse's own refusals are internal/refenv's tests'; these come from
	// limitd's checks, and from serving.
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"TRACING_ENABLED": "true", "TRACING_SAMPLING_RATE": "2", "RUNTIME_ROOT": "/nonexistent"}, "TRACING_SAMPLING_RATE (as LIMITD_TRACING_SAMPLING_RATE): must be from 0 to 1"},
		{map[string]string{"NEAR_LIMIT_RATIO": "2", "RUNTIME_ROOT": "/nonexistent"}, "NEAR_LIMIT_RATIO (as LIMITD_GRPC_NEAR_LIMIT_RATIO): must be above 0 and at most 1"},
		{map[string]string{"LOG_LEVEL": "loud"}, `LOG_LEVEL (as LIMITD_LOG_LEVEL): must be one of debug, info, warn, error (got "loud")`},
		{map[string]string{"RUNTIME_ROOT": "/nonexistent", "REDIS_URL": "127.0.0.1:1", "HOST": "127.0.0.1", "PORT": "0", "DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0"},
			"RUNTIME_ROOT: /nonexistent/config is not a directory"},
	} {
		err := serveRatelimit(context.Background(), tc.env, io.Discard, nil)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%v:\n got %v\nwant %s…", tc.env, err, tc.want)
		}
	}
}
