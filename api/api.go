package api

import (
	"cmp"
	"context"
	_ "embed"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/internal/promreg"
	"github.com/limitd/limitd/wire"
)

// Options configure the handler New returns.
type Options struct {
	// Service is what the API serves (core.New); its observer counts every
	// decision and store call, the API its requests and problems.
	Service *core.Service
	// Watcher is the process's one sampler of live signals, when its owner
	// shares it; nil: the handler makes its own. Handler.Run runs it.
	Watcher    *core.Watcher
	AdminToken string       // LIMITD_ADMIN_TOKEN: needed for PUT, PATCH, DELETE, reset
	Token      string       // LIMITD_TOKEN: needed for every other /v1 request
	Logger     *slog.Logger // nil: discard
	// AccessLog says which requests get an "http request" line at INFO
	// (LIMITD_ACCESS_LOG); the zero value logs none.
	AccessLog      AccessLog
	Registry       *prometheus.Registry // nil: a new one; /metrics serves it
	Version        string               // limitd's version, for limitd_build_info ("": dev)
	MetricsToken   string               // LIMITD_METRICS_TOKEN: needed for /metrics when set
	BodyLimit      int64                // bytes, 0: 64 KiB
	RequestTimeout time.Duration        // 0: 10s
	// MaxEventStreams bounds the event streams open at once; past it a
	// stream is a 503. 0: DefaultMaxEventStreams.
	MaxEventStreams int
	// BodyTimeout bounds reading a request's body, from when the handler
	// starts (0: 5s). Under an http.Server whose ReadTimeout is no longer,
	// the server's bound applies and the API sets no read deadline of its own.
	BodyTimeout time.Duration
	// EmbeddedRedis says that Service's Redis is limitd serve's embedded
	// in-memory one: /readyz and the event status say "redis": "embedded".
	EmbeddedRedis bool
	// TracerProvider, when not nil, traces every request, continuing the
	// caller's trace as Propagator reads it (nil: W3C trace context).
	TracerProvider trace.TracerProvider
	Propagator     propagation.TextMapPropagator
}

// Defaults of Options.
const (
	defaultBodyLimit      = 64 << 10
	defaultRequestTimeout = 10 * time.Second
	defaultBodyTimeout    = 5 * time.Second
)

// openapiYAML describes the API; /openapi.yaml serves it.
//
//go:embed openapi.yaml
var openapiYAML []byte

// server holds what the handlers share.
type server struct {
	core        *core.Service
	log         *slog.Logger
	m           *metrics
	bodyLimit   int64
	timeout     time.Duration
	bodyTimeout time.Duration
	auth        auth
	changer     string     // who may change configs, for the audit line
	failures    failureLog // which 503s are logged
	accessLog   AccessLog
	ids         *requestIDs
	routes      map[string]*route // by echo path
	unmatched   *route            // no route: echo's 404 and 405
	hub         *eventHub         // what the event streams share
	sig         *signals          // the process's one sampler (core.Watcher), while Handler.Run runs
	embedded    bool              // Options.EmbeddedRedis
	tracing     *tracing          // nil: off
}

// Handler is the HTTP API: an http.Handler that owns what its event streams
// share (Close, Run).
type Handler struct {
	e *echo.Echo
	s *server
}

// ServeHTTP serves one request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.e.ServeHTTP(w, r) }

// Close ends every event stream and refuses later ones (503); every other
// route is served as before. A server calls it as it shuts down
// (http.Server.RegisterOnShutdown): streams never end on their own. Safe to
// call more than once.
func (h *Handler) Close() { h.s.hub.close() }

// Run runs the process's one sampler (core.Watcher; Options.Watcher, or
// the handler's own) until ctx ends: once a second it reads every named
// limiter (the first 1,000 in name order) and the names event streams ask
// for, for the event streams, GET /v1/history, the state gauges of /metrics
// and the streams' status events. The owner runs it in one goroutine; without
// it, event streams get no state and the history is empty.
func (h *Handler) Run(ctx context.Context) { h.s.sig.run(ctx) }

// AccessLog says which requests the API logs, one "http request" line each
// at INFO. Health probes (/healthz, /readyz) are never logged.
type AccessLog int

// The access logs.
const (
	AccessLogOff    AccessLog = iota // none
	AccessLogErrors                  // requests answered with a problem (status ≥ 400 but a 429 refusal)
	AccessLogAll                     // every request
)

var accessLogNames = [...]string{"off", "errors", "all"}

// String is the access log's name, as LIMITD_ACCESS_LOG spells it.
func (a AccessLog) String() string {
	if a < 0 || int(a) >= len(accessLogNames) {
		return fmt.Sprintf("AccessLog(%d)", int(a))
	}
	return accessLogNames[a]
}

// ParseAccessLog reads an access log's name (off, errors, all; any letter case).
func ParseAccessLog(s string) (AccessLog, error) {
	for i, n := range accessLogNames {
		if strings.EqualFold(s, n) {
			return AccessLog(i), nil
		}
	}
	return 0, fmt.Errorf("must be one of %s (got %q)", strings.Join(accessLogNames[:], ", "), s)
}

// New returns the HTTP handler of the API. It panics only if o.Service is nil
// or o.Registry holds a collector of the same name with other labels. It
// starts nothing.
func New(o Options) *Handler {
	if o.Service == nil {
		panic("api: Options.Service is nil")
	}
	s := &server{
		core:        o.Service,
		log:         cmp.Or(o.Logger, slog.New(slog.DiscardHandler)),
		bodyLimit:   positiveOr(o.BodyLimit, defaultBodyLimit),
		timeout:     positiveOr(o.RequestTimeout, defaultRequestTimeout),
		bodyTimeout: positiveOr(o.BodyTimeout, defaultBodyTimeout),
		auth:        newAuth(o.AdminToken, o.Token),
		changer:     "anyone",
		accessLog:   o.AccessLog,
		ids:         newRequestIDs(),
		routes:      map[string]*route{},
		unmatched:   &route{label: "unmatched"},
		embedded:    o.EmbeddedRedis,
		tracing:     newTracing(o.TracerProvider, o.Propagator),
	}
	switch {
	case o.AdminToken != "":
		s.changer = "admin-token"
	case o.Token != "":
		s.changer = "token"
	}
	reg := cmp.Or(o.Registry, prometheus.NewRegistry())
	s.m = newMetrics(reg, o.Version)
	promreg.Register("api", reg, newTemplateCollector(s.core))
	w := o.Watcher
	if w == nil {
		w = s.core.NewWatcher(core.WatcherOptions{Step: signalStep, Timeout: s.timeout})
	}
	s.sig = &signals{w: w, svc: s.core, timeout: s.timeout, embedded: s.embedded}
	promreg.Register("api", reg, newSignalCollector(func() *core.Watcher { return s.sig.w }, s.core))
	s.hub = newEventHub(s, o.MaxEventStreams)
	s.sig.status, s.sig.round = s.hub.setStatus, s.hub.onRound

	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = s.handleError
	e.Use(s.front)

	// Every GET route answers HEAD too: the same status and headers, no body.
	get := func(path string, h echo.HandlerFunc, m ...echo.MiddlewareFunc) {
		e.GET(path, h, m...)
		e.HEAD(path, h, m...)
	}
	metricsAuth := untokened
	if o.MetricsToken != "" {
		// /metrics names every limiter and template.
		metricsAuth = bearer("/metrics needs the metrics token (LIMITD_METRICS_TOKEN)", o.MetricsToken)
	}
	get("/healthz", s.healthz)
	get("/readyz", s.readyz)
	get("/metrics", echo.WrapHandler(promhttp.HandlerFor(reg, promhttp.HandlerOpts{})), metricsAuth)
	get("/ui/", s.ui)
	get("/", func(c echo.Context) error { return c.Redirect(http.StatusFound, "/ui/") })
	e.GET("/ui", func(c echo.Context) error { return c.Redirect(http.StatusMovedPermanently, "/ui/") })
	get("/openapi.yaml", func(c echo.Context) error {
		return c.Blob(http.StatusOK, "application/yaml", openapiYAML)
	})

	read, admin := s.auth.read, s.auth.admin
	get("/v1/limiters", s.listLimiters, read)
	e.GET(eventsPath, s.events, read)
	get("/v1/history", s.history, read)
	e.PUT("/v1/limiters/:name", s.putLimiter, admin)
	get("/v1/limiters/:name", s.getLimiter, read)
	e.PATCH("/v1/limiters/:name", s.patchLimiter, admin)
	e.DELETE("/v1/limiters/:name", s.deleteLimiter, admin)
	e.POST(acquirePath, s.acquire, read)
	e.POST("/v1/acquire", s.acquireAll, read)
	e.POST("/v1/limiters/:name/grant", s.grant, read)
	e.POST("/v1/limiters/:name/handback", s.handback, read)
	e.POST("/v1/limiters/:name/charge", s.charge, read)
	get("/v1/limiters/:name/wait", s.wait, read)
	e.POST("/v1/limiters/:name/reset", s.reset, admin)
	// A client's own lease calls need only the read token: they change no config.
	e.POST("/v1/limiters/:name/capacity", s.capacity, read)
	e.DELETE("/v1/limiters/:name/capacity/:client_id", s.returnCapacity, read)
	e.POST("/v1/limiters/:name/release", s.release, read)
	e.POST("/v1/limiters/:name/renew", s.renew, read)
	get("/v1/templates", s.listTemplates, read)
	e.PUT("/v1/templates/:id", s.putTemplate, admin)
	get("/v1/templates/:id", s.getTemplate, read)
	get("/v1/templates/:id/top", s.topInstances, read)
	e.DELETE("/v1/templates/:id", s.deleteTemplate, admin)

	for _, r := range e.Routes() {
		s.routes[r.Path] = &route{label: openapiPath(r.Path), probe: r.Path == "/healthz" || r.Path == "/readyz"}
	}
	return &Handler{e: e, s: s}
}

// positiveOr is v, or def when v is not above 0.
func positiveOr[T int64 | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// openapiPath writes an echo route the way openapi.yaml does:
// /v1/limiters/:name → /v1/limiters/{name}.
func openapiPath(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		if strings.HasPrefix(s, ":") {
			parts[i] = "{" + s[1:] + "}"
		}
	}
	return strings.Join(parts, "/")
}

func (s *server) healthz(c echo.Context) error {
	return c.JSON(http.StatusOK, wire.Status{Status: "ok"})
}

// readyz answers 200 only while limitd can decide: every Redis master it
// needs accepts a write (core.Service.Ready), within store.ReadyTimeout.
// Its body says which Redis ("ok", or "embedded": not shared); a 503's
// problem says why not ("redis": "unauthorized", "loading", ...).
func (s *server) readyz(c echo.Context) error {
	if err := s.core.Ready(c.Request().Context()); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, wire.Ready{Status: "ready", Redis: redisUp(s.embedded)})
}

// uiPage is the dashboard: one page, its script and style inline, no
// third-party code; it reads and changes limiters through the API with the
// token the user types in.
//
//go:embed ui/index.html
var uiPage []byte

// ui serves the dashboard. The page holds no data and no secret: what it
// shows, it reads through the API with the user's token.
func (s *server) ui(c echo.Context) error {
	h := c.Response().Header()
	h.Set("Cache-Control", "no-cache")
	h.Set("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src 'self' data:")
	return c.Blob(http.StatusOK, "text/html; charset=utf-8", uiPage)
}

// audit logs a config change at info: what changed, its versions before and
// after when known (0 before a creation), and who asked (the kind of token
// that authorized it, and the client's address).
func (s *server) audit(c echo.Context, op, kind, name string, versions ...int64) {
	attrs := []slog.Attr{slog.String("op", op), slog.String(kind, name)}
	if len(versions) == 2 {
		attrs = append(attrs, slog.Int64("version_before", versions[0]), slog.Int64("version_after", versions[1]))
	}
	attrs = append(attrs, slog.String("by", s.changer), slog.String("addr", c.RealIP()),
		slog.String("request_id", requestID(c)))
	s.log.LogAttrs(c.Request().Context(), slog.LevelInfo, "config change", attrs...)
}

// failureWindow is how often at most a run of the same failure (a Redis
// outage answering 503 to every request) is logged: its first request, then
// a line per window saying how many more there were.
const failureWindow = 10 * time.Second

// failureLog decides which of a run of failures is logged.
type failureLog struct {
	mu   sync.Mutex
	last map[string]time.Time // when a failure of this problem was last logged
	more map[string]int       // failures of it since, not logged
}

// log reports whether a failure of problem at now is logged, and how many
// of it were left out since the last one that was.
func (f *failureLog) log(problem string, now time.Time) (ok bool, leftOut int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.last == nil {
		f.last, f.more = map[string]time.Time{}, map[string]int{}
	}
	if t, seen := f.last[problem]; seen && now.Sub(t) < failureWindow {
		f.more[problem]++
		return false, 0
	}
	leftOut = f.more[problem]
	f.last[problem], f.more[problem] = now, 0
	return true, leftOut
}
