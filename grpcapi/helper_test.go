package grpcapi

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"gopkg.in/yaml.v3"

	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/envoyrules"
	"github.com/limitd/limitd/internal/testkit/redistest"
	"github.com/limitd/limitd/store"
)

// t0 is a whole second, 9 s into a minute: a window of a second resets in
// 1 s, of a minute in 51 s, of an hour in 51 min 51 s.
var t0 = time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)

// env is a Server over miniredis, reached through a real gRPC client.
type env struct {
	t      *testing.T
	mini   *miniredis.Miniredis
	rdb    redis.UniversalClient
	st     *store.Store
	svc    *core.Service
	srv    *Server
	reg    *prometheus.Registry
	client rlv3.RateLimitServiceClient
	conn   *grpc.ClientConn
	now    time.Time
}

// parseDomains decodes a boot file's domains: list strictly, as the boot
// file does.
func parseDomains(t *testing.T, src string) []envoyrules.Domain {
	t.Helper()
	var doc struct {
		Domains []envoyrules.Domain `yaml:"domains"`
	}
	dec := yaml.NewDecoder(bytes.NewReader([]byte(src)))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("domains: %v", err)
	}
	return doc.Domains
}

// compile compiles a domains: list, failing the test on an error.
func compile(t *testing.T, src string) *envoyrules.Rules {
	t.Helper()
	r, err := envoyrules.Compile(parseDomains(t, src))
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	return r
}

// reference turns one of the reference server's config files into a
// domains: list item, unchanged but for its indentation.
func reference(file string) string {
	lines := strings.Split(strings.Trim(file, "\n"), "\n")
	for i, l := range lines {
		if i == 0 {
			lines[i] = "  - " + l
		} else {
			lines[i] = "    " + l
		}
	}
	return "domains:\n" + strings.Join(lines, "\n") + "\n"
}

// option sets a test server's options, or its service's.
type option func(o *Options, c *core.Options)

// strict is the all or nothing counting (LIMITD_GRPC_COUNTING=strict).
func strict(_ *Options, c *core.Options) { c.Counting = core.CountStrict }

// globalShadow is LIMITD_SHADOW_MODE.
func globalShadow(_ *Options, c *core.Options) { c.Shadow = true }

// globalQuota is LIMITD_GRPC_QUOTA_MODE.
func globalQuota(_ *Options, c *core.Options) { c.QuotaMode = true }

func newEnv(t *testing.T, domains string, opts ...option) *env {
	t.Helper()
	mini, rdb := redistest.Mini(t, func(o *redis.Options) { o.MaxRetries = -1 })
	mini.SetTime(t0)
	e := newEnvOver(t, rdb, domains, opts...)
	e.mini = mini
	return e
}

// newEnvOver is newEnv over any Redis.
func newEnvOver(t *testing.T, rdb redis.UniversalClient, domains string, opts ...option) *env {
	t.Helper()
	e := &env{t: t, now: t0, reg: prometheus.NewRegistry(), rdb: rdb}
	e.st = store.New(rdb)
	rules := compile(t, domains)
	o := Options{Rules: rules, Registry: e.reg}
	var co core.Options
	for _, f := range opts {
		f(&o, &co)
	}
	e.svc = core.New(e.st, co)
	o.Service = e.svc
	e.apply(rules)
	e.srv = New(o)
	ln := bufconn.Listen(1 << 20)
	g := grpc.NewServer()
	e.srv.Register(g)
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Serve(ln) }()
	t.Cleanup(func() { g.GracefulStop(); <-done })
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return ln.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	e.conn, e.client = conn, rlv3.NewRateLimitServiceClient(conn)
	return e
}

// apply writes the rules' templates to Redis, as the boot file does.
func (e *env) apply(r *envoyrules.Rules) {
	e.t.Helper()
	for _, tpl := range r.Templates() {
		if _, _, err := e.svc.PutTemplate(context.Background(), tpl); err != nil {
			e.t.Fatalf("template %s: %v", tpl.ID, err)
		}
	}
}

// real reports whether e runs on a real redis-server, whose time the test
// cannot move.
func (e *env) real() bool { return e.mini == nil }

// about reports whether a duration Redis computed is want: exactly on
// miniredis, within the last 100 ms before it on a real Redis, whose clock
// moved since.
func (e *env) about(got, want time.Duration) bool {
	if e.real() {
		return got <= want && got > want-100*time.Millisecond
	}
	return got == want
}

// realEnv makes test servers over srv, a real redis-server of the test's
// own: each starts on an empty server, early in a second of Redis' clock,
// so that a test's calls (milliseconds) fall in one window of every unit.
func realEnv(srv *redistest.Instance) envMaker {
	return func(t *testing.T, domains string, opts ...option) *env {
		t.Helper()
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
		t.Cleanup(func() { _ = rdb.Close() })
		ctx := context.Background()
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		for {
			now, err := rdb.Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			if ns := now.Nanosecond(); ns < 300e6 {
				break
			} else {
				time.Sleep(time.Duration(1e9 - ns))
			}
		}
		return newEnvOver(t, rdb, domains, opts...)
	}
}

// advance moves Redis' clock.
func (e *env) advance(d time.Duration) {
	e.now = e.now.Add(d)
	e.mini.SetTime(e.now)
}

// desc builds a descriptor from key, value pairs.
func desc(kv ...string) *rlcommon.RateLimitDescriptor {
	d := &rlcommon.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// hits sets a descriptor's own hits_addend.
func hits(d *rlcommon.RateLimitDescriptor, n uint64) *rlcommon.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

// call asks the server, failing the test on an error.
func (e *env) call(domain string, ds ...*rlcommon.RateLimitDescriptor) *rlv3.RateLimitResponse {
	e.t.Helper()
	resp, err := e.client.ShouldRateLimit(context.Background(), &rlv3.RateLimitRequest{Domain: domain, Descriptors: ds})
	if err != nil {
		e.t.Fatalf("ShouldRateLimit(%s): %v", domain, err)
	}
	return resp
}

// counter reads one per-rule counter.
func (e *env) counter(vec *prometheus.CounterVec, domain, rule string) float64 {
	return testutil.ToFloat64(vec.WithLabelValues(domain, rule))
}

const (
	ok   = rlv3.RateLimitResponse_OK
	over = rlv3.RateLimitResponse_OVER_LIMIT
)

type (
	rlcommonDescriptor = rlcommon.RateLimitDescriptor
	rlcommonOverride   = rlcommon.RateLimitDescriptor_RateLimitOverride
)

// vec names a per-rule counter vector.
func (m *metrics) vec(name string) *prometheus.CounterVec {
	return map[string]*prometheus.CounterVec{"hits": m.hits, "over": m.over, "near": m.near, "within": m.within, "shadow": m.shadow}[name]
}

func testutilValue(c prometheus.Collector) float64 { return testutil.ToFloat64(c) }

// counterName is the counter the current rules count entries of domain in.
func (e *env) counterName(domain string, entries ...envoyrules.Entry) string {
	e.t.Helper()
	cs, _, err := e.srv.rules.Load().Counters(domain, []envoyrules.Request{{Entries: entries, Hits: 1}}, nil)
	if err != nil || cs[0].Name == "" {
		e.t.Fatalf("%s %v: no counter (%v)", domain, entries, err)
	}
	return cs[0].Name
}
