package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/grpcapi"
	"github.com/limitd/limitd/internal/boot"
	"github.com/limitd/limitd/internal/certfiles"
	"github.com/limitd/limitd/internal/refenv"
	"github.com/limitd/limitd/internal/xds"
)

// refBinary is the name the reference server's binary has in its image
// (/bin/ratelimit): limitd invoked by it serves as limitd ratelimit.
const refBinary = "ratelimit"

func init() {
	register(&command{
		name:    "ratelimit",
		summary: "serve Envoy's rate limit service configured as the reference server is",
		usage: `usage: limitd ratelimit

Serves Envoy's rate limit service (gRPC) the way the reference rate limit
server (github.com/envoyproxy/ratelimit) does, configured by its environment
variables, so that limitd runs where it runs: as the envoy-ratelimit
Deployment of Envoy Gateway, or from a manifest or Helm chart written for it.
Invoked as ` + refBinary + ` (the reference's binary name, /bin/ratelimit in
limitd's image), limitd serves this way with no arguments.

The rules are the reference's config files in RUNTIME_ROOT/
RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY (CONFIG_TYPE=FILE, the default:
every *.yaml there is one domain, read again every 3 s and on SIGHUP), or
RateLimitConfig resources over xDS (CONFIG_TYPE=GRPC_XDS_SOTW, from
CONFIG_GRPC_XDS_SERVER_URL). Redis is REDIS_URL (REDIS_TYPE single, sentinel
or cluster). GRPC_HOST:GRPC_PORT serves gRPC, HOST:PORT /healthcheck and
/json, DEBUG_HOST:DEBUG_PORT /rlconfig, /stats and /debug/pprof/, and with
USE_PROMETHEUS=true, PROMETHEUS_ADDR serves the metrics under limitd's names
and the reference's.

A reference variable limitd does not implement is named at start as ignored,
or refused (exit 1); docs/envoy.md, "limitd as the reference server", has the table
of every one. LIMITD_* variables apply too where the reference has none
(LIMITD_TOKEN, the LIMITD_GRPC_* bounds); with LIMITD_ADMIN_TOKEN set,
limitd's own HTTP API listens on LIMITD_ADDR as well (a port other than PORT).
`,
		run: func(ctx context.Context, args []string, _, stderr io.Writer) error {
			if len(args) > 0 {
				return usageErrorf("ratelimit takes no arguments, only environment variables (got %q)", args[0])
			}
			return serveRatelimit(ctx, serveEnviron(), stderr, nil)
		},
	})
}

// refMode is limitd ratelimit's part of serve: what the reference's
// variables ask beyond the LIMITD_* ones they set (internal/refenv), and
// the reloads of the certificate files they name.
type refMode struct {
	*refenv.Env
	certs *certEvents
}

// serveRatelimit is limitd ratelimit: serve configured by the reference's
// environment.
func serveRatelimit(ctx context.Context, environ map[string]string, logOut io.Writer, ready func(net.Addr)) error {
	env2, rm, err := ratelimitEnv(environ)
	if err != nil {
		return err
	}
	return serve(ctx, env2, logOut, ready, rm)
}

// ratelimitEnv reads the reference's variables: the environment with the
// LIMITD_* variables they set, and the rest of what they ask.
func ratelimitEnv(environ map[string]string) (map[string]string, *refMode, error) {
	certs := newCertEvents()
	out, e, err := refenv.Parse(environ, certfiles.Options{Loaded: certs.loaded})
	if err != nil {
		return nil, nil, err
	}
	return out, &refMode{Env: e, certs: certs}, nil
}

// rename words an error of a LIMITD_* variable that a reference variable
// set under the reference's name (limitd serve, rm nil: as it is).
func (rm *refMode) rename(err error) error {
	if rm == nil {
		return err
	}
	return rm.Rename(err)
}

// certEvents tells of the reloads of certificate files (certfiles.Options.
// Loaded): a log line each, and limitd_tls_reloads_total{file,result}.
type certEvents struct {
	log     atomic.Pointer[slog.Logger] // nil until serving: no handshake before
	reloads *prometheus.CounterVec
}

func newCertEvents() *certEvents {
	return &certEvents{reloads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "limitd_tls_reloads_total",
		Help: "Certificate files read again after they changed (file: the certificate's or the CA's), by result: ok, or error (the files before still serve)."},
		[]string{"file", "result"})}
}

func (c *certEvents) loaded(file string, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	c.reloads.WithLabelValues(file, result).Inc()
	log := c.log.Load()
	switch {
	case log == nil:
	case err != nil:
		log.Error("tls: certificate files changed and do not load; the ones before still serve", "file", file, "err", err)
	default:
		log.Info("tls: certificate files changed: reloaded", "file", file)
	}
}

// refRun is limitd ratelimit while it serves: the reference's ports, its
// rules' source and its health.
type refRun struct {
	rm                *refMode
	http, debug, prom net.Listener // prom: nil without USE_PROMETHEUS
	servers           []*http.Server
	errs              chan error // a port's server failed
	hup               chan os.Signal

	log      *slog.Logger
	reg      *prometheus.Registry
	initial  *boot.File // the rules read at start (nil: none)
	rls      *grpcapi.Server
	rules    atomic.Pointer[boot.File] // the rules answering (nil: none yet)
	redisBad atomic.Bool               // REDIS_HEALTH_CHECK_ACTIVE_CONNECTION: Redis failed its last check
	stopping atomic.Bool
	healthy  atomic.Bool
	healthMu sync.Mutex // orders the health updates

	loadOK, loadBad prometheus.Counter
}

// listen opens the reference's ports (see server.listen).
func (rm *refMode) listen() (*refRun, error) {
	r := &refRun{rm: rm, errs: make(chan error, 3)}
	var err error
	if r.http, err = net.Listen("tcp", net.JoinHostPort(rm.Settings.Host, strconv.Itoa(int(rm.Settings.Port)))); err != nil {
		return nil, fmt.Errorf("PORT: %w", err)
	}
	if r.debug, err = net.Listen("tcp", net.JoinHostPort(rm.Settings.DebugHost, strconv.Itoa(int(rm.Settings.DebugPort)))); err != nil {
		r.close()
		return nil, fmt.Errorf("DEBUG_PORT: %w", err)
	}
	if rm.Settings.UsePrometheus {
		if r.prom, err = net.Listen("tcp", rm.Settings.PrometheusAddr); err != nil {
			r.close()
			return nil, fmt.Errorf("PROMETHEUS_ADDR: %w", err)
		}
	}
	return r, nil
}

// redisSettings names the variables that give limitd its Redis, for the
// fixes of a Redis that cannot serve (zero: LIMITD_REDIS_URL).
func (rm *refMode) redisSettings() core.RedisSettings {
	if rm == nil || rm.Origin("LIMITD_REDIS_URL") == "" {
		return core.RedisSettings{}
	}
	return core.RedisSettings{Address: "REDIS_URL", Credentials: "REDIS_AUTH"}
}

// redisTLSConfig is what REDIS_TLS_* add to a rediss:// URL (nil: nothing).
func (rm *refMode) redisTLSConfig() *tls.Config {
	if rm == nil {
		return nil
	}
	return rm.RedisTLS
}

// start reads the first rules and sets the gRPC front end's options to
// the reference's.
func (r *refRun) start(o *grpcapi.Options, log *slog.Logger, reg *prometheus.Registry) error {
	r.log, r.reg = log, reg
	o.ReferenceMetrics, o.Headers, o.WaitForRules = true, r.rm.Headers, true
	r.loadOK = promauto.With(reg).NewCounter(prometheus.CounterOpts{Name: "ratelimit_service_config_load_success",
		Help: "The reference server's config_load_success: rules loaded (from the runtime directory or over xDS)."})
	r.loadBad = promauto.With(reg).NewCounter(prometheus.CounterOpts{Name: "ratelimit_service_config_load_error",
		Help: "The reference server's config_load_error: rules refused (a runtime directory that does not parse, an xDS update NACKed)."})
	reg.MustRegister(r.rm.certs.reloads)
	r.rm.certs.log.Store(log)
	// As the reference's default registry (the API may have added them).
	_ = reg.Register(collectors.NewGoCollector())
	_ = reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if r.rm.XDS {
		return nil
	}
	dir := r.rm.Dir.Dir
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("RUNTIME_ROOT: %s is not a directory (RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY holds the rules' files with CONFIG_TYPE=FILE)", dir)
	}
	f, err := boot.LoadDir(r.rm.Dir)
	if err != nil {
		r.loadBad.Inc()
		log.Error("the runtime directory is invalid: no rules until it is fixed", "dir", dir, "err", err)
		return nil
	}
	r.initial = f
	o.Rules = f.Rules
	r.rules.Store(f)
	r.loadOK.Inc()
	return nil
}

// serve starts the rules' keeper and source, the health and the ports.
func (r *refRun) serve(ctx context.Context, wg *sync.WaitGroup, rls *grpcapi.Server, svc *core.Service, log *slog.Logger) {
	r.rls = rls
	k := boot.NewKeeper(r.initial, svc, log)
	k.Reloaded = r.loaded
	k.Invalid = func(error) { r.loadBad.Inc() }
	if r.rm.XDS {
		k.What = "the rules from xDS"
		o := r.rm.XDSOptions()
		o.Log, o.Apply = log, k.Set
		o.Rejected = func(error) { r.loadBad.Inc() }
		wg.Go(func() { xds.Run(ctx, o) })
	} else {
		k.What, k.Source, k.ReloadEvery = "the runtime directory", r.rm.Dir, bootReloadEvery
		r.hup = make(chan os.Signal, 1)
		signal.Notify(r.hup, syscall.SIGHUP)
		k.Hup = r.hup
	}
	k.Boot(ctx)
	wg.Go(func() { k.Run(ctx) })
	r.updateHealth()
	if r.rm.Settings.RedisHealthCheck {
		wg.Go(func() { r.watchRedis(ctx, svc) })
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthcheck", r.healthcheck)
	mux.Handle("POST /json", r.rls.JSONHandler())
	r.run(wg, r.http, mux)
	dbg := http.NewServeMux()
	dbg.HandleFunc("GET /rlconfig", r.rlconfig)
	dbg.Handle("GET /stats", promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{}))
	dbg.HandleFunc("/debug/pprof/", pprof.Index)
	dbg.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	dbg.HandleFunc("/debug/pprof/profile", pprof.Profile)
	dbg.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	dbg.HandleFunc("/debug/pprof/trace", pprof.Trace)
	r.run(wg, r.debug, dbg)
	if r.prom != nil {
		pm := http.NewServeMux()
		pm.Handle("GET "+r.rm.Settings.PrometheusPath, promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{}))
		r.run(wg, r.prom, pm)
	}
}

func (r *refRun) run(wg *sync.WaitGroup, ln net.Listener, h http.Handler) {
	srv := httpServer(h, r.log)
	r.servers = append(r.servers, srv)
	wg.Go(func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			r.errs <- fmt.Errorf("http server on %s: %w", ln.Addr(), err)
		}
	})
}

// loaded is told of new rules: they answer from now on.
func (r *refRun) loaded(f *boot.File) {
	r.rules.Store(f)
	r.rls.SetRules(f.Rules)
	r.loadOK.Inc()
	r.updateHealth()
}

// updateHealth sets gRPC health and /healthcheck as the reference's
// variables say (docs/envoy.md).
func (r *refRun) updateHealth() {
	r.healthMu.Lock()
	defer r.healthMu.Unlock()
	s, f := r.rm.Settings, r.rules.Load()
	ok := !r.stopping.Load() &&
		(s.ForceStart || f != nil) &&
		(!s.HealthyWithConfig || f != nil && f.Rules.Domains() > 0) &&
		(!s.RedisHealthCheck || !r.redisBad.Load())
	r.healthy.Store(ok)
	if r.rls != nil {
		r.rls.SetServing(ok)
	}
}

// watchRedis checks Redis every grpcHealthEvery until ctx ends.
func (r *refRun) watchRedis(ctx context.Context, svc *core.Service) {
	for {
		cctx, cancel := context.WithTimeout(ctx, grpcHealthEvery)
		err := svc.Ready(cctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if r.redisBad.Swap(err != nil) != (err != nil) {
			r.updateHealth()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(grpcHealthEvery):
		}
	}
}

// healthcheck answers as the reference's: 200 OK while healthy, else 500.
func (r *refRun) healthcheck(w http.ResponseWriter, _ *http.Request) {
	if !r.healthy.Load() {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	_, _ = io.WriteString(w, "OK")
}

// rlconfig shows the rules answering as the reference does (a line per
// rule); ?format=json adds their source and each rule's template and limiter.
func (r *refRun) rlconfig(w http.ResponseWriter, req *http.Request) {
	f := r.rules.Load()
	if req.URL.Query().Get("format") != "json" {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if f != nil {
			_, _ = io.WriteString(w, f.Rules.Dump())
		}
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if f == nil {
		_, _ = io.WriteString(w, `{"loaded":false}`+"\n")
		return
	}
	type rule struct {
		Name     string `json:"name"` // as the reference names it: the domain and the descriptors' path
		Template string `json:"template"`
		Limiter  any    `json:"limiter"`
	}
	v := struct {
		Loaded  bool   `json:"loaded"`
		Source  string `json:"source"`
		Sum     string `json:"sum"`
		Domains int    `json:"domains"`
		Rules   int    `json:"rules"`
		Limits  []rule `json:"limits"`
	}{Loaded: true, Source: f.Path, Sum: f.Sum, Domains: f.Rules.Domains(), Rules: f.Rules.Len()}
	for _, t := range f.Templates {
		v.Limits = append(v.Limits, rule{t.Description, t.ID, t.Limiter})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// grpcOptions are the gRPC server's options of GRPC_SERVER_USE_TLS.
func (r *refRun) grpcOptions() []grpc.ServerOption {
	if r.rm.GRPCTLS == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.Creds(credentials.NewTLS(r.rm.GRPCTLS))}
}

// attrs are the startup line's.
func (r *refRun) attrs() []any {
	a := []any{"mode", "ratelimit", "http_addr", r.http.Addr().String(), "debug_addr", r.debug.Addr().String()}
	if r.prom != nil {
		a = append(a, "metrics_addr", r.prom.Addr().String())
	}
	if r.rm.XDS {
		return append(a, "config", "xds", "xds_server", r.rm.Settings.XDSServerURL, "node", r.rm.Settings.XDSNodeID)
	}
	return append(a, "config", "file", "dir", r.rm.Dir.Dir)
}

// shutdown makes the health fail as the stop starts.
func (r *refRun) shutdown() {
	r.stopping.Store(true)
	r.updateHealth()
}

func (r *refRun) stop(ctx context.Context) {
	for _, s := range r.servers {
		if err := s.Shutdown(ctx); err != nil {
			s.Close()
		}
	}
}

// close releases what listen and serve took.
func (r *refRun) close() {
	for _, ln := range []net.Listener{r.http, r.debug, r.prom} {
		if ln != nil {
			ln.Close()
		}
	}
	if r.hup != nil {
		signal.Stop(r.hup)
	}
}
