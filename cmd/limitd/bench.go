package main

// limitd bench: the load and accuracy harness of shared/API.md. Workers take
// permits from one limiter as fast as it lets them, and the bench reports the
// rate they got, each permit's lateness (start − scheduled) and how many round
// trips it cost. Several bench processes on one limiter, each with --log,
// show whether the shared schedule holds across processes: merge the logs and
// count.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/bits"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limitd/limitd/client"
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

  --redis URL     the shared Redis: redis://host:port, rediss://host:port, or
                  host:port,host:port,... for a cluster
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

// Bench modes.
const (
	modePool   = "pool"
	modeDirect = "direct"
	modeHTTP   = "http"
)

const (
	defaultBenchWorkers  = 4
	defaultBenchDuration = 10 * time.Second
	maxBenchWorkers      = 10_000
	// benchBackoff is how long a worker waits after a failed call, so that a
	// refused connection does not become a busy loop.
	benchBackoff = 20 * time.Millisecond
	// benchSetupTimeout bounds creating the limiter and the first probes.
	benchSetupTimeout = 10 * time.Second
	// offsetProbes is how many round trips estimate the clock offset before
	// the run (the best of them is kept).
	offsetProbes = 5
)

// benchOptions are the parsed command line.
type benchOptions struct {
	redisURL, httpURL string
	name              string
	create            *limiter.Config
	createBody        []byte // the PUT body for --http
	workers           int
	duration          time.Duration // 0: until permits
	permits           int64         // 0: until duration
	mode              string
	logPath           string
	json              bool
}

// errHelp asks runBench to print the usage and succeed.
var errHelp = errors.New("help requested")

func parseBench(args []string) (*benchOptions, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors come back as values, printed once by main
	o := &benchOptions{}
	var create string
	fs.StringVar(&o.redisURL, "redis", "", "")
	fs.StringVar(&o.httpURL, "http", "", "")
	fs.StringVar(&o.name, "limiter", "", "")
	fs.StringVar(&create, "create", "", "")
	fs.IntVar(&o.workers, "workers", defaultBenchWorkers, "")
	fs.DurationVar(&o.duration, "duration", defaultBenchDuration, "")
	fs.Int64Var(&o.permits, "permits", 0, "")
	fs.StringVar(&o.mode, "mode", "", "")
	fs.StringVar(&o.logPath, "log", "", "")
	fs.BoolVar(&o.json, "json", false, "")
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
	case o.redisURL == "" && o.httpURL == "":
		return nil, usageErrorf("--redis URL or --http URL is required")
	case o.redisURL != "" && o.httpURL != "":
		return nil, usageErrorf("--redis and --http exclude each other: give one")
	}
	if o.httpURL != "" {
		u, err := url.Parse(o.httpURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, usageErrorf("--http %q: want http://host:port or https://host:port", o.httpURL)
		}
		o.httpURL = strings.TrimRight(o.httpURL, "/")
	}
	if o.name == "" {
		return nil, usageErrorf("--limiter NAME is required")
	}
	if err := store.CheckName(o.name); err != nil {
		return nil, usageErrorf("--limiter: %v", err)
	}
	if o.workers < 1 || o.workers > maxBenchWorkers {
		return nil, usageErrorf("--workers must be from 1 to %d (got %d)", maxBenchWorkers, o.workers)
	}
	if set["duration"] && set["permits"] {
		return nil, usageErrorf("--duration and --permits exclude each other: run for a time or for a number of permits")
	}
	if set["permits"] {
		if o.permits < 1 {
			return nil, usageErrorf("--permits must be ≥ 1 (got %d)", o.permits)
		}
		o.duration = 0
	} else if o.duration <= 0 {
		return nil, usageErrorf("--duration must be > 0 (got %v)", o.duration)
	}
	switch o.mode {
	case "":
		o.mode = modePool
		if o.httpURL != "" {
			o.mode = modeHTTP
		}
	case modePool, modeDirect:
		if o.redisURL == "" {
			return nil, usageErrorf("--mode %s needs --redis: over --http only --mode http is available", o.mode)
		}
	case modeHTTP:
		if o.httpURL == "" {
			return nil, usageErrorf("--mode http needs --http URL")
		}
	default:
		return nil, usageErrorf("--mode must be pool, direct or http (got %q)", o.mode)
	}
	if set["log"] && o.logPath == "" {
		return nil, usageErrorf("--log needs a file name")
	}
	if set["create"] {
		c, body, err := parseCreate(create)
		if err != nil {
			return nil, usageErrorf("--create: %v", err)
		}
		o.create, o.createBody = &c, body
	}
	return o, nil
}

// parseCreate reads --create: a JSON limiter config or a rate spec string. It
// returns the config and the body that creates it over HTTP.
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
	// go-redis logs failed dials on its own; the bench counts them as errors
	// and shows the last one, so its lines would only be noise.
	redis.SetLogger(silentRedisLog{})
	b := &bench{o: o, base: time.Now(), stderr: stderr}
	src, err := b.connect(ctx)
	if err != nil {
		return err
	}
	if o.logPath != "" {
		if b.log, err = openPermitLog(o.logPath); err != nil {
			src.close()
			return fmt.Errorf("--log: %w", err)
		}
	}
	res := b.run(ctx, src)
	// Unused permits that cannot be handed back (Redis gone, limiter
	// re-created) are only lost schedule time: a warning, not a failed run.
	if err := src.close(); err != nil {
		fmt.Fprintf(stderr, "limitd bench: handing back unused permits: %s\n", oneLine(err.Error()))
	}
	var logErr error
	if b.log != nil {
		if err := b.log.close(); err != nil {
			logErr = fmt.Errorf("--log %s: %w", o.logPath, err)
		}
	}
	if o.json {
		enc := json.NewEncoder(stdout)
		if err := enc.Encode(res); err != nil {
			return err
		}
	} else {
		b.printSummary(stdout, res)
	}
	if n := b.fallback(); n > 0 {
		fmt.Fprintf(stderr, "limitd bench: %d permits came from the client's local fallback while Redis was unreachable\n", n)
	}
	if res.Errors > 0 {
		fmt.Fprintf(stderr, "limitd bench: %d errors; the last: %s\n", res.Errors, oneLine(b.lastError()))
	}
	return logErr
}

type silentRedisLog struct{}

func (silentRedisLog) Printf(context.Context, string, ...any) {}

// bench is one run.
type bench struct {
	o      *benchOptions
	base   time.Time // local monotonic origin: local times are ns since base
	stderr io.Writer
	off0   int64   // Redis − local ns, from the probes before the run
	target float64 // the limiter's configured rate

	remote  atomic.Int64 // grant/acquire round trips
	errs    atomic.Int64
	claimed atomic.Int64 // permits claimed by workers, with --permits
	errMu   sync.Mutex
	lastErr error

	workers []*benchWorker
	log     *permitLog
}

func (b *bench) mono() int64 { return int64(time.Since(b.base)) }

func (b *bench) fail(err error) {
	b.errs.Add(1)
	b.errMu.Lock()
	b.lastErr = err
	b.errMu.Unlock()
}

func (b *bench) lastError() string {
	b.errMu.Lock()
	defer b.errMu.Unlock()
	if b.lastErr == nil {
		return ""
	}
	return b.lastErr.Error()
}

// benchSource takes one permit for a worker: it waits until the permit may
// start and returns its scheduled and start times, Unix ns on the Redis clock.
type benchSource interface {
	take(ctx context.Context, w *benchWorker) (sched, start int64, err error)
	close() error
}

// connect creates the limiter if asked, checks that it exists, estimates the
// clock offset and reads the target rate, and returns the mode's source.
func (b *bench) connect(ctx context.Context) (benchSource, error) {
	sctx, cancel := context.WithTimeout(ctx, benchSetupTimeout)
	defer cancel()
	if b.o.httpURL != "" {
		return b.connectHTTP(sctx)
	}
	rdb, err := store.NewClient(b.o.redisURL)
	if err != nil {
		return nil, usageErrorf("--redis: %v", err)
	}
	src, err := b.connectRedis(sctx, rdb)
	if err != nil {
		rdb.Close()
		return nil, err
	}
	return src, nil
}

func (b *bench) connectRedis(ctx context.Context, rdb redis.UniversalClient) (benchSource, error) {
	st := store.New(rdb)
	name := b.o.name
	if b.o.create != nil {
		if _, _, err := st.Put(ctx, name, *b.o.create); err != nil {
			return nil, fmt.Errorf("--create: %w", err)
		}
	}
	var est offsetEstimate
	for range offsetProbes {
		t0 := b.mono()
		w, err := st.Wait(ctx, name)
		t1 := b.mono()
		if errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("limiter %q does not exist: create it with --create or the API", name)
		}
		if err != nil {
			return nil, fmt.Errorf("--redis: limiter %q: %w", name, err)
		}
		b.off0 = est.sample(w.Now, t0, t1)
	}
	if info, err := st.Get(ctx, name); err == nil {
		b.target = configRate(info.Config)
	} else if tpl, err := st.Resolve(ctx, name); err == nil {
		b.target = configRate(tpl.Limiter)
	}
	switch b.o.mode {
	case modeDirect:
		return &directSource{b: b, st: st, rdb: rdb}, nil
	default:
		c := client.NewWithTransport(&countingTransport{Transport: client.NewStoreTransport(st), calls: &b.remote})
		l, err := c.Limiter(name)
		if err != nil {
			c.Close()
			return nil, err
		}
		return &poolSource{b: b, c: c, l: l, rdb: rdb}, nil
	}
}

// configRate is a config's rate in permits per second (0 if unreadable).
func configRate(c limiter.Config) float64 {
	n, _, err := c.Normalize()
	if err != nil {
		return 0
	}
	return n.Rate
}

// offsetEstimate turns Redis time into local time: each round trip gives
// offset = redis − local midpoint, wrong by at most half the round trip, and
// the estimate is the sample with the shortest round trip among the recent.
type offsetEstimate struct {
	rtt, off [16]int64
	n        int
}

func (e *offsetEstimate) sample(redisNow, t0, t1 int64) int64 {
	i := e.n % len(e.rtt)
	e.rtt[i], e.off[i] = t1-t0, redisNow-t0-(t1-t0)/2
	e.n++
	best := i
	for j := range min(e.n, len(e.rtt)) {
		if e.rtt[j] < e.rtt[best] {
			best = j
		}
	}
	return e.off[best]
}

// run starts the workers and the progress line and waits for the end.
func (b *bench) run(ctx context.Context, src benchSource) benchResult {
	runCtx, cancel := ctx, context.CancelFunc(func() {})
	if b.o.duration > 0 {
		runCtx, cancel = context.WithTimeout(ctx, b.o.duration)
	}
	defer cancel()
	b.workers = make([]*benchWorker, b.o.workers)
	for i := range b.workers {
		b.workers[i] = &benchWorker{b: b, off: b.off0, est: offsetEstimate{}}
		if b.log != nil {
			b.workers[i].batch = b.log.batch()
		}
	}
	start := b.mono()
	var wg sync.WaitGroup
	for _, w := range b.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.loop(runCtx, src)
		}()
	}
	done := make(chan struct{})
	var pwg sync.WaitGroup
	if !b.o.json {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			b.progress(done, start)
		}()
	}
	wg.Wait()
	end := b.mono()
	close(done)
	pwg.Wait()
	for _, w := range b.workers {
		if b.log != nil {
			b.log.send(w.batch)
			w.batch = nil
		}
	}
	return b.result(float64(end-start) / 1e9)
}

// benchWorker is one goroutine taking permits. Its histogram and counters are
// written by it alone and read atomically by the progress line.
type benchWorker struct {
	b        *bench
	hist     latencyHist
	fallback atomic.Int64 // permits from the client's local fallback
	off      int64        // Redis − local ns, the latest estimate
	est      offsetEstimate
	batch    []int64 // log records not yet handed to the writer: sched, start, ...
}

func (w *benchWorker) loop(ctx context.Context, src benchSource) {
	b := w.b
	for ctx.Err() == nil {
		if b.o.permits > 0 && b.claimed.Add(1) > b.o.permits {
			return
		}
		sched, start, err := src.take(ctx, w)
		if err != nil {
			if b.o.permits > 0 {
				b.claimed.Add(-1)
			}
			if ctx.Err() != nil || errors.Is(err, limiter.ErrDeadline) {
				return // the run is over: the next permit starts after its end
			}
			b.fail(err)
			_ = sleepFor(ctx, benchBackoff)
			continue
		}
		w.hist.add(start - sched)
		if w.batch != nil {
			w.batch = append(w.batch, sched, start)
			if len(w.batch) == cap(w.batch) {
				b.log.send(w.batch)
				w.batch = b.log.batch()
			}
		}
	}
}

// await sleeps until a decision's start (Redis time) on the local clock and
// returns the permit's times; t0 and t1 are the local times around the call
// that returned the decision, made at Redis time now.
func (w *benchWorker) await(ctx context.Context, sched, start, now, t0, t1 int64) (int64, int64, error) {
	off := w.est.sample(now, t0, t1)
	w.off = off
	if err := sleepFor(ctx, time.Duration(start-off-w.b.mono())); err != nil {
		return 0, 0, err
	}
	// The worker got the permit now; it cannot have got it before the start
	// the schedule gave it, whatever the offset's error.
	return sched, max(w.b.mono()+off, start), nil
}

func sleepFor(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// poolSource takes permits through the client's local pool.
type poolSource struct {
	b   *bench
	c   *client.Client
	l   *client.Limiter
	rdb redis.UniversalClient
}

func (s *poolSource) take(ctx context.Context, w *benchWorker) (int64, int64, error) {
	p, err := s.l.Wait(ctx)
	if err != nil {
		return 0, 0, err
	}
	now := s.b.mono()
	if p.Shared {
		start := p.Start.UnixNano()
		w.off = start - now
		return p.Scheduled.UnixNano(), start, nil
	}
	// From the local fallback: its times are on the local clock. Convert them
	// with the offset of the last shared permit (or of the probes).
	w.fallback.Add(1)
	return int64(p.Scheduled.Sub(s.b.base)) + w.off, now + w.off, nil
}

func (s *poolSource) close() error {
	err := s.c.Close()
	s.rdb.Close()
	return err
}

// countingTransport is the client's Redis transport, counting grants.
type countingTransport struct {
	client.Transport
	calls *atomic.Int64
}

func (t *countingTransport) Grant(ctx context.Context, name string, k int64, maxWait time.Duration) (store.Grant, error) {
	t.calls.Add(1)
	return t.Transport.Grant(ctx, name, k, maxWait)
}

// directSource makes one acquire script call per permit.
type directSource struct {
	b   *bench
	st  *store.Store
	rdb redis.UniversalClient
}

func (s *directSource) take(ctx context.Context, w *benchWorker) (int64, int64, error) {
	t0 := s.b.mono()
	d, err := s.st.Acquire(ctx, s.b.o.name, 1, store.Forever)
	t1 := s.b.mono()
	s.b.remote.Add(1)
	if err != nil {
		return 0, 0, err
	}
	if !d.Granted {
		return 0, 0, fmt.Errorf("limiter %q denied a request without a max wait", s.b.o.name)
	}
	return w.await(ctx, d.Scheduled, d.Start, d.Now, t0, t1)
}

func (s *directSource) close() error { return s.rdb.Close() }

// httpSource makes one POST .../acquire per permit over kept-alive connections.
type httpSource struct {
	b          *bench
	hc         *http.Client
	acquireURL string
	token      string
}

var acquireBody = []byte(`{"permits":1}`)

func (b *bench) connectHTTP(ctx context.Context) (benchSource, error) {
	hc := &http.Client{Transport: &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        b.o.workers + 4,
		MaxIdleConnsPerHost: b.o.workers + 4,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}}
	limURL := b.o.httpURL + "/v1/limiters/" + url.PathEscape(b.o.name)
	token := os.Getenv("LIMITD_TOKEN")
	fail := func(err error) (benchSource, error) {
		hc.CloseIdleConnections()
		return nil, err
	}
	if b.o.create != nil {
		var view struct{}
		if _, err := httpJSON(ctx, hc, http.MethodPut, limURL, os.Getenv("LIMITD_ADMIN_TOKEN"), b.o.createBody, &view); err != nil {
			return fail(fmt.Errorf("--create: %w", err))
		}
	}
	var est offsetEstimate
	for range offsetProbes {
		var w struct {
			Now int64 `json:"now_ns"`
		}
		t0 := b.mono()
		status, err := httpJSON(ctx, hc, http.MethodGet, limURL+"/wait", token, nil, &w)
		t1 := b.mono()
		if status == http.StatusNotFound {
			return fail(fmt.Errorf("limiter %q does not exist: create it with --create or the API", b.o.name))
		}
		if err != nil {
			return fail(fmt.Errorf("--http: limiter %q: %w", b.o.name, err))
		}
		b.off0 = est.sample(w.Now, t0, t1)
	}
	var view struct {
		Config limiter.Config `json:"config"`
	}
	if _, err := httpJSON(ctx, hc, http.MethodGet, limURL, token, nil, &view); err == nil {
		b.target = configRate(view.Config)
	}
	return &httpSource{b: b, hc: hc, acquireURL: limURL + "/acquire", token: token}, nil
}

// httpJSON makes one request and decodes a 2xx answer into out. Any other
// status is an error carrying the problem's detail.
func httpJSON(ctx context.Context, hc *http.Client, method, u, token string, body []byte, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return 0, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer drainClose(resp.Body)
	if resp.StatusCode/100 != 2 {
		return resp.StatusCode, httpProblem(resp)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return resp.StatusCode, fmt.Errorf("%s %s: reading the answer: %w", method, u, err)
	}
	return resp.StatusCode, nil
}

// drainClose reads what is left of a body so the connection is reused.
func drainClose(rc io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(rc, 64<<10))
	rc.Close()
}

// httpProblem is the error of a non-2xx answer: its status and the problem's
// detail (RFC 9457) or title.
func httpProblem(resp *http.Response) error {
	var p struct{ Title, Detail string }
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	_ = json.Unmarshal(data, &p)
	msg := p.Detail
	if msg == "" {
		msg = p.Title
	}
	if msg == "" {
		msg = strings.TrimSpace(string(data))
	}
	return fmt.Errorf("%s %s: %s: %s", resp.Request.Method, resp.Request.URL.Path, resp.Status, msg)
}

func (s *httpSource) take(ctx context.Context, w *benchWorker) (int64, int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.acquireURL, bytes.NewReader(acquireBody))
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	t0 := s.b.mono()
	resp, err := s.hc.Do(req)
	t1 := s.b.mono()
	s.b.remote.Add(1)
	if err != nil {
		return 0, 0, err
	}
	defer drainClose(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return 0, 0, httpProblem(resp)
	}
	var g struct {
		Granted   bool  `json:"granted"`
		Scheduled int64 `json:"scheduled_ns"`
		Start     int64 `json:"start_ns"`
		Now       int64 `json:"now_ns"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&g); err != nil {
		return 0, 0, fmt.Errorf("POST %s: reading the answer: %w", s.acquireURL, err)
	}
	if !g.Granted {
		return 0, 0, fmt.Errorf("POST %s: answered 200 without a grant", s.acquireURL)
	}
	return w.await(ctx, g.Scheduled, g.Start, g.Now, t0, t1)
}

func (s *httpSource) close() error {
	s.hc.CloseIdleConnections()
	return nil
}

// benchResult is the --json object of shared/API.md, field for field.
type benchResult struct {
	Mode        string  `json:"mode"`
	Workers     int     `json:"workers"`
	Permits     int64   `json:"permits"`
	Seconds     float64 `json:"seconds"`
	Rate        float64 `json:"rate"`
	TargetRate  float64 `json:"target_rate"`
	RemoteCalls int64   `json:"remote_calls"`
	Errors      int64   `json:"errors"`
	Lateness    struct {
		P50 int64 `json:"p50"`
		P99 int64 `json:"p99"`
		Max int64 `json:"max"`
	} `json:"lateness_ns"`
}

func (b *bench) result(seconds float64) benchResult {
	var counts histCounts
	var maxLate int64
	for _, w := range b.workers {
		w.hist.addTo(&counts)
		maxLate = max(maxLate, w.hist.max.Load())
	}
	r := benchResult{Mode: b.o.mode, Workers: b.o.workers, Permits: counts.total(), Seconds: seconds,
		TargetRate: b.target, RemoteCalls: b.remote.Load(), Errors: b.errs.Load()}
	if seconds > 0 {
		r.Rate = float64(r.Permits) / seconds
	}
	r.Lateness.P50 = min(counts.quantile(0.50), maxLate)
	r.Lateness.P99 = min(counts.quantile(0.99), maxLate)
	r.Lateness.Max = maxLate
	return r
}

func (b *bench) fallback() int64 {
	var n int64
	for _, w := range b.workers {
		n += w.fallback.Load()
	}
	return n
}

// progress prints a line on stderr every second until done: permits so far,
// and the rate and p99 lateness of the last second.
func (b *bench) progress(done <-chan struct{}, start int64) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var prev histCounts
	prevN, prevT := int64(0), start
	for {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		var cur histCounts
		for _, w := range b.workers {
			w.hist.addTo(&cur)
		}
		now := b.mono()
		n := cur.total()
		var last histCounts
		for i := range last {
			last[i] = cur[i] - prev[i]
		}
		rate := float64(n-prevN) / (float64(now-prevT) / 1e9)
		line := fmt.Sprintf("limitd bench: %4.0fs  %d permits  %.1f/s  p99 lateness %v",
			float64(now-start)/1e9, n, rate, fmtNs(last.quantile(0.99)))
		if e := b.errs.Load(); e > 0 {
			line += fmt.Sprintf("  errors %d (last: %s)", e, oneLine(b.lastError()))
		}
		if f := b.fallback(); f > 0 {
			line += fmt.Sprintf("  fallback permits %d", f)
		}
		fmt.Fprintln(b.stderr, line)
		prev, prevN, prevT = cur, n, now
	}
}

func (b *bench) printSummary(out io.Writer, r benchResult) {
	target := "unknown"
	pct := ""
	if r.TargetRate > 0 {
		target = strconv.FormatFloat(r.TargetRate, 'g', -1, 64) + "/s"
		pct = fmt.Sprintf(" (%.2f%% of the target)", 100*r.Rate/r.TargetRate)
	}
	fmt.Fprintf(out, "limitd bench: %s mode, %d workers, limiter %q, target %s\n", r.Mode, r.Workers, b.o.name, target)
	fmt.Fprintf(out, "  permits       %d in %.3fs: %.1f/s%s\n", r.Permits, r.Seconds, r.Rate, pct)
	fmt.Fprintf(out, "  lateness      p50 %v  p99 %v  max %v\n", fmtNs(r.Lateness.P50), fmtNs(r.Lateness.P99), fmtNs(r.Lateness.Max))
	per := ""
	if r.RemoteCalls > 0 {
		per = fmt.Sprintf(" (%.1f permits per call)", float64(r.Permits)/float64(r.RemoteCalls))
	}
	fmt.Fprintf(out, "  remote calls  %d%s\n", r.RemoteCalls, per)
	fmt.Fprintf(out, "  errors        %d\n", r.Errors)
}

// fmtNs shows a duration in ns rounded to what a reader needs.
func fmtNs(ns int64) time.Duration {
	d := time.Duration(ns)
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(time.Microsecond)
	default:
		return d
	}
}

// latencyHist is a log-linear histogram of lateness in ns: exact below 128 ns,
// then 64 buckets per power of two (relative error under 1/128 at the bucket's
// middle). One goroutine writes it; others read it with atomic loads, so the
// hot path costs one uncontended atomic add.
type latencyHist struct {
	counts [histBuckets]atomic.Uint64
	max    atomic.Int64
}

const (
	histSubBits = 6
	histSub     = 1 << histSubBits             // buckets per power of two
	histBuckets = (64 - histSubBits) * histSub // the last holds MaxInt64
)

type histCounts [histBuckets]uint64

func histBucket(v int64) int {
	if v < 2*histSub {
		return int(max(v, 0))
	}
	e := bits.Len64(uint64(v)) - histSubBits - 1 // v>>e in [histSub, 2·histSub)
	return e*histSub + int(v>>e)
}

// histValue is the middle of bucket i.
func histValue(i int) int64 {
	if i < 2*histSub {
		return int64(i)
	}
	e := i/histSub - 1
	m := int64(i - e*histSub)
	return m<<e + (int64(1)<<e)/2
}

func (h *latencyHist) add(v int64) {
	v = max(v, 0)
	h.counts[histBucket(v)].Add(1)
	if v > h.max.Load() {
		h.max.Store(v) // one writer: no compare-and-swap needed
	}
}

func (h *latencyHist) addTo(c *histCounts) {
	for i := range h.counts {
		c[i] += h.counts[i].Load()
	}
}

func (c *histCounts) total() int64 {
	var n uint64
	for _, v := range c {
		n += v
	}
	return int64(n)
}

// quantile returns the value below which a fraction q of the samples lie.
func (c *histCounts) quantile(q float64) int64 {
	n := c.total()
	if n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(n)))
	var seen uint64
	for i, v := range c {
		seen += v
		if seen >= max(rank, 1) {
			return histValue(i)
		}
	}
	return histValue(len(c) - 1)
}

// permitLog writes --log lines from one goroutine: workers hand it full
// batches of records, so a permit costs them an append.
type permitLog struct {
	f    *os.File
	ch   chan []int64 // full batches, to write
	free chan []int64 // written batches, to reuse
	done chan struct{}
	err  error
}

const (
	logBatch  = 4096 // int64s per batch: 2048 permits
	logBuffer = 1 << 20
)

func openPermitLog(path string) (*permitLog, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	l := &permitLog{f: f, ch: make(chan []int64, 64), free: make(chan []int64, 64), done: make(chan struct{})}
	go l.write()
	return l, nil
}

func (l *permitLog) batch() []int64 {
	select {
	case b := <-l.free:
		return b[:0]
	default:
		return make([]int64, 0, logBatch)
	}
}

func (l *permitLog) send(b []int64) {
	if len(b) > 0 {
		l.ch <- b
	}
}

func (l *permitLog) write() {
	defer close(l.done)
	w := bufio.NewWriterSize(l.f, logBuffer)
	line := make([]byte, 0, 48)
	for b := range l.ch {
		for i := 0; i+1 < len(b); i += 2 {
			line = strconv.AppendInt(line[:0], b[i], 10)
			line = append(line, ' ')
			line = strconv.AppendInt(line, b[i+1], 10)
			line = append(line, '\n')
			if _, err := w.Write(line); err != nil && l.err == nil {
				l.err = err
			}
		}
		select {
		case l.free <- b:
		default:
		}
	}
	if err := w.Flush(); err != nil && l.err == nil {
		l.err = err
	}
}

// close writes what is left and closes the file.
func (l *permitLog) close() error {
	close(l.ch)
	<-l.done
	if err := l.f.Close(); err != nil && l.err == nil {
		l.err = err
	}
	return l.err
}
