package refenv

import (
	"maps"
	"slices"
	"strings"

	"github.com/limitd/limitd/internal/envvar"
)

// How limitd ratelimit treats one of the reference server's variables.
type refStatus string

const (
	honoured refStatus = "honoured"
	ignored  refStatus = "ignored"
	refused  refStatus = "refused"
)

// refVar is one variable of the reference rate limit server
// (src/settings/settings.go) and what limitd ratelimit does with it. The
// table in docs/envoy.md is this one (TestRatelimitREADMETable).
type refVar struct {
	name   string
	status refStatus
	what   string // honoured: what it does in limitd; ignored or refused: why
	// allowed, for a refused variable, are the values accepted; nil: those
	// that ask for nothing (asks).
	allowed []string
}

// refVars lists every variable of the reference's settings.go, in its order.
var refVars = []refVar{
	{name: "HOST", status: honoured, what: "with `PORT`, the HTTP port: `GET /healthcheck` (200 `OK` while healthy, else 500) and `POST /json` (a `RateLimitRequest` as JSON, answered 200, or 429 when over the limit)"},
	{name: "PORT", status: honoured, what: "see `HOST` (default 8080)"},
	{name: "DEBUG_HOST", status: honoured, what: "with `DEBUG_PORT`, the debug port: `/rlconfig` (the rules loaded), `/stats` (every metric, Prometheus text) and `/debug/pprof/`"},
	{name: "DEBUG_PORT", status: honoured, what: "see `DEBUG_HOST` (default 6070)"},
	{name: "GRPC_UDS", status: refused, what: "limitd listens for gRPC on TCP only (`GRPC_HOST`, `GRPC_PORT`)"},
	{name: "GRPC_HOST", status: honoured, what: "with `GRPC_PORT`, `LIMITD_GRPC_ADDR` (default 0.0.0.0:8081)"},
	{name: "GRPC_PORT", status: honoured, what: "see `GRPC_HOST`"},
	{name: "GRPC_MAX_CONNECTION_AGE", status: honoured, what: "`LIMITD_GRPC_MAX_CONNECTION_AGE` (unset: limitd's default, 30m)"},
	{name: "GRPC_MAX_CONNECTION_AGE_GRACE", status: honoured, what: "`LIMITD_GRPC_MAX_CONNECTION_AGE_GRACE` (unset: limitd's default, 30s)"},
	{name: "GRPC_SERVER_USE_TLS", status: honoured, what: "the gRPC port speaks TLS with `GRPC_SERVER_TLS_CERT` and `GRPC_SERVER_TLS_KEY`"},
	{name: "GRPC_SERVER_TLS_CERT", status: honoured, what: "the server's certificate chain (PEM file), read again when it changes"},
	{name: "GRPC_SERVER_TLS_KEY", status: honoured, what: "the server's private key (PEM file)"},
	{name: "GRPC_CLIENT_TLS_CACERT", status: honoured, what: "mutual TLS: every client must present a certificate this CA signed (PEM file, read again when it changes)"},
	{name: "GRPC_CLIENT_TLS_SAN", status: honoured, what: "mutual TLS: the client certificate must name this SAN (DNS, URI, IP or e-mail)"},
	{name: "LOG_LEVEL", status: honoured, what: "`LIMITD_LOG_LEVEL` (trace is debug, fatal and panic are error; default warn)"},
	{name: "LOG_FORMAT", status: honoured, what: "`LIMITD_LOG_FORMAT`: text or json"},
	{name: "CONFIG_TYPE", status: honoured, what: "`FILE`: the rules are the runtime directory's files; `GRPC_XDS_SOTW`: they come over xDS; anything else is refused"},
	{name: "FORCE_START_WITHOUT_INITIAL_CONFIG", status: honoured, what: "false (the default): not healthy until the first rules are loaded; true: healthy at once. Calls before the first rules answer UNAVAILABLE either way"},
	{name: "CONFIG_GRPC_XDS_NODE_ID", status: honoured, what: "the xDS node id (default `default`)"},
	{name: "CONFIG_GRPC_XDS_NODE_METADATA", status: honoured, what: "the xDS node's metadata, `key=value,key2=value2`"},
	{name: "CONFIG_GRPC_XDS_SERVER_URL", status: honoured, what: "the xDS management server, host:port (default localhost:18000)"},
	{name: "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", status: honoured, what: "the first wait before dialling the management server again (gRPC's connection back-off; default 3s)"},
	{name: "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", status: honoured, what: "metadata sent on the xDS stream, `name:value,name2:value2`"},
	{name: "CONFIG_GRPC_XDS_SERVER_USE_TLS", status: honoured, what: "the xDS connection speaks TLS"},
	{name: "CONFIG_GRPC_XDS_CLIENT_TLS_CERT", status: honoured, what: "the client certificate shown to the management server (PEM file), read again when it changes"},
	{name: "CONFIG_GRPC_XDS_CLIENT_TLS_KEY", status: honoured, what: "its private key (PEM file)"},
	{name: "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", status: honoured, what: "the CA that signed the management server's certificate (unset: the system's), read again when it changes"},
	{name: "CONFIG_GRPC_XDS_SERVER_TLS_SAN", status: honoured, what: "the name the management server's certificate must have"},
	{name: "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", status: honoured, what: "the wait before opening a lost xDS stream again, and before NACKing again an invalid update the management server sent again (default 10s), doubled each time"},
	{name: "XDS_CLIENT_BACKOFF_MAX_INTERVAL", status: honoured, what: "the longest such wait (default 60s)"},
	{name: "XDS_CLIENT_BACKOFF_RANDOM_FACTOR", status: honoured, what: "the jitter: each wait moves by up to ± this fraction of itself (default 0.5)"},
	{name: "XDS_CLIENT_BACKOFF_JITTER", status: honoured, what: "false: no jitter (default true)"},
	{name: "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", status: honoured, what: "the largest xDS response (unset: gRPC's 4 MiB)"},
	{name: "USE_DOG_STATSD", status: ignored, what: "limitd exports Prometheus metrics, not statsd (`USE_PROMETHEUS`)"},
	{name: "USE_DOG_STATSD_MOGRIFIERS", status: ignored, what: "no statsd (`USE_DOG_STATSD`)"},
	{name: "USE_STATSD", status: ignored, what: "limitd sends no statsd: scrape its Prometheus metrics instead (`USE_PROMETHEUS`, or `/stats` on the debug port), under the names the reference's exporter gives them"},
	{name: "STATSD_HOST", status: ignored, what: "no statsd (`USE_STATSD`)"},
	{name: "STATSD_PORT", status: ignored, what: "no statsd (`USE_STATSD`)"},
	{name: "EXTRA_TAGS", status: ignored, what: "no statsd (`USE_STATSD`); Prometheus adds its own target labels"},
	{name: "STATS_FLUSH_INTERVAL", status: ignored, what: "no statsd (`USE_STATSD`); Prometheus metrics are read when scraped"},
	{name: "DISABLE_STATS", status: ignored, what: "metrics cost nothing until scraped; leave `USE_PROMETHEUS` unset to serve none on their own port"},
	{name: "USE_PROMETHEUS", status: honoured, what: "serve every metric on `PROMETHEUS_ADDR` at `PROMETHEUS_PATH`: limitd's own and the reference's names (`ratelimit_service_rate_limit_total_hits`, …)"},
	{name: "PROMETHEUS_ADDR", status: honoured, what: "default :9090"},
	{name: "PROMETHEUS_PATH", status: honoured, what: "default /metrics"},
	{name: "PROMETHEUS_MAPPER_YAML", status: ignored, what: "the reference's names are those of its default mapping, fixed"},
	{name: "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", status: refused, what: "`ratelimit_service_response_time_seconds` is in seconds, the reference's default: `false` is accepted", allowed: []string{"false"}},
	{name: "RUNTIME_ROOT", status: honoured, what: "with `RUNTIME_SUBDIRECTORY` and `RUNTIME_APPDIRECTORY`, the directory of the rules' files (CONFIG_TYPE=FILE; default /srv/runtime_data/current)"},
	{name: "RUNTIME_SUBDIRECTORY", status: honoured, what: "see `RUNTIME_ROOT`"},
	{name: "RUNTIME_APPDIRECTORY", status: honoured, what: "see `RUNTIME_ROOT` (default `config`)"},
	{name: "RUNTIME_IGNOREDOTFILES", status: honoured, what: "true: files whose name starts with a dot are not read"},
	{name: "RUNTIME_WATCH_ROOT", status: honoured, what: "either way the same directory is read, every 3 s and on SIGHUP, and a change of any file (or of the root's symlink) reloads all of them"},
	{name: "EXPIRATION_JITTER_MAX_SECONDS", status: ignored, what: "limitd's counters expire when their window ends, in Redis's clock"},
	{name: "LOCAL_CACHE_SIZE_IN_BYTES", status: honoured, what: "`LIMITD_GRPC_OVER_LIMIT_CACHE`, a counter for every 256 bytes (at most 1,000,000): counters over their window's limit answered without Redis until the window ends on Redis' clock"},
	{name: "NEAR_LIMIT_RATIO", status: honoured, what: "`LIMITD_GRPC_NEAR_LIMIT_RATIO`"},
	{name: "CACHE_KEY_PREFIX", status: honoured, what: "`LIMITD_PREFIX`, without a trailing `:` or `_` (limitd's keys are its own: counts do not carry over from the reference's keys)"},
	{name: "BACKEND_TYPE", status: refused, what: "limitd counts in Redis only: `redis` is accepted", allowed: []string{"redis"}},
	{name: "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", status: honoured, what: "true: `LIMITD_GRPC_COUNTING=strict`, all or nothing: a call refused counts no hit in any of its rules"},
	{name: "LIMIT_RESPONSE_HEADERS_ENABLED", status: honoured, what: "answers add the limit, remaining and reset of the descriptor closest to its limit as response headers (the reset as Redis counted it)"},
	{name: "LIMIT_LIMIT_HEADER", status: honoured, what: "default RateLimit-Limit"},
	{name: "LIMIT_REMAINING_HEADER", status: honoured, what: "default RateLimit-Remaining"},
	{name: "LIMIT_RESET_HEADER", status: honoured, what: "default RateLimit-Reset"},
	{name: "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", status: honoured, what: "true: healthy only while the rules loaded have at least one domain"},
	{name: "REDIS_SOCKET_TYPE", status: refused, what: "`tcp` is accepted (and assumed when unset); limitd does not dial unix sockets", allowed: []string{"tcp"}},
	{name: "REDIS_TYPE", status: honoured, what: "`single` (default), `sentinel` (`REDIS_URL` is `master,sentinel:26379,…`) or `cluster` (`REDIS_URL` is `node:7000,node2:7001,…`), made into `LIMITD_REDIS_URL`"},
	{name: "REDIS_URL", status: honoured, what: "host:port (or the lists of `REDIS_TYPE`); unset (with `LIMITD_REDIS_URL` unset too): exit 1, `REDIS_URL: not set…`, as the reference stops when nothing answers at its default socket: no embedded Redis, which no replica would share"},
	{name: "REDIS_POOL_SIZE", status: honoured, what: "the connections per node (`pool_size`); unset: go-redis's default, 10 per CPU"},
	{name: "REDIS_AUTH", status: honoured, what: "`password` or `user:password` of the Redis (of the master, with Sentinel)"},
	{name: "REDIS_TLS", status: honoured, what: "speak TLS to Redis (`rediss://`)"},
	{name: "REDIS_TLS_CLIENT_CERT", status: honoured, what: "a client certificate for Redis (PEM file, with `REDIS_TLS_CLIENT_KEY`)"},
	{name: "REDIS_TLS_CLIENT_KEY", status: honoured, what: "its private key"},
	{name: "REDIS_TLS_CACERT", status: honoured, what: "the CA of Redis's certificate (unset: the system's)"},
	{name: "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", status: honoured, what: "true: Redis's certificate is not checked"},
	{name: "REDIS_PIPELINE_WINDOW", status: ignored, what: "limitd batches concurrent calls into pipelines itself"},
	{name: "REDIS_PIPELINE_LIMIT", status: ignored, what: "unused by the reference too"},
	{name: "REDIS_CLUSTER_PIPELINE_PARALLELISM", status: ignored, what: "limitd's Redis client sends a cluster pipeline to each node at once itself"},
	{name: "REDIS_PERSECOND", status: refused, what: "limitd keeps every counter in one Redis"},
	{name: "REDIS_PERSECOND_SOCKET_TYPE", status: ignored, what: "only with `REDIS_PERSECOND`, refused"},
	{name: "REDIS_PERSECOND_TYPE", status: ignored, what: "only with `REDIS_PERSECOND`, refused"},
	{name: "REDIS_PERSECOND_URL", status: ignored, what: "only with `REDIS_PERSECOND`, refused"},
	{name: "REDIS_PERSECOND_POOL_SIZE", status: ignored, what: "only with `REDIS_PERSECOND`, refused"},
	{name: "REDIS_PERSECOND_AUTH", status: ignored, what: "only with `REDIS_PERSECOND`, refused"},
	{name: "REDIS_PERSECOND_TLS", status: ignored, what: "only with `REDIS_PERSECOND`, refused"},
	{name: "REDIS_SENTINEL_AUTH", status: honoured, what: "the Sentinels' password (`REDIS_TYPE=sentinel`)"},
	{name: "REDIS_PERSECOND_SENTINEL_AUTH", status: ignored, what: "only with `REDIS_PERSECOND`, refused"},
	{name: "REDIS_PERSECOND_PIPELINE_WINDOW", status: ignored, what: "only with `REDIS_PERSECOND`, refused"},
	{name: "REDIS_PERSECOND_PIPELINE_LIMIT", status: ignored, what: "only with `REDIS_PERSECOND`, refused"},
	{name: "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM", status: ignored, what: "only with `REDIS_PERSECOND`, refused"},
	{name: "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", status: honoured, what: "true: not healthy while Redis does not answer (checked every 2 s); false (the default): health does not follow Redis"},
	{name: "REDIS_TIMEOUT", status: honoured, what: "the dial, read and write timeouts of Redis; unset: limitd's own, well under a second, so that an outage is an UNAVAILABLE answer at once"},
	{name: "REDIS_PERSECOND_TIMEOUT", status: ignored, what: "only with `REDIS_PERSECOND`, refused"},
	{name: "REDIS_POOL_ON_EMPTY_BEHAVIOR", status: refused, what: "`WAIT` is accepted (a call waits for a free connection, as the reference's only working value)", allowed: []string{"wait"}},
	{name: "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", status: ignored, what: "only with `REDIS_PERSECOND`, refused"},
	{name: "REDIS_STARTUP_INITIAL_INTERVAL", status: ignored, what: "limitd does not wait for Redis to start: it serves at once and answers UNAVAILABLE until Redis answers (gRPC health follows with `REDIS_HEALTH_CHECK_ACTIVE_CONNECTION`)"},
	{name: "REDIS_STARTUP_MAX_INTERVAL", status: ignored, what: "see `REDIS_STARTUP_INITIAL_INTERVAL`"},
	{name: "REDIS_STARTUP_MAX_ELAPSED_TIME", status: ignored, what: "see `REDIS_STARTUP_INITIAL_INTERVAL`"},
	{name: "MEMCACHE_HOST_PORT", status: ignored, what: "only with `BACKEND_TYPE=memcache`, refused"},
	{name: "MEMCACHE_MAX_IDLE_CONNS", status: ignored, what: "only with `BACKEND_TYPE=memcache`, refused"},
	{name: "MEMCACHE_SRV", status: ignored, what: "only with `BACKEND_TYPE=memcache`, refused"},
	{name: "MEMCACHE_SRV_REFRESH", status: ignored, what: "only with `BACKEND_TYPE=memcache`, refused"},
	{name: "MEMCACHE_TLS", status: ignored, what: "only with `BACKEND_TYPE=memcache`, refused"},
	{name: "MEMCACHE_TLS_CLIENT_CERT", status: ignored, what: "only with `BACKEND_TYPE=memcache`, refused"},
	{name: "MEMCACHE_TLS_CLIENT_KEY", status: ignored, what: "only with `BACKEND_TYPE=memcache`, refused"},
	{name: "MEMCACHE_TLS_CACERT", status: ignored, what: "only with `BACKEND_TYPE=memcache`, refused"},
	{name: "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", status: ignored, what: "only with `BACKEND_TYPE=memcache`, refused"},
	{name: "SHADOW_MODE", status: honoured, what: "`LIMITD_SHADOW_MODE`"},
	{name: "QUOTA_MODE", status: honoured, what: "`LIMITD_GRPC_QUOTA_MODE`"},
	{name: "RESPONSE_DYNAMIC_METADATA", status: refused, what: "limitd returns no dynamic metadata"},
	{name: "MERGE_DOMAIN_CONFIG", status: refused, what: "a domain's rules are in one file (two files of one domain are an error naming both)"},
	{name: "TRACING_ENABLED", status: honoured, what: "true: OpenTelemetry traces (`LIMITD_TRACING`): a span for each gRPC call with a child for each Redis command or pipeline it sent, exported over OTLP to `OTEL_EXPORTER_OTLP_ENDPOINT` (the other `OTEL_EXPORTER_OTLP_*` variables apply, as in the reference)"},
	{name: "TRACING_SERVICE_NAME", status: honoured, what: "`LIMITD_TRACING_SERVICE_NAME` (default RateLimit)"},
	{name: "TRACING_SERVICE_NAMESPACE", status: honoured, what: "`LIMITD_TRACING_SERVICE_NAMESPACE`"},
	{name: "TRACING_SERVICE_INSTANCE_ID", status: honoured, what: "`LIMITD_TRACING_SERVICE_INSTANCE_ID` (default: a random id, new at each start)"},
	{name: "TRACING_EXPORTER_PROTOCOL", status: honoured, what: "`http` (the default; `LIMITD_TRACING=otlp-http`) or `grpc` (`otlp-grpc`)"},
	{name: "TRACING_SAMPLING_RATE", status: honoured, what: "`LIMITD_TRACING_SAMPLING_RATE`: the fraction of new traces sampled (default 1); a call in a sampled trace is always traced"},
}

// strayVars are variables deployments set that the reference does not read
// either: named at start as ignored, so that nobody believes they act.
var strayVars = map[string]string{
	"GRPC_SERVER_TLS_CA_CERT": "the reference does not read it either: the CA of client certificates is GRPC_CLIENT_TLS_CACERT",
}

// asks reports whether value asks for something: not empty, false or 0.
func asks(value string) bool {
	switch strings.ToLower(strings.TrimSpace(value)) {
	case "", "false", "0", "0s":
		return false
	}
	return true
}

// Check refuses what limitd does not do and lists, once each, the
// variables set that it ignores.
func Check(environ map[string]string) (notices []string, err error) {
	for _, v := range refVars {
		val, set := environ[v.name]
		if !set {
			continue
		}
		switch v.status {
		case refused:
			if v.allowed != nil && slices.Contains(v.allowed, strings.ToLower(strings.TrimSpace(val))) || v.allowed == nil && !asks(val) {
				continue
			}
			return nil, envvar.Errorf(v.name, "not supported by limitd ratelimit: %s (got %q)", strings.ReplaceAll(v.what, "`", ""), val)
		case ignored:
			if asks(val) {
				notices = append(notices, v.name+": "+strings.ReplaceAll(v.what, "`", ""))
			}
		}
	}
	for _, n := range slices.Sorted(maps.Keys(strayVars)) {
		if _, set := environ[n]; set {
			notices = append(notices, n+": "+strayVars[n])
		}
	}
	return notices, nil
}

// Known reports whether name is one of the reference server's variables.
func Known(name string) bool {
	return slices.ContainsFunc(refVars, func(v refVar) bool { return v.name == name })
}
