package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"sync"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"

	"github.com/limitd/limitd/api"
	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/grpcapi"
	"github.com/limitd/limitd/internal/boot"
	"github.com/limitd/limitd/internal/coremetrics"
	"github.com/limitd/limitd/internal/envvar"
	"github.com/limitd/limitd/internal/tracing"
	"github.com/limitd/limitd/store"
)

// Fixed settings, not in the environment on purpose: one clear default
// beats a knob nobody measured.
const (
	readHeaderTimeout = 5 * time.Second
	// readTimeout bounds reading a whole request, no more than the API's
	// body timeout (api.Options.BodyTimeout), so the API sets no read
	// deadline of its own; net/http lifts it once the body is read.
	readTimeout       = 5 * time.Second
	idleTimeout       = 2 * time.Minute
	shutdownTimeout   = 10 * time.Second // for in-flight requests after SIGTERM
	bootReloadEvery   = 3 * time.Second  // how often serve reads the boot file for changes
	grpcHealthEvery   = 2 * time.Second  // how often the gRPC health service asks Redis
	startCheckTimeout = 10 * time.Second // for the look at Redis at the start
	batchSize         = 64               // acquires per pipeline (store.WithBatching)
	// serveGCPercent is serve's GOGC unless the environment sets one: its
	// heap of a few MB is marked a quarter as often as at 100, and stays
	// within tens of MB (README, Performance).
	serveGCPercent = 400
)

func init() {
	register(&command{
		name:    "serve",
		summary: "run the HTTP API over a shared Redis",
		usage: `usage: limitd [serve]

Runs limitd's HTTP API (/v1/limiters, /v1/templates, /v1/events,
/v1/history, /healthz, /readyz, /metrics, /openapi.yaml) and its dashboard
(/ui/) over the Redis named by LIMITD_REDIS_URL, or over an embedded
in-memory Redis when it is empty. Every named limiter is sampled once a
second for the dashboard's signals and its last 15 minutes. With LIMITD_GRPC_ADDR it also
serves Envoy's rate limit service (gRPC) with the boot file's domains:
rules. Stops gracefully on SIGINT or SIGTERM. Invalid configuration exits 1
with one line naming the variable.

With LIMITD_CONFIG the YAML file's limiters and templates are applied at boot
(the file wins over changes made since through the API), applied again
whenever Redis lost them, e.g. after a restart without persistence, and
reloaded when the file changes (read every 3 s, and on SIGHUP):

  limiters:
    orders: {rate: 1000, burst: 1.1, max_backlog: 10s}
    search: {spec: "200,1.5"}
    login: {kind: smooth, rate: 5, max_burst_seconds: 1}
  templates:
    per-user: {pattern: "user:*", order: 10, idle_ttl: 10m, limiter: {rate: 50}}
  domains:
    - domain: messaging
      descriptors:
        - key: to_number
          rate_limit: {unit: day, requests_per_unit: 100}

` + envHelp(),
		run: func(ctx context.Context, args []string, _, stderr io.Writer) error {
			if len(args) > 0 {
				return usageErrorf("serve takes no arguments, only environment variables (got %q)", args[0])
			}
			return serve(ctx, serveEnviron(), stderr, nil, nil)
		},
	})
}

// serveEnviron is the environment of serve and ratelimit, whose GOGC
// (serveGCPercent unless set) it sets.
func serveEnviron() map[string]string {
	env := environ()
	if _, set := env["GOGC"]; !set {
		debug.SetGCPercent(serveGCPercent)
	}
	return env
}

// serve runs limitd serve until ctx ends, then shuts down gracefully; ready
// (if not nil) is told the address once the server accepts connections.
// With rm it is limitd ratelimit (ratelimit.go).
func serve(ctx context.Context, environ map[string]string, logOut io.Writer, ready func(net.Addr), rm *refMode) error {
	mode := serveMode{api: true, embedded: true, keepMarker: true, warnGRPCExposed: true}
	if rm != nil {
		mode = serveMode{ref: rm, api: rm.API}
	}
	s := &server{environ: environ, logOut: logOut, ready: ready, mode: mode}
	defer s.close()
	for _, phase := range []func(context.Context) error{s.configure, s.listen, s.connect, s.build, s.start} {
		if err := phase(ctx); err != nil {
			return err
		}
	}
	return s.run(ctx)
}

// serveMode is what differs between limitd serve and limitd ratelimit,
// read by the same phases; each bool is limitd serve's.
type serveMode struct {
	ref *refMode // limitd ratelimit's settings (nil: limitd serve)
	// api: limitd's HTTP API listens on LIMITD_ADDR (limitd ratelimit:
	// only with LIMITD_ADMIN_TOKEN).
	api bool
	// embedded: an empty LIMITD_REDIS_URL starts an in-memory Redis.
	embedded bool
	// keepMarker: without a boot file, say at start when Redis does not
	// answer and keep limitd's marker in Redis (ratelimit's rules and
	// health do both their own way).
	keepMarker bool
	// warnGRPCExposed: warn of a gRPC port beyond loopback without a token
	// (the reference's port is exposed by design).
	warnGRPCExposed bool
}

// server is limitd serve (or limitd ratelimit) through its phases:
// configure, listen, connect, build, start, run and, as run ends, shut
// down; close undoes what the phases opened, last first.
type server struct {
	environ map[string]string
	logOut  io.Writer
	ready   func(net.Addr)
	mode    serveMode

	cfg      config
	logger   *slog.Logger
	tp       *tracing.Provider // nil: tracing off
	bootFile *boot.File        // nil: no LIMITD_CONFIG

	ln  net.Listener // limitd's HTTP API (nil: none)
	gln net.Listener // gRPC (nil: no LIMITD_GRPC_ADDR)
	ref *refRun      // the reference's ports (nil: limitd serve)

	rdb     redis.UniversalClient
	st      *store.Store
	svc     *core.Service
	reg     *prometheus.Registry
	rls     *grpcapi.Server // nil: no gRPC
	handler *api.Handler    // nil: no API
	srv     *http.Server
	gsrv    *grpc.Server

	wg             sync.WaitGroup // the background and the servers
	bgCtx          context.Context
	stopBackground context.CancelFunc
	serveErr       chan error // nil without the API: never ready
	grpcErr        chan error
	closers        []func() // run last first by close
}

// onClose has close run f, before what was added earlier.
func (s *server) onClose(f func()) { s.closers = append(s.closers, f) }

func (s *server) close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
}

// configure reads the configuration, starts tracing and loads the boot
// file: nothing listens or dials yet.
func (s *server) configure(ctx context.Context) error {
	rm := s.mode.ref
	cfg, err := loadConfig(s.environ)
	if err != nil {
		return rm.rename(err)
	}
	s.cfg = cfg
	if cfg.RedisURL == "" && s.mode.embedded {
		if err := embeddedRefused(s.environ); err != nil {
			return err
		}
	}
	if cfg.RedisURL == "" && !s.mode.embedded { // as the reference stops
		return errors.New("REDIS_URL: not set: limitd ratelimit counts in a Redis every replica shares (the reference would dial /var/run/nutcracker/ratelimit.sock and stop); set REDIS_URL=host:port")
	}
	s.logger = cfg.logger(s.logOut, logLevels[cfg.LogLevel])
	if rm != nil {
		for _, n := range rm.Notices { // each once, at the start
			s.logger.Warn("ignored: " + n)
		}
	}
	// go-redis logs every failed dial; serve reports outages itself, so
	// these are for debugging. The logger is process-wide: set once.
	setRedisLogger.Do(func() { redis.SetLogger(redisLog{s.logger}) })
	if err := s.startTracing(ctx); err != nil {
		return err
	}
	if err := s.loadBootFile(); err != nil {
		return err
	}
	if cfg.RedisURL != "" { // a client only: it dials on first use
		if s.rdb, err = store.NewClientTLS(cfg.RedisURL, rm.redisTLSConfig()); err != nil {
			if ue := (*store.URLError)(nil); errors.As(err, &ue) {
				err = errors.New(ue.Reason)
			}
			return rm.rename(&envvar.Error{Name: "LIMITD_REDIS_URL", Err: err})
		}
		s.onClose(func() { s.rdb.Close() })
	}
	return nil
}

// startTracing starts the tracer provider (none when off).
func (s *server) startTracing(ctx context.Context) error {
	tc, err := s.cfg.tracingConfig(s.environ)
	if err != nil {
		return err
	}
	if s.tp, err = tracing.Start(ctx, tc); err != nil {
		return s.mode.ref.rename(err)
	}
	if s.tp != nil {
		s.onClose(func() { // last: the spans of the shutdown go too
			sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
			defer cancel()
			if err := s.tp.Shutdown(sctx); err != nil {
				s.logger.Warn("traces not all exported at shutdown", "err", err)
			}
		})
	}
	return nil
}

// loadBootFile reads LIMITD_CONFIG, if set.
func (s *server) loadBootFile() error {
	if s.cfg.ConfigFile == "" {
		return nil
	}
	var err error
	if s.bootFile, err = boot.Load(s.cfg.ConfigFile); err != nil {
		return &envvar.Error{Name: "LIMITD_CONFIG", Err: err}
	}
	if n := s.bootFile.Rules.Quotas(); n > 0 && s.cfg.counting() == core.CountStrict {
		return envvar.Errorf("LIMITD_CONFIG", "%d rules set quota_mode, which needs LIMITD_GRPC_COUNTING=reference (a strict call is all or nothing)", n)
	}
	return nil
}

// listen opens every port before touching Redis, so a busy port fails at
// once.
func (s *server) listen(context.Context) error {
	var err error
	if s.mode.api {
		if s.ln, err = net.Listen("tcp", s.cfg.Addr); err != nil {
			return &envvar.Error{Name: "LIMITD_ADDR", Err: err}
		}
		s.onClose(func() { s.ln.Close() }) // Shutdown closes it too; this covers the early returns
	}
	if s.cfg.GRPCAddr != "" {
		if s.gln, err = net.Listen("tcp", s.cfg.GRPCAddr); err != nil {
			return s.mode.ref.rename(&envvar.Error{Name: "LIMITD_GRPC_ADDR", Err: err})
		}
		s.onClose(func() { s.gln.Close() }) // Stop closes it too
	}
	if s.mode.ref != nil {
		if s.ref, err = s.mode.ref.listen(); err != nil {
			return err
		}
		s.onClose(s.ref.close)
	}
	return nil
}

// connect opens the store, over the embedded Redis when no URL names one.
func (s *server) connect(ctx context.Context) error {
	if s.rdb == nil {
		if err := s.startEmbedded(); err != nil {
			return err
		}
	}
	if s.tp != nil {
		if err := s.tp.InstrumentRedis(s.rdb); err != nil {
			return err
		}
	}
	s.st = store.New(s.rdb, store.WithPrefix(s.cfg.Prefix), store.WithBatching(batchSize))
	s.onClose(func() { s.st.Close() })
	s.warnSettings()
	return nil
}

// startEmbedded starts an in-memory Redis for this process alone.
func (s *server) startEmbedded() error {
	mini := miniredis.NewMiniRedis()
	if err := mini.StartAddr("127.0.0.1:0"); err != nil {
		return fmt.Errorf("embedded redis: %w", err)
	}
	s.onClose(mini.Close)
	rdb, err := store.NewClient(mini.Addr())
	if err != nil {
		return fmt.Errorf("embedded redis: %w", err)
	}
	s.rdb = rdb
	s.onClose(func() { rdb.Close() })
	s.logger.Warn("LIMITD_REDIS_URL is empty: using an EMBEDDED IN-MEMORY Redis (embedded: not shared between processes). Limiters are NOT shared with other processes and are LOST when limitd stops; set LIMITD_REDIS_URL for real use",
		"embedded_addr", mini.Addr())
	return nil
}

// warnSettings warns, once at the start, of settings that expose or
// loosen limitd.
func (s *server) warnSettings() {
	cfg, logger := s.cfg, s.logger
	warnUnknownVars(logger, s.environ)
	if cfg.AdminToken != "" && cfg.Token == "" && cfg.exposed() && s.ln != nil {
		logger.Warn("LIMITD_ADDR listens beyond loopback without LIMITD_TOKEN: anyone who reaches it can acquire permits, spending the limiters' limits, and read every limiter", "addr", cfg.Addr)
	}
	if cfg.Insecure && cfg.AdminToken == "" && cfg.exposed() {
		logger.Warn("LIMITD_INSECURE=true: listening beyond loopback without LIMITD_ADMIN_TOKEN; anyone who reaches this address can change limiters", "addr", cfg.Addr)
	}
	if cfg.ShadowMode {
		logger.Warn("LIMITD_SHADOW_MODE=true: every limiter is in shadow mode; acquires are counted but never refused")
	}
}

// build makes the core and the front ends, and starts the background.
func (s *server) build(ctx context.Context) error {
	s.bgCtx, s.stopBackground = context.WithCancel(context.Background())
	// Stop the background and wait for it before the store and Redis close.
	s.onClose(s.wg.Wait)
	s.onClose(s.stopBackground)
	if s.bootFile == nil && s.mode.keepMarker {
		// Said once; with a boot file, its keeper says it.
		pctx, cancel := context.WithTimeout(ctx, startCheckTimeout)
		if err := s.st.Ready(pctx); err != nil {
			s.logger.Warn("redis unavailable at start: requests answer 503 until it answers", "redis", redisTarget(s.cfg.RedisURL), "err", err)
		}
		cancel()
	}
	s.reg = prometheus.NewRegistry()
	// The ledger adds this process's decision counts to the Redis totals.
	ledger := core.NewLedger(s.st, core.LedgerOptions{})
	s.wg.Go(func() { ledger.Run(s.bgCtx) })
	s.svc = core.New(s.st, core.Options{Shadow: s.cfg.ShadowMode, QuotaMode: s.cfg.GRPCQuota, OverLimitCache: s.cfg.GRPCOverLimitCache,
		Counting: s.cfg.counting(), Observer: coremetrics.New(s.reg), Ledger: ledger, Redis: s.mode.ref.redisSettings()})
	if s.gln != nil {
		if err := s.buildGRPC(); err != nil {
			return err
		}
	}
	s.startKeeper(ctx)
	if s.ln != nil {
		s.buildAPI()
	}
	return nil
}

// buildGRPC makes Envoy's rate limit service with the boot file's rules,
// or the reference's.
func (s *server) buildGRPC() error {
	cfg := s.cfg
	o := grpcapi.Options{
		Service: s.svc, Token: cfg.Token, AdminToken: cfg.AdminToken,
		Logger: s.logger, AccessLog: cfg.AccessLog, Registry: s.reg, NearRatio: cfg.GRPCNearRatio,
	}
	if s.bootFile != nil {
		o.Rules = s.bootFile.Rules
	}
	if s.ref != nil {
		if err := s.ref.start(&o, s.logger, s.reg); err != nil {
			return err
		}
	}
	if h, _, _ := net.SplitHostPort(cfg.GRPCAddr); cfg.Token == "" && !isLoopback(h) && s.mode.warnGRPCExposed {
		s.logger.Warn("LIMITD_GRPC_ADDR listens beyond loopback without LIMITD_TOKEN: anyone who reaches it can spend the rules' limits", "grpc_addr", cfg.GRPCAddr)
	}
	s.rls = grpcapi.New(o)
	if s.ref != nil {
		s.ref.serve(s.bgCtx, &s.wg, s.rls, s.svc, s.logger)
	} else {
		s.wg.Go(func() { s.rls.Watch(s.bgCtx, grpcHealthEvery) })
	}
	return nil
}

// startKeeper keeps the boot file (reloaded on change or SIGHUP) or,
// without one, limitd's marker applied in Redis.
func (s *server) startKeeper(ctx context.Context) {
	var k *boot.Keeper
	switch {
	case s.bootFile != nil:
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		s.onClose(func() { signal.Stop(hup) })
		k = boot.NewKeeper(s.bootFile, s.svc, s.logger)
		k.ReloadEvery, k.Hup = bootReloadEvery, hup
		if rls := s.rls; rls != nil {
			k.Reloaded = func(b *boot.File) { rls.SetRules(b.Rules) }
		}
	case s.mode.keepMarker:
		k = boot.NewKeeper(nil, s.svc, s.logger)
	default:
		return
	}
	k.Boot(ctx)
	s.wg.Go(func() { k.Run(s.bgCtx) })
}

func (s *server) buildAPI() {
	cfg := s.cfg
	o := api.Options{
		Service:         s.svc,
		AdminToken:      cfg.AdminToken,
		Token:           cfg.Token,
		MetricsToken:    cfg.MetricsToken,
		Logger:          s.logger,
		AccessLog:       cfg.accessLog(),
		Registry:        s.reg,
		Version:         version,
		MaxEventStreams: cfg.EventsMaxStreams,
		EmbeddedRedis:   cfg.RedisURL == "",
		// BodyLimit, BodyTimeout and RequestTimeout: the API's defaults.
	}
	if s.tp != nil {
		o.TracerProvider, o.Propagator = s.tp.TracerProvider(), s.tp.Propagator()
	}
	s.handler = api.New(o)
}

// start serves every port built, runs the signals sampler, writes the
// start line and tells ready.
func (s *server) start(context.Context) error {
	s.srv = httpServer(s.handler, s.logger)
	if s.ln != nil {
		// The event streams would not end on their own: end them as the
		// shutdown starts.
		s.onClose(s.handler.Close)
		s.srv.RegisterOnShutdown(s.handler.Close)
		s.wg.Go(func() { s.handler.Run(s.bgCtx) }) // the signals sampler, stopped with the keeper
		s.serveErr = make(chan error, 1)
		s.wg.Go(func() { s.serveErr <- s.srv.Serve(s.ln) })
	} else {
		// No API: the same sampler feeds the limiters' gauges.
		w := s.svc.NewWatcher(core.WatcherOptions{})
		s.reg.MustRegister(api.SignalMetrics(w, s.svc))
		s.wg.Go(func() { w.Run(s.bgCtx) })
	}
	s.grpcErr = make(chan error, 1)
	if s.rls != nil {
		if err := s.startGRPC(); err != nil {
			s.srv.Close()
			return err
		}
	}
	s.announce()
	return nil
}

// httpServer serves h within the fixed timeouts, its errors logged as warnings.
func httpServer(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: readHeaderTimeout, ReadTimeout: readTimeout,
		IdleTimeout: idleTimeout, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
}

// startGRPC serves the gRPC front end within the LIMITD_GRPC_* limits.
func (s *server) startGRPC() error {
	limits := grpcapi.Limits(s.cfg.GRPCLimits) // LIMITD_GRPC_*, checked by loadConfig
	opts, err := s.rls.ServerOptions(limits)
	if err != nil {
		return fmt.Errorf("gRPC limits: %w", err)
	}
	if s.ref != nil {
		opts = append(opts, s.ref.grpcOptions()...)
	}
	if s.tp != nil {
		opts = append(opts, s.tp.GRPCServer())
	}
	s.gsrv = grpc.NewServer(opts...)
	s.rls.Register(s.gsrv)
	s.wg.Go(func() { s.grpcErr <- s.gsrv.Serve(s.rls.Listener(s.gln, limits)) })
	return nil
}

// announce writes the start line at every log level, and tells ready.
func (s *server) announce() {
	cfg := s.cfg
	attrs, readyAddr, grpcAddr := []any{"addr", ""}, net.Addr(nil), ""
	if s.ln != nil {
		readyAddr = s.ln.Addr()
		attrs = []any{"addr", readyAddr.String(), "dashboard", dashboardURL(readyAddr.String())}
	}
	if s.gln != nil {
		grpcAddr = s.gln.Addr().String()
	}
	attrs = append(attrs, "grpc_addr", grpcAddr, "version", version, "redis", redisTarget(cfg.RedisURL),
		"prefix", cfg.Prefix, "admin_token", cfg.AdminToken != "", "token", cfg.Token != "", "metrics_token", cfg.MetricsToken != "")
	if s.ref != nil {
		attrs = append(attrs, s.ref.attrs()...)
		readyAddr = s.ref.http.Addr()
	}
	// The start line shows at every level.
	cfg.logger(s.logOut, min(logLevels[cfg.LogLevel], slog.LevelInfo)).Info("limitd serving", attrs...)
	if s.ready != nil {
		s.ready(readyAddr)
	}
}

// run serves until a server fails, or ctx ends and it shuts down.
func (s *server) run(ctx context.Context) error {
	var refErr <-chan error
	if s.ref != nil {
		refErr = s.ref.errs
	}
	select {
	case err := <-s.serveErr:
		if s.gsrv != nil {
			s.gsrv.Stop()
		}
		return fmt.Errorf("http server: %w", err)
	case err := <-s.grpcErr:
		s.srv.Close()
		return fmt.Errorf("grpc server: %w", err)
	case err := <-refErr:
		s.srv.Close()
		if s.gsrv != nil {
			s.gsrv.Stop()
		}
		return err
	case <-ctx.Done():
	}
	return s.shutdown()
}

// shutdown lets calls in flight finish, for at most shutdownTimeout.
func (s *server) shutdown() error {
	if s.ref != nil {
		s.ref.shutdown() // /healthcheck fails from now on, as gRPC health does
	}
	s.logger.Info("shutting down", "timeout", shutdownTimeout)
	shutCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	grpcStopped := make(chan struct{})
	if s.gsrv != nil {
		// Health watchers hear NOT_SERVING first; calls in flight finish.
		s.rls.Shutdown()
		s.wg.Go(func() { gracefulStop(shutCtx, s.gsrv, s.logger); close(grpcStopped) })
	} else {
		close(grpcStopped)
	}
	if s.ref != nil {
		s.ref.stop(shutCtx)
	}
	if s.ln != nil {
		if err := s.srv.Shutdown(shutCtx); err != nil {
			s.logger.Warn("in-flight requests did not finish in time; closing their connections", "err", err)
			s.srv.Close()
		}
		if err := <-s.serveErr; err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("http server: %w", err)
		}
	}
	<-grpcStopped
	s.logger.Info("stopped")
	return nil
}

// gracefulStop stops g once its calls in flight finish, or at once when
// ctx ends first.
func gracefulStop(ctx context.Context, g *grpc.Server, logger *slog.Logger) {
	done := make(chan struct{})
	go func() { g.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		logger.Warn("in-flight gRPC calls did not finish in time; closing their connections")
		g.Stop()
		<-done
	}
}

var setRedisLogger sync.Once

// redisLog passes go-redis' internal messages to slog at debug level.
type redisLog struct{ l *slog.Logger }

func (r redisLog) Printf(ctx context.Context, format string, v ...any) {
	r.l.DebugContext(ctx, "redis client: "+fmt.Sprintf(format, v...))
}

// embeddedMark is what the start line, /readyz, the event status and the
// dashboard say of the embedded Redis, in their words.
const embeddedMark = "embedded: not shared between processes"

// redisTarget describes LIMITD_REDIS_URL for the log, without its password.
func redisTarget(raw string) string {
	if raw == "" {
		return embeddedMark
	}
	return store.RedactURL(raw)
}

// dashboardURL is the dashboard's address on a listen address; a host that
// means every interface is written as localhost.
func dashboardURL(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, port) + "/ui/"
}
