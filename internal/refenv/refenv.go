// Package refenv maps the environment of the Envoy reference rate limit
// server (github.com/envoyproxy/ratelimit) onto limitd's: the LIMITD_*
// variables its variables set, and what they ask beyond them (the
// reference's ports, its rules' source, TLS, response headers). Every
// variable of the reference is in one table (vars.go), honoured, ignored or
// refused, and docs/envoy.md shows that table.
package refenv

import (
	"cmp"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/grpcapi"
	"github.com/limitd/limitd/internal/boot"
	"github.com/limitd/limitd/internal/certfiles"
	"github.com/limitd/limitd/internal/envvar"
	"github.com/limitd/limitd/internal/tracing"
	"github.com/limitd/limitd/internal/xds"
)

// Settings are the reference server's variables that limitd reads, with
// its defaults.
type Settings struct {
	Host      string `env:"HOST" envDefault:"0.0.0.0"`
	Port      uint16 `env:"PORT" envDefault:"8080"`
	DebugHost string `env:"DEBUG_HOST" envDefault:"0.0.0.0"`
	DebugPort uint16 `env:"DEBUG_PORT" envDefault:"6070"`
	GRPCHost  string `env:"GRPC_HOST" envDefault:"0.0.0.0"`
	GRPCPort  uint16 `env:"GRPC_PORT" envDefault:"8081"`

	GRPCServerUseTLS    bool   `env:"GRPC_SERVER_USE_TLS"`
	GRPCServerTLSCert   string `env:"GRPC_SERVER_TLS_CERT"`
	GRPCServerTLSKey    string `env:"GRPC_SERVER_TLS_KEY"`
	GRPCClientTLSCACert string `env:"GRPC_CLIENT_TLS_CACERT"`
	GRPCClientTLSSAN    string `env:"GRPC_CLIENT_TLS_SAN"`

	ConfigType string `env:"CONFIG_TYPE" envDefault:"FILE"`
	ForceStart bool   `env:"FORCE_START_WITHOUT_INITIAL_CONFIG"`

	XDSNodeID         string            `env:"CONFIG_GRPC_XDS_NODE_ID" envDefault:"default"`
	XDSNodeMetadata   string            `env:"CONFIG_GRPC_XDS_NODE_METADATA"`
	XDSServerURL      string            `env:"CONFIG_GRPC_XDS_SERVER_URL" envDefault:"localhost:18000"`
	XDSConnectRetry   time.Duration     `env:"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL" envDefault:"3s"`
	XDSHeaders        map[string]string `env:"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS"`
	XDSUseTLS         bool              `env:"CONFIG_GRPC_XDS_SERVER_USE_TLS"`
	XDSClientTLSCert  string            `env:"CONFIG_GRPC_XDS_CLIENT_TLS_CERT"`
	XDSClientTLSKey   string            `env:"CONFIG_GRPC_XDS_CLIENT_TLS_KEY"`
	XDSServerTLSCA    string            `env:"CONFIG_GRPC_XDS_SERVER_TLS_CACERT"`
	XDSServerTLSSAN   string            `env:"CONFIG_GRPC_XDS_SERVER_TLS_SAN"`
	XDSBackoffInitial time.Duration     `env:"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL" envDefault:"10s"`
	XDSBackoffMax     time.Duration     `env:"XDS_CLIENT_BACKOFF_MAX_INTERVAL" envDefault:"60s"`
	XDSBackoffRandom  float64           `env:"XDS_CLIENT_BACKOFF_RANDOM_FACTOR" envDefault:"0.5"`
	XDSBackoffJitter  bool              `env:"XDS_CLIENT_BACKOFF_JITTER" envDefault:"true"`
	XDSMaxMsgSize     uint32            `env:"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES"`

	UsePrometheus  bool   `env:"USE_PROMETHEUS"`
	PrometheusAddr string `env:"PROMETHEUS_ADDR" envDefault:":9090"`
	PrometheusPath string `env:"PROMETHEUS_PATH" envDefault:"/metrics"`

	RuntimeRoot           string `env:"RUNTIME_ROOT" envDefault:"/srv/runtime_data/current"`
	RuntimeSubdirectory   string `env:"RUNTIME_SUBDIRECTORY"`
	RuntimeAppDirectory   string `env:"RUNTIME_APPDIRECTORY" envDefault:"config"`
	RuntimeIgnoreDotFiles bool   `env:"RUNTIME_IGNOREDOTFILES"`
	RuntimeWatchRoot      bool   `env:"RUNTIME_WATCH_ROOT" envDefault:"true"`

	HeadersEnabled  bool   `env:"LIMIT_RESPONSE_HEADERS_ENABLED"`
	HeaderLimit     string `env:"LIMIT_LIMIT_HEADER" envDefault:"RateLimit-Limit"`
	HeaderRemaining string `env:"LIMIT_REMAINING_HEADER" envDefault:"RateLimit-Remaining"`
	HeaderReset     string `env:"LIMIT_RESET_HEADER" envDefault:"RateLimit-Reset"`

	HealthyWithConfig bool `env:"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED"`

	RedisType          string        `env:"REDIS_TYPE" envDefault:"SINGLE"`
	RedisURL           string        `env:"REDIS_URL"`
	RedisPoolSize      uint32        `env:"REDIS_POOL_SIZE"`
	RedisAuth          string        `env:"REDIS_AUTH"`
	RedisSentinelAuth  string        `env:"REDIS_SENTINEL_AUTH"`
	RedisTLS           bool          `env:"REDIS_TLS"`
	RedisTLSClientCert string        `env:"REDIS_TLS_CLIENT_CERT"`
	RedisTLSClientKey  string        `env:"REDIS_TLS_CLIENT_KEY"`
	RedisTLSCACert     string        `env:"REDIS_TLS_CACERT"`
	RedisTLSSkipVerify bool          `env:"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"`
	RedisHealthCheck   bool          `env:"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION"`
	RedisTimeout       time.Duration `env:"REDIS_TIMEOUT"`
}

// overLimitEntryBytes is what one entry of the over-limit cache costs, its
// name included (LOCAL_CACHE_SIZE_IN_BYTES is in bytes, the cache in entries).
const overLimitEntryBytes = 256

// Env is what the reference's variables ask beyond the LIMITD_* ones they
// set.
type Env struct {
	Settings
	Notices  []string          // reference variables set and ignored, each "NAME: why"
	API      bool              // LIMITD_ADMIN_TOKEN is set: limitd's own API listens on LIMITD_ADDR too
	RedisTLS *tls.Config       // what a rediss:// URL cannot say (nil: nothing)
	GRPCTLS  *tls.Config       // the gRPC port's (nil: plaintext)
	XDSTLS   *tls.Config       // the xDS connection's (nil: plaintext)
	Dir      boot.DirSource    // CONFIG_TYPE=FILE
	XDS      bool              // CONFIG_TYPE=GRPC_XDS_SOTW
	Headers  *grpcapi.Headers  // LIMIT_RESPONSE_HEADERS_ENABLED (nil: none)
	origin   map[string]string // LIMITD_* variable → the reference's that set it
}

// Parse reads the reference's variables: the environment with the LIMITD_*
// variables they set, and the rest of what they ask. certs are the options
// of the certificate files it loads (read again when they change).
func Parse(environ map[string]string, certs certfiles.Options) (map[string]string, *Env, error) {
	notices, err := Check(environ)
	if err != nil {
		return nil, nil, err
	}
	s, err := envvar.Parse[Settings](environ)
	if err != nil {
		return nil, nil, err
	}
	e := &Env{Settings: s, Notices: notices, origin: map[string]string{}}
	out := make(map[string]string, len(environ)+8)
	maps.Copy(out, environ)
	// The image sets LIMITD_ADDR for limitd serve; ratelimit runs the API
	// only when asked with an admin token.
	e.API = environ["LIMITD_ADMIN_TOKEN"] != ""
	if !e.API {
		delete(out, "LIMITD_ADDR") // not listened on: not checked
	}
	if cf, set := environ["LIMITD_CONFIG"]; set && cf != "" {
		return nil, nil, envvar.Errorf("LIMITD_CONFIG", "limitd ratelimit takes its rules from RUNTIME_ROOT or xDS (CONFIG_TYPE), not from a boot file")
	}
	if err := e.mapVars(environ, out); err != nil {
		return nil, nil, err
	}
	if err := e.configSource(); err != nil {
		return nil, nil, err
	}
	if err := e.loadTLS(certs); err != nil {
		return nil, nil, err
	}
	return out, e, nil
}

// mapVars sets in out the LIMITD_* variables the reference's variables in
// environ ask for.
func (e *Env) mapVars(environ, out map[string]string) error {
	s := e.Settings
	// set gives a LIMITD_* variable the value a reference variable asks;
	// both set and different is an error.
	set := func(limitd, ref, value string) error {
		if cur, ok := environ[limitd]; ok && cur != value {
			return envvar.Errorf(ref, "%s=%q says otherwise; set one of them", limitd, cur)
		}
		out[limitd], e.origin[limitd] = value, ref
		return nil
	}
	var first error // the one returned
	add := func(err error) {
		if first == nil {
			first = err
		}
	}
	add(set("LIMITD_GRPC_ADDR", "GRPC_PORT", net.JoinHostPort(s.GRPCHost, strconv.Itoa(int(s.GRPCPort)))))
	for ref, limitd := range map[string]string{"GRPC_MAX_CONNECTION_AGE": "LIMITD_GRPC_MAX_CONNECTION_AGE",
		"GRPC_MAX_CONNECTION_AGE_GRACE": "LIMITD_GRPC_MAX_CONNECTION_AGE_GRACE", "NEAR_LIMIT_RATIO": "LIMITD_GRPC_NEAR_LIMIT_RATIO",
		"LOG_FORMAT": "LIMITD_LOG_FORMAT", "SHADOW_MODE": "LIMITD_SHADOW_MODE", "QUOTA_MODE": "LIMITD_GRPC_QUOTA_MODE"} {
		if v, ok := environ[ref]; ok {
			add(set(limitd, ref, v))
		}
	}
	level, ok := environ["LOG_LEVEL"]
	if !ok {
		level = "warn" // the reference's default
	}
	add(set("LIMITD_LOG_LEVEL", "LOG_LEVEL", logLevelOf(level)))
	if v, ok := environ["STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT"]; ok && asks(v) {
		add(set("LIMITD_GRPC_COUNTING", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "strict"))
	}
	if v, ok := environ["LOCAL_CACHE_SIZE_IN_BYTES"]; ok && v != "" && v != "0" {
		b, err := strconv.ParseUint(v, 10, 63)
		if err != nil {
			return envvar.Errorf("LOCAL_CACHE_SIZE_IN_BYTES", "must be a whole number of bytes (got %q)", v)
		}
		add(set("LIMITD_GRPC_OVER_LIMIT_CACHE", "LOCAL_CACHE_SIZE_IN_BYTES", strconv.FormatUint(max(1, min(b/overLimitEntryBytes, core.MaxOverLimitCache)), 10)))
	}
	if v, ok := environ["TRACING_ENABLED"]; ok && asks(v) {
		add(tracingEnv(environ, set))
	}
	if p := strings.TrimRight(environ["CACHE_KEY_PREFIX"], ":_."); p != "" {
		add(set("LIMITD_PREFIX", "CACHE_KEY_PREFIX", p))
	}
	if s.RedisURL != "" {
		u, err := redisURL(s)
		if err != nil {
			return err
		}
		add(set("LIMITD_REDIS_URL", "REDIS_URL", u))
	}
	return first
}

// configSource checks CONFIG_TYPE and the settings of the source it
// names.
func (e *Env) configSource() error {
	s := e.Settings
	switch strings.ToUpper(s.ConfigType) {
	case "FILE":
		e.Dir = boot.DirSource{Dir: filepath.Join(s.RuntimeRoot, s.RuntimeSubdirectory, s.RuntimeAppDirectory), IgnoreDotFiles: s.RuntimeIgnoreDotFiles}
	case "GRPC_XDS_SOTW":
		e.XDS = true
		if s.XDSServerURL == "" {
			return envvar.Errorf("CONFIG_GRPC_XDS_SERVER_URL", "must be host:port of the xDS management server")
		}
		if s.XDSBackoffInitial <= 0 || s.XDSBackoffMax < s.XDSBackoffInitial {
			return envvar.Errorf("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "must be at least XDS_CLIENT_BACKOFF_INITIAL_INTERVAL, which must be above 0 (got %v and %v)", s.XDSBackoffMax, s.XDSBackoffInitial)
		}
		if s.XDSBackoffRandom < 0 || s.XDSBackoffRandom > 1 {
			return envvar.Errorf("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "must be from 0 to 1 (got %v)", s.XDSBackoffRandom)
		}
	default:
		return envvar.Errorf("CONFIG_TYPE", "must be FILE or GRPC_XDS_SOTW (got %q)", s.ConfigType)
	}
	return nil
}

// loadTLS reads the certificates of the gRPC port, the xDS connection and
// Redis, and the response headers asked.
func (e *Env) loadTLS(certs certfiles.Options) error {
	s := e.Settings
	var err error
	if s.HeadersEnabled {
		e.Headers = &grpcapi.Headers{Limit: s.HeaderLimit, Remaining: s.HeaderRemaining, Reset: s.HeaderReset}
	}
	if e.GRPCTLS, err = serverTLS(s, certs); err != nil {
		return err
	}
	if s.XDSUseTLS {
		if e.XDSTLS, err = xdsClientTLS(s, certs); err != nil {
			return err
		}
	}
	if s.RedisTLS && (s.RedisTLSCACert != "" || s.RedisTLSClientCert != "") {
		if e.RedisTLS, err = clientTLS("REDIS_TLS_CLIENT_CERT", s.RedisTLSClientCert, s.RedisTLSClientKey, "REDIS_TLS_CACERT", s.RedisTLSCACert); err != nil {
			return err
		}
	}
	return nil
}

// tracingEnv sets the LIMITD_TRACING* variables of TRACING_ENABLED=true
// and the other TRACING_* variables, with the reference's defaults.
func tracingEnv(environ map[string]string, set func(limitd, ref, value string) error) error {
	exporter := tracing.OTLPHTTP
	switch p := strings.ToLower(environ["TRACING_EXPORTER_PROTOCOL"]); p {
	case "", "http":
	case "grpc":
		exporter = tracing.OTLPGRPC
	default:
		return envvar.Errorf("TRACING_EXPORTER_PROTOCOL", "must be http or grpc (got %q)", p)
	}
	return errors.Join(set("LIMITD_TRACING", "TRACING_ENABLED", exporter),
		set("LIMITD_TRACING_SERVICE_NAME", "TRACING_SERVICE_NAME", cmp.Or(environ["TRACING_SERVICE_NAME"], "RateLimit")),
		set("LIMITD_TRACING_SERVICE_NAMESPACE", "TRACING_SERVICE_NAMESPACE", environ["TRACING_SERVICE_NAMESPACE"]),
		set("LIMITD_TRACING_SERVICE_INSTANCE_ID", "TRACING_SERVICE_INSTANCE_ID",
			cmp.Or(environ["TRACING_SERVICE_INSTANCE_ID"], rand.Text())),
		set("LIMITD_TRACING_SAMPLING_RATE", "TRACING_SAMPLING_RATE", cmp.Or(environ["TRACING_SAMPLING_RATE"], "1")))
}

// logLevelOf words one of logrus' levels as LIMITD_LOG_LEVEL does; another
// value passes as it is, for LIMITD_LOG_LEVEL's check to name.
func logLevelOf(l string) string {
	switch l = strings.ToLower(strings.TrimSpace(l)); l {
	case "trace":
		return "debug"
	case "warning":
		return "warn"
	case "fatal", "panic":
		return "error"
	}
	return l
}

// redisURL is LIMITD_REDIS_URL for REDIS_URL, REDIS_TYPE, REDIS_AUTH,
// REDIS_SENTINEL_AUTH, REDIS_TLS, REDIS_POOL_SIZE and REDIS_TIMEOUT.
func redisURL(s Settings) (string, error) {
	u := url.URL{Scheme: "redis"}
	if s.RedisTLS {
		u.Scheme = "rediss"
	}
	q := url.Values{}
	auth := func(a string) *url.Userinfo {
		if a == "" {
			return nil
		}
		if user, pw, ok := strings.Cut(a, ":"); ok {
			return url.UserPassword(user, pw)
		}
		return url.UserPassword("", a)
	}
	var nodes []string
	for n := range strings.SplitSeq(s.RedisURL, ",") {
		if n = strings.TrimSpace(n); n != "" {
			nodes = append(nodes, n)
		}
	}
	switch strings.ToLower(s.RedisType) {
	case "single":
		if len(nodes) != 1 {
			return "", envvar.Errorf("REDIS_URL", "must be one host:port with REDIS_TYPE=single (got %q)", s.RedisURL)
		}
		u.Host, u.User = nodes[0], auth(s.RedisAuth)
	case "sentinel":
		if len(nodes) < 2 {
			return "", envvar.Errorf("REDIS_URL", "must be the master's name then the Sentinels, name,host:port[,host:port…], with REDIS_TYPE=sentinel (got %q)", s.RedisURL)
		}
		q.Set("master_name", nodes[0])
		u.Host, u.User = nodes[1], auth(s.RedisSentinelAuth)
		for _, n := range nodes[2:] {
			q.Add("addr", n)
		}
		if a := auth(s.RedisAuth); a != nil {
			if name := a.Username(); name != "" {
				q.Set("username", name)
			}
			pw, _ := a.Password()
			q.Set("password", pw)
		}
	case "cluster":
		if len(nodes) < 1 {
			return "", envvar.Errorf("REDIS_URL", "must be the cluster's nodes, host:port[,host:port…], with REDIS_TYPE=cluster (got %q)", s.RedisURL)
		}
		u.Host, u.User = nodes[0], auth(s.RedisAuth)
		rest := nodes[1:]
		if len(rest) == 0 {
			rest = nodes // one seed is named twice: the URL's addr= says "cluster"
		}
		for _, n := range rest {
			q.Add("addr", n)
		}
	default:
		return "", envvar.Errorf("REDIS_TYPE", "must be single, sentinel or cluster (got %q)", s.RedisType)
	}
	if strings.ContainsAny(u.Host, "/ ") {
		return "", envvar.Errorf("REDIS_URL", "must be host:port (got %q)", u.Host)
	}
	if s.RedisPoolSize > 0 {
		q.Set("pool_size", strconv.Itoa(int(s.RedisPoolSize)))
	}
	if s.RedisTimeout > 0 {
		for _, k := range []string{"dial_timeout", "read_timeout", "write_timeout"} {
			q.Set(k, s.RedisTimeout.String())
		}
	}
	if s.RedisTLSSkipVerify {
		q.Set("skip_verify", "true")
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// serverTLS is the gRPC port's TLS (GRPC_SERVER_USE_TLS), with mutual TLS
// when GRPC_CLIENT_TLS_CACERT is set; the files are read again when they
// change (certfiles).
func serverTLS(s Settings, o certfiles.Options) (*tls.Config, error) {
	if !s.GRPCServerUseTLS {
		return nil, nil
	}
	if s.GRPCServerTLSCert == "" || s.GRPCServerTLSKey == "" {
		return nil, envvar.Errorf("GRPC_SERVER_USE_TLS", "needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY")
	}
	cert, err := certfiles.LoadKeyPair(s.GRPCServerTLSCert, s.GRPCServerTLSKey, o)
	if err != nil {
		return nil, envvar.Errorf("GRPC_SERVER_TLS_CERT", "%w", err)
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}}
	var clientCAs *certfiles.Pool
	if s.GRPCClientTLSCACert != "" {
		if clientCAs, err = certfiles.LoadPool(s.GRPCClientTLSCACert, o); err != nil {
			return nil, envvar.Errorf("GRPC_CLIENT_TLS_CACERT", "%w", err)
		}
		c.ClientAuth = tls.RequireAndVerifyClientCert
		if san := s.GRPCClientTLSSAN; san != "" {
			c.VerifyPeerCertificate = func(_ [][]byte, chains [][]*x509.Certificate) error {
				if len(chains) > 0 && len(chains[0]) > 0 && hasSAN(chains[0][0], san) {
					return nil
				}
				return fmt.Errorf("the client certificate does not name %q (GRPC_CLIENT_TLS_SAN)", san)
			}
		}
	}
	return certfiles.Server(c, cert, clientCAs), nil
}

// xdsClientTLS is the xDS connection's TLS (CONFIG_GRPC_XDS_SERVER_USE_TLS),
// its files read again when they change; the server's certificate must name
// CONFIG_GRPC_XDS_SERVER_TLS_SAN, or else the host of the server's URL.
func xdsClientTLS(s Settings, o certfiles.Options) (*tls.Config, error) {
	var cert *certfiles.KeyPair
	var roots *certfiles.Pool
	var err error
	if s.XDSClientTLSCert != "" || s.XDSClientTLSKey != "" {
		if cert, err = certfiles.LoadKeyPair(s.XDSClientTLSCert, s.XDSClientTLSKey, o); err != nil {
			return nil, envvar.Errorf("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "%w", err)
		}
	}
	if s.XDSServerTLSCA != "" {
		if roots, err = certfiles.LoadPool(s.XDSServerTLSCA, o); err != nil {
			return nil, envvar.Errorf("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "%w", err)
		}
	}
	name := s.XDSServerTLSSAN
	if name == "" && roots != nil {
		name = hostOf(s.XDSServerURL)
	}
	return certfiles.Client(name, cert, roots)
}

// hostOf is the host of a gRPC target, host:port or scheme:///host:port.
func hostOf(target string) string {
	if _, rest, ok := strings.Cut(target, ":///"); ok {
		target = rest
	}
	if h, _, err := net.SplitHostPort(target); err == nil {
		return h
	}
	return target
}

// hasSAN reports whether a certificate names san among its DNS names, URIs,
// IP addresses or e-mail addresses.
func hasSAN(c *x509.Certificate, san string) bool {
	return slices.Contains(c.DNSNames, san) || slices.Contains(c.EmailAddresses, san) ||
		slices.ContainsFunc(c.URIs, func(u *url.URL) bool { return u.String() == san }) ||
		slices.ContainsFunc(c.IPAddresses, func(ip net.IP) bool { return ip.String() == san })
}

// clientTLS is a client's TLS: its certificate (optional) and the CA it
// trusts (empty: the system's).
func clientTLS(certVar, certFile, keyFile, caVar, caFile string) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if certFile != "" || keyFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, &envvar.Error{Name: certVar, Err: err}
		}
		c.Certificates = []tls.Certificate{cert}
	}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, &envvar.Error{Name: caVar, Err: err}
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, envvar.Errorf(caVar, "%s holds no PEM certificate", caFile)
		}
	}
	return c, nil
}

// Rename words an error of a LIMITD_* variable that a reference variable
// set under the reference's name: "NEAR_LIMIT_RATIO (as
// LIMITD_GRPC_NEAR_LIMIT_RATIO): …". Any other error is returned as it is.
func (e *Env) Rename(err error) error {
	var ve *envvar.Error
	if e == nil || !errors.As(err, &ve) || ve.As != "" {
		return err
	}
	if ref, set := e.origin[ve.Name]; set {
		return &envvar.Error{Name: ref, As: ve.Name, Err: ve.Err}
	}
	return err
}

// Origin is the reference's variable that set the LIMITD_* variable
// limitd (empty: none did).
func (e *Env) Origin(limitd string) string { return e.origin[limitd] }

// XDSOptions are the xDS client's options but Log, Apply and Rejected.
func (e *Env) XDSOptions() xds.Options {
	s := e.Settings
	meta := map[string]string{} // CONFIG_GRPC_XDS_NODE_METADATA: key=value pairs
	for kv := range strings.SplitSeq(s.XDSNodeMetadata, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			meta[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return xds.Options{Server: s.XDSServerURL, NodeID: s.XDSNodeID, NodeMetadata: meta,
		Headers: s.XDSHeaders, TLS: e.XDSTLS, MaxRecvMsgSize: int(s.XDSMaxMsgSize), ConnectRetry: s.XDSConnectRetry,
		Backoff: xds.Backoff{Initial: s.XDSBackoffInitial, Max: s.XDSBackoffMax, RandomFactor: s.XDSBackoffRandom, Jitter: s.XDSBackoffJitter}}
}
