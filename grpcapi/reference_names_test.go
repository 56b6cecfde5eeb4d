package grpcapi

import (
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/limitd/limitd/core"
)

type (
	coreOptions = core.Options
	headerValue = corev3.HeaderValue
)

// scrape reads one series of e's registry as /metrics shows it.
func scrape(t *testing.T, e *env, series string) (float64, bool) {
	t.Helper()
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(e.reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for line := range strings.SplitSeq(rec.Body.String(), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}

const headerRules = `
domains:
  - domain: web
    descriptors:
      - key: ip
        rate_limit: {unit: minute, requests_per_unit: 3}
      - key: path
        rate_limit: {unit: hour, requests_per_unit: 100}
      - key: user
        descriptors:
          - key: plan
            value: free
            rate_limit: {unit: second, requests_per_unit: 10}
      - key: open
        rate_limit: {unlimited: true}
`

// The response headers describe the descriptor closest to its limit, as the
// reference's do: the least remaining while none is over, then the one over;
// the reset is the window's end as Redis counted it.
func TestResponseHeaders(t *testing.T) {
	e := newEnv(t, headerRules, func(o *Options, _ *coreOptions) {
		o.Headers = &Headers{Limit: "RateLimit-Limit", Remaining: "RateLimit-Remaining", Reset: "RateLimit-Reset"}
	})
	headers := func(r interface {
		GetResponseHeadersToAdd() []*headerValue
	}) string {
		var kv []string
		for _, h := range r.GetResponseHeadersToAdd() {
			kv = append(kv, h.Key+"="+h.Value)
		}
		return strings.Join(kv, " ")
	}
	// t0 is 9 s into a minute and 8 min 9 s into an hour.
	r := e.call("web", desc("path", "/"), desc("ip", "1.2.3.4"), desc("open", "x"))
	if got, want := headers(r), "RateLimit-Limit=3 RateLimit-Remaining=2 RateLimit-Reset=51"; got != want {
		t.Errorf("first call: %s, want %s (ip: the least remaining)", got, want)
	}
	e.advance(time.Second)
	e.call("web", desc("ip", "1.2.3.4"))
	e.call("web", desc("ip", "1.2.3.4"))
	r = e.call("web", desc("ip", "1.2.3.4"), desc("path", "/"))
	if r.OverallCode != over {
		t.Fatalf("fourth hit of 3 a minute: %v", r)
	}
	if got, want := headers(r), "RateLimit-Limit=3 RateLimit-Remaining=0 RateLimit-Reset=50"; got != want {
		t.Errorf("over: %s, want %s", got, want)
	}
	if r := e.call("web", desc("open", "x")); len(r.ResponseHeadersToAdd) != 0 {
		t.Errorf("no descriptor with a limit: headers %s, want none", headers(r))
	}
	// Without Options.Headers, none.
	plain := newEnv(t, headerRules)
	if r := plain.call("web", desc("ip", "1.2.3.4")); len(r.ResponseHeadersToAdd) != 0 {
		t.Errorf("headers off: %s", headers(r))
	}
}

// With ReferenceMetrics each rule counts under the reference exporter's
// names too, labelled by domain and the first two parts of its key.
func TestReferenceMetricNames(t *testing.T) {
	e := newEnv(t, headerRules, func(o *Options, _ *coreOptions) { o.ReferenceMetrics = true })
	for range 4 {
		e.call("web", desc("ip", "1.2.3.4"))
	}
	e.call("web", desc("user", "u1", "plan", "free"))
	for name, want := range map[string]float64{
		`ratelimit_service_rate_limit_total_hits{domain="web",key1="ip",key2=""}`:            4,
		`ratelimit_service_rate_limit_within_limit{domain="web",key1="ip",key2=""}`:          3,
		`ratelimit_service_rate_limit_over_limit{domain="web",key1="ip",key2=""}`:            1,
		`ratelimit_service_rate_limit_near_limit{domain="web",key1="ip",key2=""}`:            1,
		`ratelimit_service_rate_limit_shadow_mode{domain="web",key1="ip",key2=""}`:           0,
		`ratelimit_service_rate_limit_total_hits{domain="web",key1="user",key2="plan_free"}`: 1,
		`limitd_ratelimit_hits_total{domain="web",rule="ip"}`:                                4, // beside limitd's own
		`limitd_ratelimit_within_limit_total{domain="web",rule="user.plan_free"}`:            1,
		`ratelimit_service_total_requests{grpc_method="ShouldRateLimit"}`:                    5,
		`ratelimit_service_rate_limit_total_hits{domain="web",key1="path",key2=""}`:          -1, // never asked: no series
		`ratelimit_service_should_rate_limit_error{err_type="redis_error"}`:                  -1,
	} {
		got, found := scrape(t, e, name)
		switch {
		case want < 0 && found:
			t.Errorf("%s = %v, want no such series", name, got)
		case want >= 0 && (!found || got != want):
			t.Errorf("%s = %v (found %v), want %v", name, got, found, want)
		}
	}
	// A Redis that fails is a redis_error.
	e.mini.Close()
	if _, err := e.client.ShouldRateLimit(t.Context(), &rlv3.RateLimitRequest{Domain: "web", Descriptors: []*rlcommonDescriptor{desc("ip", "x")}}); err == nil {
		t.Fatal("no error with Redis gone")
	}
	if got, _ := scrape(t, e, `ratelimit_service_should_rate_limit_error{err_type="redis_error"}`); got != 1 {
		t.Errorf("redis_error = %v, want 1", got)
	}
	if n := testutil.CollectAndCount(e.reg, "ratelimit_service_rate_limit_total_hits"); n != 2 {
		t.Errorf("%d total_hits series, want 2 (ip, user.plan_free)", n)
	}
}

// Errors count as the reference counts them: no rules loaded yet and a
// request without a domain are service_error, Redis failing is
// redis_error; every call answered is timed in
// ratelimit_service_response_time_seconds.
func TestReferenceErrorClasses(t *testing.T) {
	e := newEnv(t, headerRules, func(o *Options, _ *coreOptions) {
		o.ReferenceMetrics, o.Rules, o.WaitForRules = true, nil, true
	})
	errs := func(class string) float64 {
		got, _ := scrape(t, e, `ratelimit_service_should_rate_limit_error{err_type="`+class+`"}`)
		return got
	}
	call := func(domain string) error {
		_, err := e.client.ShouldRateLimit(t.Context(), &rlv3.RateLimitRequest{Domain: domain, Descriptors: []*rlcommonDescriptor{desc("ip", "x")}})
		return err
	}
	if err := call("web"); status.Code(err) != codes.Unavailable {
		t.Fatalf("before the first rules: %v, want Unavailable", err)
	}
	if s, r := errs("service_error"), errs("redis_error"); s != 1 || r != 0 {
		t.Errorf("no rules yet: service_error %v, redis_error %v; want 1, 0", s, r)
	}
	e.srv.SetRules(compile(t, headerRules))
	if err := call(""); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("no domain: %v, want InvalidArgument", err)
	}
	if s := errs("service_error"); s != 2 {
		t.Errorf("no domain: service_error %v, want 2", s)
	}
	if err := call("web"); err != nil {
		t.Fatalf("with rules: %v", err)
	}
	e.mini.Close()
	if err := call("web"); status.Code(err) != codes.Unavailable {
		t.Fatalf("Redis gone: %v, want Unavailable", err)
	}
	if s, r := errs("service_error"), errs("redis_error"); s != 2 || r != 1 {
		t.Errorf("Redis gone: service_error %v, redis_error %v; want 2, 1", s, r)
	}
	if n, _ := scrape(t, e, `ratelimit_service_response_time_seconds_count{grpc_method="ShouldRateLimit"}`); n != 4 {
		t.Errorf("response_time count %v, want 4 (every call answered)", n)
	}
	if n, _ := scrape(t, e, `ratelimit_service_response_time_seconds_bucket{grpc_method="ShouldRateLimit",le="10"}`); n != 4 {
		t.Errorf("response_time le=10 bucket %v, want 4: the buckets are Prometheus' DefBuckets, as the reference exporter's", n)
	}
}
