package refenv

import (
	"errors"
	"strings"
	"testing"

	"github.com/limitd/limitd/internal/certfiles"
	"github.com/limitd/limitd/internal/envvar"
)

// The reference's variables become limitd's where they meet; what limitd
// does not do is refused, naming the variable.
func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want map[string]string // LIMITD_* variable → value
	}{
		{"defaults", map[string]string{}, map[string]string{"LIMITD_GRPC_ADDR": "0.0.0.0:8081", "LIMITD_LOG_LEVEL": "warn"}},
		{"single", map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379", "REDIS_AUTH": "pw", "REDIS_POOL_SIZE": "20"},
			map[string]string{"LIMITD_REDIS_URL": "redis://:pw@redis:6379?pool_size=20"}},
		{"tls and timeout", map[string]string{"REDIS_URL": "redis:6380", "REDIS_TLS": "true", "REDIS_AUTH": "app:pw", "REDIS_TIMEOUT": "2s", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "true"},
			map[string]string{"LIMITD_REDIS_URL": "rediss://app:pw@redis:6380?dial_timeout=2s&read_timeout=2s&skip_verify=true&write_timeout=2s"}},
		{"sentinel", map[string]string{"REDIS_TYPE": "SENTINEL", "REDIS_URL": "mymaster,s1:26379,s2:26379", "REDIS_AUTH": "mpw", "REDIS_SENTINEL_AUTH": "spw"},
			map[string]string{"LIMITD_REDIS_URL": "redis://:spw@s1:26379?addr=s2%3A26379&master_name=mymaster&password=mpw"}},
		{"cluster", map[string]string{"REDIS_TYPE": "cluster", "REDIS_URL": "n1:7000,n2:7001,n3:7002"},
			map[string]string{"LIMITD_REDIS_URL": "redis://n1:7000?addr=n2%3A7001&addr=n3%3A7002"}},
		{"over-limit cache", map[string]string{"LOCAL_CACHE_SIZE_IN_BYTES": "1048576"},
			map[string]string{"LIMITD_GRPC_OVER_LIMIT_CACHE": "4096"}},
		// The reference runs its local cache with stop-increment; so does
		// limitd (strict counting with the cache).
		{"over-limit cache and stop-increment", map[string]string{"LOCAL_CACHE_SIZE_IN_BYTES": "1048576", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true"},
			map[string]string{"LIMITD_GRPC_OVER_LIMIT_CACHE": "4096", "LIMITD_GRPC_COUNTING": "strict"}},
		{"tracing", map[string]string{"TRACING_ENABLED": "true", "TRACING_EXPORTER_PROTOCOL": "grpc", "TRACING_SAMPLING_RATE": "0.25",
			"TRACING_SERVICE_NAMESPACE": "gw", "TRACING_SERVICE_INSTANCE_ID": "pod-1"},
			map[string]string{"LIMITD_TRACING": "otlp-grpc", "LIMITD_TRACING_SAMPLING_RATE": "0.25", "LIMITD_TRACING_SERVICE_NAME": "RateLimit",
				"LIMITD_TRACING_SERVICE_NAMESPACE": "gw", "LIMITD_TRACING_SERVICE_INSTANCE_ID": "pod-1"}},
		{"tracing's defaults", map[string]string{"TRACING_ENABLED": "true"},
			map[string]string{"LIMITD_TRACING": "otlp-http", "LIMITD_TRACING_SAMPLING_RATE": "1"}},
		{"tracing off", map[string]string{"TRACING_ENABLED": "false", "TRACING_EXPORTER_PROTOCOL": "grpc"}, map[string]string{"LIMITD_TRACING": ""}},
		{"cluster of one seed", map[string]string{"REDIS_TYPE": "cluster", "REDIS_URL": "n1:7000"},
			map[string]string{"LIMITD_REDIS_URL": "redis://n1:7000?addr=n1%3A7000"}},
		{"the rest", map[string]string{"GRPC_HOST": "127.0.0.1", "GRPC_PORT": "9000", "LOG_LEVEL": "TRACE", "LOG_FORMAT": "json",
			"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true", "CACHE_KEY_PREFIX": "ratelimit:", "SHADOW_MODE": "true",
			"NEAR_LIMIT_RATIO": "0.9", "GRPC_MAX_CONNECTION_AGE": "1h"},
			map[string]string{"LIMITD_GRPC_ADDR": "127.0.0.1:9000", "LIMITD_LOG_LEVEL": "debug", "LIMITD_LOG_FORMAT": "json",
				"LIMITD_GRPC_COUNTING": "strict", "LIMITD_PREFIX": "ratelimit", "LIMITD_SHADOW_MODE": "true",
				"LIMITD_GRPC_NEAR_LIMIT_RATIO": "0.9", "LIMITD_GRPC_MAX_CONNECTION_AGE": "1h"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := Parse(tc.env, certfiles.Options{})
			if err != nil {
				t.Fatal(err)
			}
			for k, want := range tc.want {
				if out[k] != want {
					t.Errorf("%s = %q, want %q", k, out[k], want)
				}
			}
		})
	}
	for _, tc := range []struct {
		env  map[string]string
		name string // the variable the error names
		want string
	}{
		{map[string]string{"TRACING_ENABLED": "true", "TRACING_EXPORTER_PROTOCOL": "zipkin"}, "TRACING_EXPORTER_PROTOCOL", `TRACING_EXPORTER_PROTOCOL: must be http or grpc (got "zipkin")`},
		{map[string]string{"PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS": "true"}, "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS: not supported"},
		{map[string]string{"BACKEND_TYPE": "memcache"}, "BACKEND_TYPE", `BACKEND_TYPE: not supported by limitd ratelimit: limitd counts in Redis only`},
		{map[string]string{"REDIS_SOCKET_TYPE": "unix"}, "REDIS_SOCKET_TYPE", "REDIS_SOCKET_TYPE: not supported"},
		{map[string]string{"GRPC_UDS": "/tmp/rl.sock"}, "GRPC_UDS", "GRPC_UDS: not supported"},
		{map[string]string{"MERGE_DOMAIN_CONFIG": "true"}, "MERGE_DOMAIN_CONFIG", "MERGE_DOMAIN_CONFIG: not supported"},
		{map[string]string{"REDIS_PERSECOND": "true"}, "REDIS_PERSECOND", "REDIS_PERSECOND: not supported"},
		{map[string]string{"RESPONSE_DYNAMIC_METADATA": "true"}, "RESPONSE_DYNAMIC_METADATA", "RESPONSE_DYNAMIC_METADATA: not supported"},
		{map[string]string{"CONFIG_TYPE": "CONSUL"}, "CONFIG_TYPE", `CONFIG_TYPE: must be FILE or GRPC_XDS_SOTW (got "CONSUL")`},
		{map[string]string{"REDIS_TYPE": "ring", "REDIS_URL": "r:6379"}, "REDIS_TYPE", "REDIS_TYPE: must be single, sentinel or cluster"},
		{map[string]string{"REDIS_TYPE": "sentinel", "REDIS_URL": "r:6379"}, "REDIS_URL", "REDIS_URL: must be the master's name then the Sentinels"},
		{map[string]string{"REDIS_URL": "r:6379", "LIMITD_REDIS_URL": "redis://other:6379"}, "REDIS_URL", `REDIS_URL: LIMITD_REDIS_URL="redis://other:6379" says otherwise`},
		{map[string]string{"GRPC_PORT": "99999"}, "GRPC_PORT", "GRPC_PORT: must be a whole number from 0 to 65535"},
		{map[string]string{"GRPC_SERVER_USE_TLS": "true"}, "GRPC_SERVER_USE_TLS", "GRPC_SERVER_USE_TLS: needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY"},
		{map[string]string{"LIMITD_CONFIG": "/etc/limitd.yaml"}, "LIMITD_CONFIG", "LIMITD_CONFIG: limitd ratelimit takes its rules from RUNTIME_ROOT or xDS"},
	} {
		_, _, err := Parse(tc.env, certfiles.Options{})
		var ve *envvar.Error
		if !errors.As(err, &ve) || ve.Name != tc.name || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%v:\n got %v\nwant %s…, naming %s", tc.env, err, tc.want, tc.name)
		}
	}
}

// An error of a LIMITD_* variable the reference's set is worded under the
// reference's name; one of a variable it did not set, or another error, is
// left as it is.
func TestRename(t *testing.T) {
	_, e, err := Parse(map[string]string{"NEAR_LIMIT_RATIO": "2"}, certfiles.Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = e.Rename(envvar.Errorf("LIMITD_GRPC_NEAR_LIMIT_RATIO", "must be above 0 and at most 1 (got 2)"))
	var ve *envvar.Error
	if !errors.As(err, &ve) || ve.Name != "NEAR_LIMIT_RATIO" || ve.As != "LIMITD_GRPC_NEAR_LIMIT_RATIO" ||
		err.Error() != "NEAR_LIMIT_RATIO (as LIMITD_GRPC_NEAR_LIMIT_RATIO): must be above 0 and at most 1 (got 2)" {
		t.Errorf("renamed: %v", err)
	}
	for _, err := range []error{envvar.Errorf("LIMITD_PREFIX", "must be …"), errors.New("LIMITD_GRPC_NEAR_LIMIT_RATIO: text alone")} {
		if got := e.Rename(err); got != err {
			t.Errorf("%v renamed as %v", err, got)
		}
	}
	if got := (*Env)(nil).Rename(ve); got != ve {
		t.Errorf("a nil Env renamed %v as %v", ve, got)
	}
}
