package main

// limitd bench: the flags, the usage and the wiring of internal/bench, the
// load and accuracy harness (the README's "limitd bench").

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/internal/bench"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

const benchUsage = `usage: limitd bench (--redis URL | --http URL) --limiter NAME [--create CONFIG_JSON_OR_SPEC]
                    [--workers 4] [--duration 10s | --permits N] [--mode pool|direct|http]
                    [--log FILE] [--json]

Drives permits through one limiter from --workers goroutines, each taking the
next permit as soon as it has the last one, and reports the rate they got,
every permit's lateness (start − scheduled) and the round trips it cost. Run
several bench processes on one limiter, each with --log, to check that they
share one schedule.

  --redis URL     the shared Redis, in any form LIMITD_REDIS_URL takes:
                  redis://[user:pw@]host:port[/db] (rediss:// for TLS) or
                  host:port, a single node;
                  redis://sentinel:26379?master_name=NAME&addr=sentinel2:26379
                  (&username=&password= for the master; user:pw@ are the
                  Sentinels'), the master the Sentinels name;
                  redis://[user:pw@]node:7000?addr=node2:7001&addr=node3:7002
                  or host:port,host:port,..., a cluster
  --http URL      a limitd server (http://host:port) instead; implies --mode http
  --limiter NAME  the limiter (or template instance) to take permits from
  --create CFG    create or replace the limiter first, with a JSON config
                  ('{"rate":2000,"burst":1}') or a rate spec ('2000,1'). Equal
                  configs change nothing, so every process may pass the same one
  --workers N     goroutines taking permits (default 4)
  --duration D    run for D (default 10s) ...
  --permits N     ... or until N permits were taken in total
  --mode M        pool   the client's local pools: one Redis call per grant of
                         many permits (the default with --redis)
                  direct one script call per permit (store.Acquire), then a
                         sleep until its start
                  http   one POST /v1/limiters/NAME/acquire per permit, then a
                         sleep until its start (the only mode with --http)
  --log FILE      one line per permit, "<scheduled_ns> <start_ns>": Unix ns on
                  the Redis clock, start being when the worker got the permit.
                  Lines are grouped per worker, not sorted
  --json          print one JSON object on stdout at the end and no progress:
                  {"mode","workers","permits","seconds","rate","target_rate",
                   "remote_calls","errors","lateness_ns":{"p50","p99","max"}}

Without --json a progress line goes to stderr every second and a summary to
stdout at the end. remote_calls counts grant and acquire round trips (not the
hand-backs of unused permits); errors counts failed ones, after which a worker
backs off briefly and goes on (in pool mode the client falls back by itself
while Redis is unreachable). SIGINT or SIGTERM ends the run early; the summary
is still printed. With --http, LIMITD_ADMIN_TOKEN (for --create) and
LIMITD_TOKEN are sent as bearer tokens.
`

func init() {
	register(&command{
		name:    "bench",
		summary: "drive permits through a shared limiter; report rate, lateness, round trips",
		usage:   benchUsage,
		run:     runBench,
	})
}

const (
	defaultBenchWorkers  = 4
	defaultBenchDuration = 10 * time.Second
	maxBenchWorkers      = 10_000
)

// benchOptions are the parsed command line.
type benchOptions struct {
	bench.Config
	redisURL string
}

// errHelp asks runBench to print the usage and succeed.
var errHelp = errors.New("help requested")

func parseBench(args []string) (*benchOptions, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors come back as values, printed once by main
	o := &benchOptions{}
	var create string
	fs.StringVar(&o.redisURL, "redis", "", "")
	fs.StringVar(&o.HTTPURL, "http", "", "")
	fs.StringVar(&o.Limiter, "limiter", "", "")
	fs.StringVar(&create, "create", "", "")
	fs.IntVar(&o.Workers, "workers", defaultBenchWorkers, "")
	fs.DurationVar(&o.Duration, "duration", defaultBenchDuration, "")
	fs.Int64Var(&o.Permits, "permits", 0, "")
	fs.StringVar(&o.Mode, "mode", "", "")
	fs.StringVar(&o.LogPath, "log", "", "")
	fs.BoolVar(&o.JSON, "json", false, "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, errHelp
		}
		return nil, usageErrorf("%v", err)
	}
	if fs.NArg() > 0 {
		return nil, usageErrorf("unexpected argument %q: bench takes only flags", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	switch {
	case o.redisURL == "" && o.HTTPURL == "":
		return nil, usageErrorf("--redis URL or --http URL is required")
	case o.redisURL != "" && o.HTTPURL != "":
		return nil, usageErrorf("--redis and --http exclude each other: give one")
	}
	if o.HTTPURL != "" {
		u, err := url.Parse(o.HTTPURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, usageErrorf("--http %q: want http://host:port or https://host:port", o.HTTPURL)
		}
		o.HTTPURL = strings.TrimRight(o.HTTPURL, "/")
	}
	if o.Limiter == "" {
		return nil, usageErrorf("--limiter NAME is required")
	}
	if err := limitd.CheckName(o.Limiter); err != nil {
		return nil, usageErrorf("--limiter: %v", err)
	}
	if o.Workers < 1 || o.Workers > maxBenchWorkers {
		return nil, usageErrorf("--workers must be from 1 to %d (got %d)", maxBenchWorkers, o.Workers)
	}
	if set["duration"] && set["permits"] {
		return nil, usageErrorf("--duration and --permits exclude each other: run for a time or for a number of permits")
	}
	if set["permits"] {
		if o.Permits < 1 {
			return nil, usageErrorf("--permits must be ≥ 1 (got %d)", o.Permits)
		}
		o.Duration = 0
	} else if o.Duration <= 0 {
		return nil, usageErrorf("--duration must be > 0 (got %v)", o.Duration)
	}
	if err := o.checkMode(); err != nil {
		return nil, err
	}
	if set["log"] && o.LogPath == "" {
		return nil, usageErrorf("--log needs a file name")
	}
	if set["create"] {
		c, body, err := parseCreate(create)
		if err != nil {
			return nil, usageErrorf("--create: %v", err)
		}
		o.Create, o.CreateBody = &c, body
	}
	return o, nil
}

// checkMode sets the default --mode and checks that it fits the target.
func (o *benchOptions) checkMode() error {
	switch o.Mode {
	case "":
		o.Mode = bench.ModePool
		if o.HTTPURL != "" {
			o.Mode = bench.ModeHTTP
		}
	case bench.ModePool, bench.ModeDirect:
		if o.redisURL == "" {
			return usageErrorf("--mode %s needs --redis: over --http only --mode http is available", o.Mode)
		}
	case bench.ModeHTTP:
		if o.HTTPURL == "" {
			return usageErrorf("--mode http needs --http URL")
		}
	default:
		return usageErrorf("--mode must be pool, direct or http (got %q)", o.Mode)
	}
	return nil
}

// parseCreate reads --create: the config and the body that creates it
// over HTTP.
func parseCreate(s string) (limiter.Config, []byte, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return limiter.Config{}, nil, errors.New(`empty: want a JSON config ('{"rate":2000,"burst":1}') or a rate spec ('2000,1')`)
	}
	var c limiter.Config
	body := []byte(s)
	if strings.HasPrefix(s, "{") {
		dec := json.NewDecoder(strings.NewReader(s))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			return limiter.Config{}, nil, fmt.Errorf("invalid JSON config: %w", err)
		}
		if dec.More() {
			return limiter.Config{}, nil, errors.New("invalid JSON config: text after the object")
		}
	} else {
		c = limiter.Config{Spec: s}
		body, _ = json.Marshal(c)
	}
	if _, _, err := c.Normalize(); err != nil {
		return limiter.Config{}, nil, err
	}
	return c, body, nil
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseBench(args)
	if errors.Is(err, errHelp) {
		_, err = io.WriteString(stdout, benchUsage)
		return err
	}
	if err != nil {
		return err
	}
	// The bench counts failed dials as errors: go-redis' lines are noise.
	redis.SetLogger(redisLog{slog.New(slog.DiscardHandler)})
	cfg := o.Config
	if o.redisURL != "" {
		rdb, err := store.NewClient(o.redisURL)
		if err != nil {
			return usageErrorf("--redis: %v", err)
		}
		defer rdb.Close()
		cfg.Redis = rdb
	}
	return bench.Run(ctx, cfg, stdout, stderr)
}
