package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/limitd/limitd/internal/certfiles"
	"github.com/limitd/limitd/internal/refenv"
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
