package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/limitd/limitd/api"
	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/grpcapi"
	"github.com/limitd/limitd/internal/envvar"
	"github.com/limitd/limitd/internal/refenv"
	"github.com/limitd/limitd/internal/tracing"
	"github.com/limitd/limitd/limiter"
)

// config is limitd serve's configuration, read from the environment. The
// help tags feed limitd --help, so the table there cannot drift from the code.
type config struct {
	Addr         string `env:"LIMITD_ADDR" envDefault:"127.0.0.1:8080" help:"listen address, host:port"`
	GRPCAddr     string `env:"LIMITD_GRPC_ADDR" help:"listen address of the gRPC front end (Envoy's rate limit service envoy.service.ratelimit.v3.RateLimitService and grpc.health.v1), host:port; empty: off"`
	RedisURL     string `env:"LIMITD_REDIS_URL" help:"single node: redis://[user:pw@]host:port[/db] (rediss:// for TLS) or host:port; Sentinel: redis://[suser:spw@]sentinel:26379?master_name=NAME &addr=sentinel2:26379… &username=U&password=PW (the master's); cluster: redis://[user:pw@]node:7000?addr=node2:7001&addr=… or node:7000,node2:7001,…; go-redis options as query parameters (dial_timeout=1s); empty: an embedded in-memory Redis, NOT shared across processes"`
	Prefix       string `env:"LIMITD_PREFIX" envDefault:"limitd" help:"Redis key prefix"`
	ConfigFile   string `env:"LIMITD_CONFIG" help:"YAML file of limiters and templates applied at boot, and re-applied whenever Redis lost them"`
	AdminToken   string `env:"LIMITD_ADMIN_TOKEN" help:"bearer token every config change (PUT, PATCH, DELETE, reset) must carry"`
	Token        string `env:"LIMITD_TOKEN" help:"bearer token every other /v1 request must carry"`
	MetricsToken string `env:"LIMITD_METRICS_TOKEN" help:"bearer token GET /metrics must carry (it names every limiter); empty: /metrics is open"`
	Insecure     bool   `env:"LIMITD_INSECURE" envDefault:"false" help:"true: listen beyond loopback even without LIMITD_ADMIN_TOKEN"`
	LogFormat    string `env:"LIMITD_LOG_FORMAT" envDefault:"text" help:"text or json"`
	LogLevel     string `env:"LIMITD_LOG_LEVEL" envDefault:"info" help:"debug, info, warn or error; the startup line shows at every level"`
	AccessLog    string `env:"LIMITD_ACCESS_LOG" envDefault:"off" help:"which requests get an \"http request\" line at info: off, errors (answered with a problem: 4xx but a 429 refusal, 5xx) or all; /healthz and /readyz never"`
	ShadowMode   bool   `env:"LIMITD_SHADOW_MODE" envDefault:"false" help:"true: every limiter in shadow mode: acquires decide and count but are never refused (a refusal answers 200 with \"shadow\":true and takes nothing)"`
	// EventsMaxStreams's default is api.DefaultMaxEventStreams (a test
	// compares them).
	EventsMaxStreams int     `env:"LIMITD_EVENTS_MAX_STREAMS" envDefault:"256" help:"event streams (GET /v1/events, the dashboard) open at once, 1 to 100000; they share one Redis subscription and one sampling loop, and each holds a connection; past it a new stream is a 503 with Retry-After"`
	GRPCCounting     string  `env:"LIMITD_GRPC_COUNTING" envDefault:"reference" help:"how the gRPC front end's rules count hits: reference (as the Envoy reference server: every hit counted, refused or not, each rule on its own) or strict (all or nothing across a call; refused hits never counted)"`
	GRPCQuota        bool    `env:"LIMITD_GRPC_QUOTA_MODE" envDefault:"false" help:"true: every gRPC rule is a quota (quota_mode): a call is refused only when all its descriptors are over (needs LIMITD_GRPC_COUNTING=reference)"`
	GRPCNearRatio    float64 `env:"LIMITD_GRPC_NEAR_LIMIT_RATIO" envDefault:"0.8" help:"where a window rule's near_limit counter starts, a fraction of its limit, above 0 and at most 1 (the reference's NEAR_LIMIT_RATIO)"`
	// GRPCOverLimitCache is core.Options.OverLimitCache.
	GRPCOverLimitCache int `env:"LIMITD_GRPC_OVER_LIMIT_CACHE" envDefault:"0" help:"window counters the gRPC front end remembers as over their limit, 0 to 1000000 (about 200 bytes each and the name), to answer them OVER_LIMIT without Redis until their window ends, those hits not counted (the reference's LOCAL_CACHE_SIZE_IN_BYTES); a reset or a raised limit is seen by a remembered counter only when its window ends; with LIMITD_GRPC_COUNTING=strict, a call naming a remembered counter is refused at once and counts nothing; 0: off"`
	// Tracing is tracing.Config (tracingConfig reads the OTEL_* variables
	// beside these).
	Tracing          string  `env:"LIMITD_TRACING" help:"OpenTelemetry traces of gRPC calls, HTTP requests and their Redis commands: off, otlp-grpc or otlp-http (OTLP to OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT, else localhost:4317 or :4318; the other OTEL_EXPORTER_OTLP_* variables apply); unset: off, unless OTEL_TRACES_EXPORTER=otlp asks for OTLP over OTEL_EXPORTER_OTLP_PROTOCOL (grpc or http/protobuf, the default); OTEL_SDK_DISABLED=true: off"`
	TracingSampling  float64 `env:"LIMITD_TRACING_SAMPLING_RATE" envDefault:"1" help:"the fraction of new traces sampled, 0 to 1; a call that carries a sampled trace (W3C traceparent) is always traced"`
	TracingService   string  `env:"LIMITD_TRACING_SERVICE_NAME" envDefault:"limitd" help:"the traces' service.name (OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win over it and add attributes)"`
	TracingNamespace string  `env:"LIMITD_TRACING_SERVICE_NAMESPACE" help:"the traces' service.namespace; empty: none"`
	TracingInstance  string  `env:"LIMITD_TRACING_SERVICE_INSTANCE_ID" help:"the traces' service.instance.id; empty: none"`

	GRPCLimits
}

// GRPCLimits are the bounds of the gRPC port (LIMITD_GRPC_*): grpcapi.Limits
// under the environment's names. serve converts one into the other, so their
// fields cannot drift apart; TestConfigDefaults holds the defaults equal.
type GRPCLimits struct {
	MaxConcurrentStreams  uint32        `env:"LIMITD_GRPC_MAX_CONCURRENT_STREAMS" envDefault:"100" help:"gRPC calls one connection may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS); a stream past it is refused before anything is kept for it. A call held open costs about 12 KiB with Envoy's metadata, 24 KiB at most with LIMITD_GRPC_MAX_HEADER_LIST_SIZE's 4 KiB, so calls that never send their message hold at most this × LIMITD_GRPC_MAX_CONNECTIONS × 24 KiB (1200 MiB at the defaults); the request bytes a call has received come on top (at most 64 KiB + LIMITD_GRPC_MAX_RECV_MSG_SIZE each); 0: no bound"`
	MaxConnections        uint32        `env:"LIMITD_GRPC_MAX_CONNECTIONS" envDefault:"512" help:"gRPC connections open at once; one past it is closed as soon as it is accepted (limitd_grpc_connections_refused_total). Envoy opens one or a few per worker; each costs about 50 KiB besides its calls; 0: no bound"`
	MaxRecvMsgSize        uint32        `env:"LIMITD_GRPC_MAX_RECV_MSG_SIZE" envDefault:"65536" help:"bytes of one gRPC request; a larger one is RESOURCE_EXHAUSTED before it is read; 0: no bound (gRPC's 2 GiB)"`
	MaxSendMsgSize        uint32        `env:"LIMITD_GRPC_MAX_SEND_MSG_SIZE" envDefault:"1048576" help:"bytes of one gRPC response; 0: no bound"`
	MaxHeaderListSize     uint32        `env:"LIMITD_GRPC_MAX_HEADER_LIST_SIZE" envDefault:"4096" help:"bytes of one gRPC call's metadata (its HTTP/2 header list; Envoy sends well under 1 KiB); a call with more is reset; 0: gRPC's 16 MiB"`
	KeepaliveMinTime      time.Duration `env:"LIMITD_GRPC_KEEPALIVE_MIN_TIME" envDefault:"5s" help:"how often a gRPC client may ping; one that pings more often three times in a row is sent GOAWAY (too_many_pings) and closed; pings are allowed without calls open; 0: any rate"`
	KeepaliveTime         time.Duration `env:"LIMITD_GRPC_KEEPALIVE_TIME" envDefault:"1m" help:"a gRPC connection silent this long is pinged, and closed if LIMITD_GRPC_KEEPALIVE_TIMEOUT passes without an answer (a peer that vanished); 0: never pinged"`
	KeepaliveTimeout      time.Duration `env:"LIMITD_GRPC_KEEPALIVE_TIMEOUT" envDefault:"20s" help:"see LIMITD_GRPC_KEEPALIVE_TIME"`
	MaxConnectionIdle     time.Duration `env:"LIMITD_GRPC_MAX_CONNECTION_IDLE" envDefault:"5m" help:"a gRPC connection without calls this long is sent GOAWAY and closed; 0: never"`
	MaxConnectionAge      time.Duration `env:"LIMITD_GRPC_MAX_CONNECTION_AGE" envDefault:"30m" help:"a gRPC connection this old (±10 %) is sent GOAWAY: its client takes a new one for new calls, and the calls in flight have LIMITD_GRPC_MAX_CONNECTION_AGE_GRACE to finish; 0: never"`
	MaxConnectionAgeGrace time.Duration `env:"LIMITD_GRPC_MAX_CONNECTION_AGE_GRACE" envDefault:"30s" help:"see LIMITD_GRPC_MAX_CONNECTION_AGE; then the connection is closed; 0: calls in flight take as long as they take"`
}

// maxEventStreams bounds LIMITD_EVENTS_MAX_STREAMS: each stream holds a
// connection, a file descriptor and a goroutine.
const maxEventStreams = 100_000

var (
	logFormats = []string{"text", "json"}
	logLevels  = map[string]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError}
	// prefixRE keeps the prefix out of the way of the store's key syntax: a
	// brace would break the hash tags that keep a limiter in one cluster slot.
	prefixRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$`)
)

// loadConfig reads and checks the configuration from environ; every error
// starts with the variable's name.
func loadConfig(environ map[string]string) (config, error) {
	c, err := envvar.Parse[config](environ)
	if err != nil {
		return config{}, err
	}
	if err := c.check(); err != nil {
		return config{}, err
	}
	return c, nil
}

func (c *config) check() error {
	if err := checkAddr("LIMITD_ADDR", c.Addr, "127.0.0.1:8080 or 0.0.0.0:8080"); err != nil {
		return err
	}
	if c.GRPCAddr != "" {
		if err := checkAddr("LIMITD_GRPC_ADDR", c.GRPCAddr, "127.0.0.1:8081, or empty"); err != nil {
			return err
		}
	}
	if !prefixRE.MatchString(c.Prefix) {
		return envvar.Errorf("LIMITD_PREFIX", "must be 1 to 64 of A-Z a-z 0-9 . _ : - starting with a letter or digit (got %q)", c.Prefix)
	}
	for _, t := range []struct{ key, val string }{{"LIMITD_ADMIN_TOKEN", c.AdminToken}, {"LIMITD_TOKEN", c.Token}, {"LIMITD_METRICS_TOKEN", c.MetricsToken}} {
		// A stray newline from a secrets file would make every request fail
		// with 401 and nothing to tell why.
		if strings.IndexFunc(t.val, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
			return envvar.Errorf(t.key, "must not contain spaces or control characters (a trailing newline?)")
		}
	}
	if c.EventsMaxStreams < 1 || c.EventsMaxStreams > maxEventStreams {
		return envvar.Errorf("LIMITD_EVENTS_MAX_STREAMS", "must be from 1 to %d (got %d)", maxEventStreams, c.EventsMaxStreams)
	}
	c.LogFormat = strings.ToLower(c.LogFormat)
	if !slices.Contains(logFormats, c.LogFormat) {
		return envvar.Errorf("LIMITD_LOG_FORMAT", "must be one of text, json (got %q)", c.LogFormat)
	}
	c.LogLevel = strings.ToLower(c.LogLevel)
	if _, ok := logLevels[c.LogLevel]; !ok {
		return envvar.Errorf("LIMITD_LOG_LEVEL", "must be one of debug, info, warn, error (got %q)", c.LogLevel)
	}
	counting, err := core.ParseCounting(strings.ToLower(c.GRPCCounting))
	if err != nil {
		return &envvar.Error{Name: "LIMITD_GRPC_COUNTING", Err: err}
	}
	c.GRPCCounting = counting.String()
	if c.GRPCQuota && counting == core.CountStrict {
		return envvar.Errorf("LIMITD_GRPC_QUOTA_MODE", "needs LIMITD_GRPC_COUNTING=reference: a strict call is all or nothing")
	}
	if !(c.GRPCNearRatio > 0 && c.GRPCNearRatio <= 1) {
		return envvar.Errorf("LIMITD_GRPC_NEAR_LIMIT_RATIO", "must be above 0 and at most 1 (got %v)", c.GRPCNearRatio)
	}
	if c.GRPCOverLimitCache < 0 || c.GRPCOverLimitCache > core.MaxOverLimitCache {
		return envvar.Errorf("LIMITD_GRPC_OVER_LIMIT_CACHE", "must be from 0 (off) to %d counters (got %d)", core.MaxOverLimitCache, c.GRPCOverLimitCache)
	}
	c.Tracing = strings.ToLower(c.Tracing)
	if err := (tracing.Config{Exporter: c.Tracing, SamplingRate: c.TracingSampling}).Check(); err != nil {
		return err
	}
	a, err := api.ParseAccessLog(c.AccessLog)
	if err != nil {
		return &envvar.Error{Name: "LIMITD_ACCESS_LOG", Err: err}
	}
	c.AccessLog = a.String()
	var fe *limiter.FieldError
	if err := grpcapi.Limits(c.GRPCLimits).Check(); errors.As(err, &fe) {
		// The field is grpcapi.Limits', which is GRPCLimits': its variable
		// replaces it in the error's text.
		f, _ := reflect.TypeFor[GRPCLimits]().FieldByName(fe.Field)
		return envvar.Errorf(f.Tag.Get("env"), "%s", strings.TrimPrefix(fe.Error(), fe.Field+": "))
	} else if err != nil {
		return err
	}
	if c.AdminToken == "" && !c.Insecure && c.exposed() {
		return envvar.Errorf("LIMITD_ADDR", "%s is reachable from other machines and LIMITD_ADMIN_TOKEN is empty, "+
			"so anyone could change limiters: set LIMITD_ADMIN_TOKEN, or LIMITD_INSECURE=true to accept that", c.Addr)
	}
	return nil
}

// checkAddr checks a listen address, host:port; like names an example.
func checkAddr(name, addr, like string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return envvar.Errorf(name, "must be host:port, like %s (got %q)", like, addr)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || (p == 0 && port != "0") {
		return envvar.Errorf(name, "the port must be a number from 0 to 65535 (got %q)", addr)
	}
	return nil
}

// exposed reports whether the listen address reaches beyond this machine.
func (c *config) exposed() bool {
	host, _, _ := net.SplitHostPort(c.Addr)
	return !isLoopback(host)
}

// isLoopback reports whether a listen host is only reachable from this
// machine (a host name other than localhost may resolve anywhere).
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	host, _, _ = strings.Cut(host, "%") // an IPv6 zone
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// counting is LIMITD_GRPC_COUNTING, checked by check.
func (c *config) counting() core.Counting {
	n, _ := core.ParseCounting(c.GRPCCounting)
	return n
}

// accessLog is LIMITD_ACCESS_LOG, checked by check.
func (c *config) accessLog() api.AccessLog {
	a, _ := api.ParseAccessLog(c.AccessLog)
	return a
}

// logger logs at level in LIMITD_LOG_FORMAT.
func (c *config) logger(w io.Writer, level slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if c.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

func environ() map[string]string {
	m := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}

// envHelp is the environment table of limitd serve, built from config's tags.
func envHelp() string {
	var b strings.Builder
	b.WriteString("Environment of limitd serve:\n")
	for _, f := range configFields() {
		text := f.Tag.Get("help")
		if d := f.Tag.Get("envDefault"); d != "" {
			text += " (default " + d + ")"
		}
		line := fmt.Sprintf("  %-19s", f.Tag.Get("env"))
		if len(line) > 21 { // a long name has its own line
			b.WriteString(line + "\n")
			line = strings.Repeat(" ", 21)
		}
		for _, w := range strings.Fields(text) {
			if len(line) > 22 && len(line)+1+len(w) > 80 {
				b.WriteString(line + "\n")
				line = strings.Repeat(" ", 21)
			}
			line += " " + w
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

// configFields are config's variables, in order (GRPCLimits' in its place).
func configFields() []reflect.StructField {
	var fs []reflect.StructField
	for _, f := range reflect.VisibleFields(reflect.TypeFor[config]()) {
		if f.Tag.Get("env") != "" {
			fs = append(fs, f)
		}
	}
	return fs
}

// tracingConfig is the tracing c and the OTEL_* variables of environ ask:
// LIMITD_TRACING when set, else the OTEL_* variables' standard meaning.
func (c config) tracingConfig(environ map[string]string) (tracing.Config, error) {
	tc := tracing.Config{Exporter: c.Tracing, SamplingRate: c.TracingSampling, ServiceName: c.TracingService,
		ServiceNamespace: c.TracingNamespace, ServiceInstanceID: c.TracingInstance, ServiceVersion: version}
	if strings.EqualFold(environ["OTEL_SDK_DISABLED"], "true") {
		tc.Exporter = tracing.Off
		return tc, nil
	}
	if tc.Exporter != "" {
		return tc, nil
	}
	switch e := strings.ToLower(environ["OTEL_TRACES_EXPORTER"]); e {
	case "", "none":
		tc.Exporter = tracing.Off
		return tc, nil
	case "otlp":
	default:
		return tc, envvar.Errorf("OTEL_TRACES_EXPORTER", "limitd exports traces over otlp only, or none (got %q)", e)
	}
	p := cmp.Or(environ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"], environ["OTEL_EXPORTER_OTLP_PROTOCOL"])
	switch p {
	case "grpc":
		tc.Exporter = tracing.OTLPGRPC
	case "", "http/protobuf":
		tc.Exporter = tracing.OTLPHTTP
	default:
		return tc, envvar.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL", "must be grpc or http/protobuf (got %q)", p)
	}
	return tc, nil
}

// otherVars are LIMITD_ variables limitd reads outside serve's config
// (ctl's, and the tests' redistest.RequireEnv).
var otherVars = []string{"LIMITD_URL", "LIMITD_REQUIRE_REDIS"}

// knownVars are every LIMITD_ variable limitd reads.
func knownVars() []string {
	var names []string
	for _, f := range configFields() {
		names = append(names, f.Tag.Get("env"))
	}
	return append(names, otherVars...)
}

// maxSuggestDistance is how many edits from a known variable one is suggested.
const maxSuggestDistance = 4

// warnUnknownVars warns once about each LIMITD_ variable of environ that
// limitd does not read, with the known one closest to it: a misspelt
// LIMITD_ADMIN_TOKN would otherwise leave limiters open to change.
func warnUnknownVars(log *slog.Logger, environ map[string]string) {
	known := knownVars()
	for _, k := range slices.Sorted(maps.Keys(environ)) {
		if !strings.HasPrefix(k, "LIMITD_") || slices.Contains(known, k) {
			continue
		}
		best, dist := closest(k, known)
		if dist <= maxSuggestDistance {
			log.Warn(k+" is not a variable limitd reads; did you mean "+best+"?", "variable", k, "did_you_mean", best)
		} else {
			log.Warn(k+" is not a variable limitd reads (see limitd help serve)", "variable", k)
		}
	}
}

// closest is the first of names nearest to s in edit distance, and that distance.
func closest(s string, names []string) (string, int) {
	best, dist := "", -1
	for _, n := range names {
		if d := editDistance(s, n); dist < 0 || d < dist {
			best, dist = n, d
		}
	}
	return best, dist
}

// editDistance is the Levenshtein distance of a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// embeddedRefused is why serve must not start on its embedded Redis although
// LIMITD_REDIS_URL is empty (nil: nothing says Redis was meant): N replicas
// would each run on a Redis of its own and allow N times every limit.
func embeddedRefused(environ map[string]string) error {
	names := slices.Sorted(maps.Keys(environ))
	known := knownVars()
	for _, k := range names {
		if environ[k] == "" || !strings.HasPrefix(k, "LIMITD_") || slices.Contains(known, k) {
			continue
		}
		if best, d := closest(k, known); strings.Contains(k, "REDIS") || best == "LIMITD_REDIS_URL" && d <= maxSuggestDistance {
			return fmt.Errorf("%s: not a variable limitd reads, and LIMITD_REDIS_URL is empty: limitd would run on an embedded Redis no other process shares; set LIMITD_REDIS_URL=redis://host:port instead", k)
		}
	}
	for _, k := range names {
		if environ[k] != "" && strings.HasPrefix(k, "REDIS_") && refenv.Known(k) { // REDIS_URL, REDIS_AUTH, ...
			return fmt.Errorf("%s: the reference server's variable, which limitd serve does not read, and LIMITD_REDIS_URL is empty: limitd would run on an embedded Redis no other process shares; set LIMITD_REDIS_URL=redis://host:port, or run limitd ratelimit, which reads %s", k, k)
		}
	}
	return nil
}
