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
	"github.com/limitd/limitd/internal/tracing"
	"github.com/limitd/limitd/store"
)

// Fixed settings of the HTTP server. They are not in the environment on
// purpose: one clear default beats a knob nobody measured.
const (
	readHeaderTimeout = 5 * time.Second
	// readTimeout bounds reading a whole request, headers and body: no more
	// than the API's body timeout (api.Options.BodyTimeout, 5 s), so the
	// API sets no read deadline of its own per request. net/http lifts it
	// once the body is read, before the handler's work goes on (a blocking
	// acquire outlasts it). Equal to readHeaderTimeout: one deadline set
	// per request rather than two.
	readTimeout       = 5 * time.Second
	idleTimeout       = 2 * time.Minute
	shutdownTimeout   = 10 * time.Second // for in-flight requests after SIGTERM
	bootCheckInterval = time.Second      // how often serve looks for a lost boot file
	bootReloadEvery   = 3 * time.Second  // how often serve reads the boot file for changes
	grpcHealthEvery   = 2 * time.Second  // how often the gRPC health service asks Redis
	bootTimeout       = 10 * time.Second // to apply the boot file once
	batchSize         = 64               // acquires per pipeline (store.WithBatching)
	// serveGCPercent is limitd serve's GOGC unless the environment sets one.
	// Its heap is a few MB, which at Go's default (100) the collector marks
	// many times a second under load; at 400 it marks a quarter as often
	// and the heap stays within tens of MB (README, Performance: CPU per
	// request under HTTP load against GOGC 100).
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
			env := environ()
			if _, set := env["GOGC"]; !set {
				debug.SetGCPercent(serveGCPercent)
			}
			return serve(ctx, env, stderr, nil)
		},
	})
}

// serve runs limitd serve until ctx ends, then shuts down gracefully. environ
// is the environment, logs go to logOut, and ready (if not nil) is told the
// address once the server accepts connections.
func serve(ctx context.Context, environ map[string]string, logOut io.Writer, ready func(net.Addr)) error {
	return serveWith(ctx, environ, logOut, ready, nil)
}

// serveWith is serve, and with rm limitd ratelimit (ratelimit.go): the
// reference server's ports, rules, health and metrics beside the gRPC
// front end, and limitd's own HTTP API only with LIMITD_ADMIN_TOKEN.
func serveWith(ctx context.Context, environ map[string]string, logOut io.Writer, ready func(net.Addr), rm *refMode) error {
	cfg, err := loadConfig(environ)
	if err != nil {
		return rm.rename(err)
	}
	if cfg.RedisURL == "" && rm == nil {
		if err := embeddedRefused(environ); err != nil {
			return err
		}
	}
	if cfg.RedisURL == "" && rm != nil {
		// As the reference: it dials its default, a unix socket, and stops
		// when nothing answers there.
		return errors.New("REDIS_URL: not set: limitd ratelimit counts in a Redis every replica shares (the reference would dial /var/run/nutcracker/ratelimit.sock and stop); set REDIS_URL=host:port")
	}
	logger := cfg.logger(logOut)
	if rm != nil {
		for _, n := range rm.notices { // each once, at the start
			logger.Warn("ignored: " + n)
		}
	}
	// go-redis logs every failed dial on its own; during an outage that would
	// be a line per attempt. serve reports outages itself, so keep these for
	// debugging. The logger is process-wide, hence set once.
	setRedisLogger.Do(func() { redis.SetLogger(redisLog{logger}) })
	tc, err := cfg.tracingConfig(environ)
	if err != nil {
		return err
	}
	// Off (the default): no provider, and no hook anywhere.
	tp, err := tracing.Start(ctx, tc)
	if err != nil {
		return rm.rename(err)
	}
	if tp != nil {
		defer func() { // last: the spans of the shutdown go too
			sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
			defer cancel()
			if err := tp.Shutdown(sctx); err != nil {
				logger.Warn("traces not all exported at shutdown", "err", err)
			}
		}()
	}
	var bootFile *boot.File
	if cfg.ConfigFile != "" {
		if bootFile, err = boot.Load(cfg.ConfigFile); err != nil {
			return fmt.Errorf("LIMITD_CONFIG: %w", err)
		}
		if n := bootFile.Rules.Quotas(); n > 0 && cfg.counting() == core.CountStrict {
			return fmt.Errorf("LIMITD_CONFIG: %d rules set quota_mode, which needs LIMITD_GRPC_COUNTING=reference (a strict call is all or nothing)", n)
		}
	}
	var rdb redis.UniversalClient
	if cfg.RedisURL != "" {
		if rdb, err = store.NewClientTLS(cfg.RedisURL, rm.redisTLSConfig()); err != nil {
			if ue := (*store.URLError)(nil); errors.As(err, &ue) {
				err = errors.New(ue.Reason)
			}
			return rm.rename(fmt.Errorf("LIMITD_REDIS_URL: %w", err))
		}
		defer rdb.Close()
		if tp != nil {
			if err := tp.InstrumentRedis(rdb); err != nil {
				return err
			}
		}
	}
	// Listen before touching Redis, so a busy port fails at once.
	var ln net.Listener // limitd's HTTP API; limitd ratelimit's only with LIMITD_ADMIN_TOKEN
	if rm == nil || rm.api {
		if ln, err = net.Listen("tcp", cfg.Addr); err != nil {
			return fmt.Errorf("LIMITD_ADDR: %w", err)
		}
		defer ln.Close() // Shutdown closes it too; this covers the early returns
	}
	var gln net.Listener
	if cfg.GRPCAddr != "" {
		if gln, err = net.Listen("tcp", cfg.GRPCAddr); err != nil {
			return rm.rename(fmt.Errorf("LIMITD_GRPC_ADDR: %w", err))
		}
		defer gln.Close() // Stop closes it too
	}
	var ref *refRun
	if rm != nil {
		if ref, err = rm.listen(); err != nil {
			return err
		}
		defer ref.close()
	}

	if rdb == nil {
		mini := miniredis.NewMiniRedis()
		if err := mini.StartAddr("127.0.0.1:0"); err != nil {
			return fmt.Errorf("embedded redis: %w", err)
		}
		defer mini.Close()
		if rdb, err = store.NewClient(mini.Addr()); err != nil {
			return fmt.Errorf("embedded redis: %w", err)
		}
		defer rdb.Close()
		if tp != nil {
			if err := tp.InstrumentRedis(rdb); err != nil {
				return err
			}
		}
		logger.Warn("LIMITD_REDIS_URL is empty: using an EMBEDDED IN-MEMORY Redis (embedded: not shared between processes). Limiters are NOT shared with other processes and are LOST when limitd stops; set LIMITD_REDIS_URL for real use",
			"embedded_addr", mini.Addr())
	}
	st := store.New(rdb, store.WithPrefix(cfg.Prefix), store.WithBatching(batchSize))
	defer st.Close()

	warnUnknownVars(logger, environ)
	if cfg.AdminToken != "" && cfg.Token == "" && cfg.exposed() && ln != nil {
		logger.Warn("LIMITD_ADDR listens beyond loopback without LIMITD_TOKEN: anyone who reaches it can acquire permits, spending the limiters' limits, and read every limiter", "addr", cfg.Addr)
	}
	if cfg.Insecure && cfg.AdminToken == "" && cfg.exposed() {
		logger.Warn("LIMITD_INSECURE=true: listening beyond loopback without LIMITD_ADMIN_TOKEN; anyone who reaches this address can change limiters", "addr", cfg.Addr)
	}
	if cfg.ShadowMode {
		logger.Warn("LIMITD_SHADOW_MODE=true: every limiter is in shadow mode; acquires are counted but never refused")
	}

	var wg sync.WaitGroup
	bgCtx, stopBackground := context.WithCancel(context.Background())
	// Deferred calls run last first: stop the keeper, wait for it, and only
	// then close the store and Redis (deferred above).
	defer wg.Wait()
	defer stopBackground()
	if bootFile == nil && rm == nil {
		// Said once, at the start; requests then answer 503 (logged once per
		// run of failures) until Redis answers. With a boot file, its keeper
		// says it.
		pctx, cancel := context.WithTimeout(ctx, bootTimeout)
		if err := st.Ready(pctx); err != nil {
			logger.Warn("redis unavailable at start: requests answer 503 until it answers", "redis", redisTarget(cfg.RedisURL), "err", err)
		}
		cancel()
	}
	reg := prometheus.NewRegistry()
	// One observer counts every front end's decisions, in the registry
	// /metrics serves.
	// The ledger adds this process's decision counts to the Redis totals
	// every second, and a last time when the background stops.
	ledger := core.NewLedger(st, core.LedgerOptions{})
	wg.Go(func() { ledger.Run(bgCtx) })
	svc := core.New(st, core.Options{Shadow: cfg.ShadowMode, QuotaMode: cfg.GRPCQuota, OverLimitCache: cfg.GRPCOverLimitCache,
		Observer: coremetrics.New(reg), Ledger: ledger, Redis: rm.redisSettings()})
	var rls *grpcapi.Server
	if gln != nil {
		o := grpcapi.Options{
			Service: svc, Token: cfg.Token, AdminToken: cfg.AdminToken,
			Logger: logger, AccessLog: cfg.AccessLog, Registry: reg, Counting: cfg.counting(), NearRatio: cfg.GRPCNearRatio,
		}
		if bootFile != nil {
			o.Rules = bootFile.Rules
		}
		if ref != nil {
			if err := ref.start(&o, logger, reg); err != nil {
				return err
			}
		}
		if h, _, _ := net.SplitHostPort(cfg.GRPCAddr); cfg.Token == "" && !isLoopback(h) && rm == nil {
			logger.Warn("LIMITD_GRPC_ADDR listens beyond loopback without LIMITD_TOKEN: anyone who reaches it can spend the rules' limits", "grpc_addr", cfg.GRPCAddr)
		}
		rls = grpcapi.New(o)
		if ref != nil {
			ref.serve(bgCtx, &wg, rls, svc, logger)
		} else {
			wg.Go(func() { rls.Watch(bgCtx, grpcHealthEvery) })
		}
	}
	if bootFile == nil && rm == nil {
		// No configuration to keep, only limitd's marker in Redis: its
		// keeper tells when Redis lost limitd's data.
		k := boot.NewKeeper(nil, svc, logger)
		k.Interval, k.Timeout = bootCheckInterval, bootTimeout
		k.Boot(ctx)
		wg.Go(func() { k.Run(bgCtx) })
	}
	if bootFile != nil {
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		k := boot.NewKeeper(bootFile, svc, logger)
		k.Interval, k.Timeout, k.ReloadEvery, k.Hup = bootCheckInterval, bootTimeout, bootReloadEvery, hup
		if rls != nil {
			k.Reloaded = func(b *boot.File) { rls.SetRules(b.Rules) }
		}
		k.Boot(ctx)
		wg.Go(func() { k.Run(bgCtx) })
	}

	var handler *api.Handler
	if ln != nil {
		o := api.Options{
			Service:         svc,
			AdminToken:      cfg.AdminToken,
			Token:           cfg.Token,
			MetricsToken:    cfg.MetricsToken,
			Logger:          logger,
			AccessLog:       cfg.accessLog(),
			Registry:        reg,
			Version:         version,
			MaxEventStreams: cfg.EventsMaxStreams,
			EmbeddedRedis:   cfg.RedisURL == "",
			// BodyLimit, BodyTimeout and RequestTimeout: the API's defaults.
		}
		if tp != nil {
			o.TracerProvider, o.Propagator = tp.TracerProvider(), tp.Propagator()
		}
		handler = api.New(o)
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		IdleTimeout:       idleTimeout,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	var serveErr chan error // nil without the API: never ready
	if ln != nil {
		// The event streams' loop stops with the server; their streams end as
		// the shutdown starts, since they would not end on their own.
		defer handler.Close()
		srv.RegisterOnShutdown(handler.Close)
		wg.Go(func() { handler.Run(bgCtx) }) // the signals sampler, stopped with the keeper
		serveErr = make(chan error, 1)
		wg.Go(func() { serveErr <- srv.Serve(ln) })
	} else {
		// No API (limitd ratelimit without LIMITD_ADDR): the same sampler
		// feeds the limiters' gauges of the registry the reference's
		// metrics are served from.
		w := svc.NewWatcher(core.WatcherOptions{})
		reg.MustRegister(api.SignalMetrics(w, svc))
		wg.Go(func() { w.Run(bgCtx) })
	}
	var gsrv *grpc.Server
	grpcErr := make(chan error, 1)
	grpcAddr := ""
	if rls != nil {
		limits := grpcapi.Limits(cfg.GRPCLimits) // LIMITD_GRPC_*, checked by loadConfig
		opts, err := rls.ServerOptions(limits)
		if err != nil {
			srv.Close()
			return fmt.Errorf("gRPC limits: %w", err)
		}
		if ref != nil {
			opts = append(opts, ref.grpcOptions()...)
		}
		if tp != nil {
			opts = append(opts, tp.GRPCServer())
		}
		gsrv = grpc.NewServer(opts...)
		rls.Register(gsrv)
		grpcAddr = gln.Addr().String()
		wg.Go(func() { grpcErr <- gsrv.Serve(rls.Listener(gln, limits)) })
	}
	addr, readyAddr, dashboard := "", net.Addr(nil), ""
	if ln != nil {
		addr, readyAddr, dashboard = ln.Addr().String(), ln.Addr(), dashboardURL(ln.Addr().String())
	}
	attrs := []any{"addr", addr}
	if dashboard != "" {
		attrs = append(attrs, "dashboard", dashboard)
	}
	attrs = append(attrs, "grpc_addr", grpcAddr, "version", version, "redis", redisTarget(cfg.RedisURL),
		"prefix", cfg.Prefix, "admin_token", cfg.AdminToken != "", "token", cfg.Token != "", "metrics_token", cfg.MetricsToken != "")
	var refErr <-chan error
	if ref != nil {
		refErr = ref.errs
		attrs = append(attrs, ref.attrs()...)
		readyAddr = ref.http.Addr()
	}
	// The startup line shows whatever LIMITD_LOG_LEVEL is.
	cfg.announcer(logOut).Info("limitd serving", attrs...)
	if ready != nil {
		ready(readyAddr)
	}

	select {
	case err := <-serveErr:
		if gsrv != nil {
			gsrv.Stop()
		}
		return fmt.Errorf("http server: %w", err)
	case err := <-grpcErr:
		srv.Close()
		return fmt.Errorf("grpc server: %w", err)
	case err := <-refErr:
		srv.Close()
		if gsrv != nil {
			gsrv.Stop()
		}
		return err
	case <-ctx.Done():
	}
	if ref != nil {
		ref.shutdown() // /healthcheck fails from now on, as gRPC health does
	}
	logger.Info("shutting down", "timeout", shutdownTimeout)
	shutCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	grpcStopped := make(chan struct{})
	if gsrv != nil {
		// Health watchers hear NOT_SERVING first; calls in flight finish.
		rls.Shutdown()
		wg.Go(func() { gracefulStop(shutCtx, gsrv, logger); close(grpcStopped) })
	} else {
		close(grpcStopped)
	}
	if ref != nil {
		ref.stop(shutCtx)
	}
	if ln != nil {
		if err := srv.Shutdown(shutCtx); err != nil {
			logger.Warn("in-flight requests did not finish in time; closing their connections", "err", err)
			srv.Close()
		}
		if err := <-serveErr; err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("http server: %w", err)
		}
	}
	<-grpcStopped
	logger.Info("stopped")
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
