package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/caarlos0/env/v11"

	"github.com/limitd/limitd/api"
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
	EventsMaxStreams int `env:"LIMITD_EVENTS_MAX_STREAMS" envDefault:"256" help:"event streams (GET /v1/events, the dashboard) open at once, 1 to 100000; they share one Redis subscription and one sampling loop, and each holds a connection; past it a new stream is a 503 with Retry-After"`
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

// loadConfig reads and checks the configuration from environ (the process
// environment as a map). Every error starts with the variable's name.
func loadConfig(environ map[string]string) (config, error) {
	c, err := env.ParseAsWithOptions[config](env.Options{Environment: environ})
	if err != nil {
		return config{}, envError(err, environ)
	}
	if err := c.check(); err != nil {
		return config{}, err
	}
	return c, nil
}

// envError rewrites the env package's errors, which name struct fields, into
// ones that name the variable.
func envError(err error, environ map[string]string) error {
	var pe env.ParseError
	if !errors.As(err, &pe) {
		return err
	}
	f, _ := reflect.TypeFor[config]().FieldByName(pe.Name)
	key := f.Tag.Get("env")
	switch pe.Type.Kind() {
	case reflect.Bool:
		return fmt.Errorf("%s: must be true or false (got %q)", key, environ[key])
	case reflect.Int:
		return fmt.Errorf("%s: must be a whole number (got %q)", key, environ[key])
	}
	return fmt.Errorf("%s: %v (got %q)", key, pe.Err, environ[key])
}

func (c *config) check() error {
	host, port, err := net.SplitHostPort(c.Addr)
	if err != nil {
		return fmt.Errorf("LIMITD_ADDR: must be host:port, like 127.0.0.1:8080 or 0.0.0.0:8080 (got %q)", c.Addr)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || (p == 0 && port != "0") {
		return fmt.Errorf("LIMITD_ADDR: the port must be a number from 0 to 65535 (got %q)", c.Addr)
	}
	if c.GRPCAddr != "" {
		_, port, err := net.SplitHostPort(c.GRPCAddr)
		if err != nil {
			return fmt.Errorf("LIMITD_GRPC_ADDR: must be host:port, like 127.0.0.1:8081, or empty (got %q)", c.GRPCAddr)
		}
		if p, err := strconv.ParseUint(port, 10, 16); err != nil || (p == 0 && port != "0") {
			return fmt.Errorf("LIMITD_GRPC_ADDR: the port must be a number from 0 to 65535 (got %q)", c.GRPCAddr)
		}
	}
	if !prefixRE.MatchString(c.Prefix) {
		return fmt.Errorf("LIMITD_PREFIX: must be 1 to 64 of A-Z a-z 0-9 . _ : - starting with a letter or digit (got %q)", c.Prefix)
	}
	for _, t := range []struct{ key, val string }{{"LIMITD_ADMIN_TOKEN", c.AdminToken}, {"LIMITD_TOKEN", c.Token}, {"LIMITD_METRICS_TOKEN", c.MetricsToken}} {
		// A stray newline from a secrets file would make every request fail
		// with 401 and nothing to tell why.
		if strings.IndexFunc(t.val, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
			return fmt.Errorf("%s: must not contain spaces or control characters (a trailing newline?)", t.key)
		}
	}
	if c.EventsMaxStreams < 1 || c.EventsMaxStreams > maxEventStreams {
		return fmt.Errorf("LIMITD_EVENTS_MAX_STREAMS: must be from 1 to %d (got %d)", maxEventStreams, c.EventsMaxStreams)
	}
	c.LogFormat = strings.ToLower(c.LogFormat)
	if !slices.Contains(logFormats, c.LogFormat) {
		return fmt.Errorf("LIMITD_LOG_FORMAT: must be one of text, json (got %q)", c.LogFormat)
	}
	c.LogLevel = strings.ToLower(c.LogLevel)
	if _, ok := logLevels[c.LogLevel]; !ok {
		return fmt.Errorf("LIMITD_LOG_LEVEL: must be one of debug, info, warn, error (got %q)", c.LogLevel)
	}
	a, err := api.ParseAccessLog(c.AccessLog)
	if err != nil {
		return fmt.Errorf("LIMITD_ACCESS_LOG: %w", err)
	}
	c.AccessLog = a.String()
	if c.AdminToken == "" && !c.Insecure && !isLoopback(host) {
		return fmt.Errorf("LIMITD_ADDR: %s is reachable from other machines and LIMITD_ADMIN_TOKEN is empty, "+
			"so anyone could change limiters: set LIMITD_ADMIN_TOKEN, or LIMITD_INSECURE=true to accept that", c.Addr)
	}
	return nil
}

// exposed reports whether the listen address reaches beyond this machine.
func (c *config) exposed() bool {
	host, _, _ := net.SplitHostPort(c.Addr)
	return !isLoopback(host)
}

// isLoopback reports whether a listen host is only reachable from this
// machine. An empty host or 0.0.0.0 means every interface; a host name other
// than localhost may resolve anywhere, so it counts as exposed.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	host, _, _ = strings.Cut(host, "%") // an IPv6 zone
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// accessLog is LIMITD_ACCESS_LOG, checked by check.
func (c *config) accessLog() api.AccessLog {
	a, _ := api.ParseAccessLog(c.AccessLog)
	return a
}

// logger builds the process's logger from LIMITD_LOG_FORMAT and LIMITD_LOG_LEVEL.
func (c *config) logger(w io.Writer) *slog.Logger {
	return c.loggerAt(w, logLevels[c.LogLevel])
}

// announcer is the logger of the lines every level shows (the startup
// line): at info, or below where LIMITD_LOG_LEVEL is lower.
func (c *config) announcer(w io.Writer) *slog.Logger {
	return c.loggerAt(w, min(logLevels[c.LogLevel], slog.LevelInfo))
}

func (c *config) loggerAt(w io.Writer, level slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if c.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// environ returns the process environment as a map.
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
	t := reflect.TypeFor[config]()
	for i := range t.NumField() {
		f := t.Field(i)
		text := f.Tag.Get("help")
		if d := f.Tag.Get("envDefault"); d != "" {
			text += " (default " + d + ")"
		}
		// Wrap at 80 columns, continuation lines under the text.
		line := fmt.Sprintf("  %-19s", f.Tag.Get("env"))
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
