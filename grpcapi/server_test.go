package grpcapi

import (
	"context"
	"math"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/envoyrules"
	"github.com/limitd/limitd/internal/testkit/redistest"
)

const perUser = `
domains:
  - domain: api
    descriptors:
      - key: user
        limiter: {kind: schedule, rate: 2, burst: 1}
`

// A descriptor may name a limitd config instead of a window: a strict
// schedule of 2/s per distinct user, counted in instances of one template
// (strict counting: a refused hit is not counted; see counting_test.go for
// the reference counting).
func TestLimiterRule(t *testing.T) {
	e := newEnv(t, perUser, strict)
	r := e.call("api", desc("user", "a"))
	if r.OverallCode != ok {
		t.Fatalf("first: %v", r)
	}
	st := r.Statuses[0]
	if st.CurrentLimit.GetRequestsPerUnit() != 2 || st.CurrentLimit.GetUnit() != rlv3.RateLimitResponse_RateLimit_SECOND {
		t.Errorf("current_limit %v, want 2 per second", st.CurrentLimit)
	}
	r = e.call("api", desc("user", "a"))
	if r.OverallCode != over || r.Statuses[0].Code != over {
		t.Fatalf("second at once: %v, want OVER_LIMIT", r)
	}
	if got := r.Statuses[0].DurationUntilReset.AsDuration(); got != 500*time.Millisecond {
		t.Errorf("duration_until_reset %v, want the schedule's 500ms", got)
	}
	if r := e.call("api", desc("user", "b")); r.OverallCode != ok {
		t.Errorf("another user has its own counter: %v", r)
	}
	e.advance(500 * time.Millisecond)
	if r := e.call("api", desc("user", "a")); r.OverallCode != ok {
		t.Errorf("after 500ms: %v", r)
	}
	for vec, want := range map[string]float64{"hits": 4, "within": 3, "over": 1, "near": 0, "shadow": 0} {
		if got := e.counter(e.srv.m.vec(vec), "api", "user"); got != want {
			t.Errorf("%s: %v, want %v", vec, got, want)
		}
	}
	// The counters are instances of the rule's template.
	tpls, err := e.svc.Templates(context.Background())
	if err != nil || len(tpls) != 1 || tpls[0].Pattern != tpls[0].ID+":*" {
		t.Fatalf("templates %+v, %v", tpls, err)
	}
	n, _, err := e.svc.Instances(context.Background(), tpls[0].ID)
	if err != nil || n != 2 {
		t.Errorf("instances: %d, %v; want 2 (users a and b)", n, err)
	}
}

// Several descriptors in one call: each has its status, in order, and one
// over its limit makes the call OVER_LIMIT.
func TestSeveralDescriptors(t *testing.T) {
	e := newEnv(t, perUser, strict)
	e.call("api", desc("user", "a"))
	r := e.call("api", desc("user", "b"), desc("user", "a"), desc("path", "/x"))
	if r.OverallCode != over || len(r.Statuses) != 3 {
		t.Fatalf("%v", r)
	}
	if r.Statuses[0].Code != ok || r.Statuses[1].Code != over || r.Statuses[2].Code != ok {
		t.Errorf("statuses %v, want OK, OVER_LIMIT, OK", r.Statuses)
	}
	if r.Statuses[2].CurrentLimit != nil {
		t.Errorf("a descriptor no rule matches has no current_limit: %v", r.Statuses[2])
	}
	// All or nothing: the refused call took nothing from user b.
	if r := e.call("api", desc("user", "b")); r.OverallCode != ok {
		t.Errorf("user b after a refused call: %v, want OK (nothing taken)", r)
	}
	if got := e.counter(e.srv.m.within, "api", "user"); got != 2 {
		t.Errorf("within_limit %v, want 2 (a first, then b; not b in the refused call)", got)
	}
	// Descriptors naming the same counter ask it once, for their hits
	// together, and share its answer: 2 hits of a 2/s schedule at once.
	e.advance(10 * time.Second)
	r = e.call("api", desc("user", "c"), desc("user", "c"))
	if r.OverallCode != ok || r.Statuses[0].Code != ok || r.Statuses[1].Code != ok {
		t.Errorf("the same counter twice: %v", r)
	}
	if r := e.call("api", desc("user", "c")); r.OverallCode != over || r.Statuses[0].DurationUntilReset.AsDuration() != time.Second {
		t.Errorf("after 2 hits at once: %v, want OVER_LIMIT for 1s", r)
	}
}

// hits_addend: the request's 0 counts 1, a descriptor's own 0 checks
// without taking, and more than 1 takes as many.
func TestHitsAddend(t *testing.T) {
	e := newEnv(t, `
domains:
  - domain: d
    descriptors:
      - key: k
        limiter: {kind: schedule, rate: 1, burst: 1}
`, strict)
	ctx := context.Background()
	// A check of 0 hits takes nothing: the next hit is still granted.
	if r := e.call("d", hits(desc("k", "v"), 0)); r.OverallCode != ok {
		t.Fatalf("check on a fresh counter: %v", r)
	}
	resp, err := e.client.ShouldRateLimit(ctx, &rlv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommonDescriptor{desc("k", "v")}, HitsAddend: 0})
	if err != nil || resp.OverallCode != ok {
		t.Fatalf("request hits_addend 0 counts 1: %v, %v", resp, err)
	}
	if r := e.call("d", hits(desc("k", "v"), 0)); r.OverallCode != over {
		t.Errorf("check after the one permit of this second: %v, want OVER_LIMIT", r)
	}
	// 3 hits at once on a fresh counter: granted, and paid for by the
	// next 3 s.
	if r := e.call("d", hits(desc("k", "w"), 3)); r.OverallCode != ok {
		t.Fatalf("3 hits: %v", r)
	}
	r := e.call("d", desc("k", "w"))
	if r.OverallCode != over || r.Statuses[0].DurationUntilReset.AsDuration() != 3*time.Second {
		t.Errorf("after 3 hits: %v, want OVER_LIMIT for 3s", r)
	}
	if got := e.counter(e.srv.m.hits, "d", "k"); got != 0+1+0+3+1 {
		t.Errorf("hits %v, want 5", got)
	}
}

// shadow_mode decides and counts, and answers OK.
func TestShadowMode(t *testing.T) {
	e := newEnv(t, `
domains:
  - domain: d
    descriptors:
      - key: k
        shadow_mode: true
        limiter: {kind: schedule, rate: 1, burst: 1}
`, strict)
	e.call("d", desc("k", "v"))
	r := e.call("d", desc("k", "v"))
	if r.OverallCode != ok || r.Statuses[0].Code != ok {
		t.Errorf("shadow: %v, want OK", r)
	}
	if got := e.counter(e.srv.m.shadow, "d", "k"); got != 1 {
		t.Errorf("shadow_mode counter %v, want 1", got)
	}
	if got := e.counter(e.srv.m.over, "d", "k"); got != 1 {
		t.Errorf("over_limit counter %v, want 1", got)
	}
}

// A shadow-mode rule over its limit does not stop the call's other rules
// from counting.
func TestShadowModeBesideOthers(t *testing.T) {
	e := newEnv(t, `
domains:
  - domain: d
    descriptors:
      - key: k
        shadow_mode: true
        limiter: {kind: schedule, rate: 1, burst: 1}
      - key: j
        limiter: {kind: smooth, rate: 1, max_burst_seconds: 10, initial_permits: 2}
`, strict)
	e.expect(e.call("d", desc("k", "v"), desc("j", "v")), ok, want{code: ok, rpu: 1, unit: second}, want{code: ok, rpu: 1, unit: second})
	r := e.call("d", desc("k", "v"), desc("j", "v"))
	if r.OverallCode != ok || r.Statuses[0].Code != ok || r.Statuses[0].DurationUntilReset.AsDuration() != time.Second {
		t.Errorf("%v: want OK, the shadow rule saying when it would grant", r)
	}
	if got := e.counter(e.srv.m.within, "d", "j"); got != 2 {
		t.Errorf("j within_limit %v, want 2 (the call beside the shadow refusal took its hit)", got)
	}
	w, err := e.svc.Wait(context.Background(), e.counterName("d", envoyrules.Entry{Key: "j", Value: "v"}))
	if err != nil || w.Permits != 2 {
		t.Errorf("j's counter: %+v, %v; want 2 permits taken", w, err)
	}
}

// The global shadow mode answers OK and counts the calls it let through.
func TestGlobalShadowMode(t *testing.T) {
	e := newEnv(t, perUser, globalShadow)
	e.call("api", desc("user", "a"))
	r := e.call("api", desc("user", "a"))
	if r.OverallCode != ok || r.Statuses[0].Code != over {
		t.Errorf("%v: want overall OK, the descriptor's OVER_LIMIT kept", r)
	}
	if got := e.srv.m.globalShadow; got == nil || testutilValue(got) != 1 {
		t.Errorf("global shadow counter %v, want 1", testutilValue(got))
	}
}

// unlimited answers OK with limit_remaining at its maximum, without Redis.
func TestUnlimited(t *testing.T) {
	e := newEnv(t, `
domains:
  - domain: internal
    descriptors:
      - key: ldap
        rate_limit:
          unlimited: true
`)
	e.mini.Close() // no Redis needed
	r := e.call("internal", desc("ldap", "x"))
	if r.OverallCode != ok || r.Statuses[0].LimitRemaining != math.MaxUint32 || r.Statuses[0].CurrentLimit != nil {
		t.Errorf("%v", r)
	}
}

// replaces: a matched rule drops the rules it names; they are not counted.
func TestReplaces(t *testing.T) {
	e := newEnv(t, `
domains:
  - domain: d
    descriptors:
      - key: key_1
        value: value_1
        descriptors:
          - key: user
            value: bkthomps
            name: specific_limit
            limiter: {kind: schedule, rate: 1, burst: 1}
      - key: key_2
        value: value_2
        descriptors:
          - key: user
            value: bkthomps
            replaces: [{name: specific_limit}]
            limiter: {kind: schedule, rate: 10, burst: 1}
`, strict)
	a, b := desc("key_1", "value_1", "user", "bkthomps"), desc("key_2", "value_2", "user", "bkthomps")
	r := e.call("d", a, b)
	if r.OverallCode != ok || r.Statuses[0].CurrentLimit != nil || r.Statuses[1].CurrentLimit.GetRequestsPerUnit() != 10 {
		t.Fatalf("both: %v, want the first replaced", r)
	}
	if r := e.call("d", a, b); r.OverallCode != over || r.Statuses[0].Code != ok {
		t.Errorf("again at once: %v, want the 10/s rule over and the replaced one OK", r)
	}
	// The replaced rule's counter was not touched.
	if r := e.call("d", a); r.OverallCode != ok {
		t.Errorf("the replaced rule alone: %v, want OK (never counted)", r)
	}
}

// A Redis failure is UNAVAILABLE, never an answer.
func TestRedisDown(t *testing.T) {
	e := newEnv(t, perUser)
	e.mini.Close()
	_, err := e.client.ShouldRateLimit(context.Background(), &rlv3.RateLimitRequest{Domain: "api", Descriptors: []*rlcommonDescriptor{desc("user", "a")}})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("%v, want Unavailable", err)
	}
	// A descriptor no rule matches needs no Redis.
	if r := e.call("api", desc("other", "a")); r.OverallCode != ok {
		t.Errorf("%v", r)
	}
}

// Rules missing from Redis (lost, not applied yet) are UNAVAILABLE too.
func TestTemplatesMissing(t *testing.T) {
	e := newEnv(t, perUser)
	e.mini.FlushAll()
	_, err := e.client.ShouldRateLimit(context.Background(), &rlv3.RateLimitRequest{Domain: "api", Descriptors: []*rlcommonDescriptor{desc("user", "a")}})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("%v, want Unavailable", err)
	}
}

func TestBadRequests(t *testing.T) {
	e := newEnv(t, perUser)
	withLimit := desc("user", "a")
	withLimit.Limit = &rlcommonOverride{RequestsPerUnit: 5}
	for _, c := range []struct {
		name string
		req  *rlv3.RateLimitRequest
	}{
		{"no domain", &rlv3.RateLimitRequest{Descriptors: []*rlcommonDescriptor{desc("user", "a")}}},
		{"no descriptors", &rlv3.RateLimitRequest{Domain: "api"}},
		{"no entries", &rlv3.RateLimitRequest{Domain: "api", Descriptors: []*rlcommonDescriptor{desc()}}},
		{"empty key", &rlv3.RateLimitRequest{Domain: "api", Descriptors: []*rlcommonDescriptor{desc("", "a")}}},
		{"limit override", &rlv3.RateLimitRequest{Domain: "api", Descriptors: []*rlcommonDescriptor{withLimit}}},
		{"too many hits", &rlv3.RateLimitRequest{Domain: "api", Descriptors: []*rlcommonDescriptor{hits(desc("user", "a"), 1<<40)}}},
	} {
		_, err := e.client.ShouldRateLimit(context.Background(), c.req)
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", c.name, err)
		}
	}
	// Hits more than the limiter could grant at once (beyond max_reserve)
	// are not bad input. Counted as the reference counts, they are taken
	// as debt (a schedule's caller pays later: the next one waits); strict
	// counting refuses them.
	big := &rlv3.RateLimitRequest{Domain: "api", Descriptors: []*rlcommonDescriptor{hits(desc("user", "a"), 1000)}}
	if r, err := e.client.ShouldRateLimit(context.Background(), big); err != nil || r.OverallCode != ok {
		t.Errorf("1000 hits of a 2/s limit: %v, %v; want OK, the debt counted", r, err)
	}
	if r := e.call("api", desc("user", "a")); r.OverallCode != over || r.Statuses[0].DurationUntilReset.AsDuration() != 500500*time.Millisecond {
		t.Errorf("after 1000 hits of a 2/s limit: %v, want OVER_LIMIT for 500.5s (this hit counted too)", r)
	}
	if r, err := newEnv(t, perUser, strict).client.ShouldRateLimit(context.Background(), big); err != nil || r.OverallCode != over {
		t.Errorf("strict, 1000 hits of a 2/s limit: %v, %v; want OVER_LIMIT", r, err)
	}
}

func TestUnauthenticated(t *testing.T) {
	e := newEnv(t, perUser, func(o *Options, _ *core.Options) { o.Token, o.AdminToken = "tok", "adm" })
	req := &rlv3.RateLimitRequest{Domain: "api", Descriptors: []*rlcommonDescriptor{desc("user", "a")}}
	for _, md := range []metadata.MD{nil, metadata.Pairs("authorization", "Bearer nope"), metadata.Pairs("authorization", "tok")} {
		ctx := metadata.NewOutgoingContext(context.Background(), md)
		if _, err := e.client.ShouldRateLimit(ctx, req); status.Code(err) != codes.Unauthenticated {
			t.Errorf("metadata %v: %v, want Unauthenticated", md, err)
		}
	}
	for _, tok := range []string{"tok", "adm"} {
		ctx := metadata.NewOutgoingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+tok))
		if _, err := e.client.ShouldRateLimit(ctx, req); err != nil {
			t.Errorf("token %s: %v", tok, err)
		}
	}
	// Health is open, like /healthz.
	h, err := healthpb.NewHealthClient(e.conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: ServiceName})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health: %v, %v", h, err)
	}
}

func TestHealth(t *testing.T) {
	e := newEnv(t, perUser)
	hc := healthpb.NewHealthClient(e.conn)
	for _, svc := range []string{"", ServiceName} {
		h, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("%q: %v, %v", svc, h, err)
		}
	}
	e.srv.Shutdown()
	h, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: ServiceName})
	if err != nil || h.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("after Shutdown: %v, %v", h, err)
	}
}

// SetRules swaps the rules for the calls after it.
func TestSetRules(t *testing.T) {
	e := newEnv(t, perUser, strict)
	e.call("api", desc("user", "a"))
	if r := e.call("api", desc("user", "a")); r.OverallCode != over {
		t.Fatalf("%v", r)
	}
	next := compile(t, `
domains:
  - domain: api
    descriptors:
      - key: user
        limiter: {kind: schedule, rate: 1000, burst: 1}
      - key: path
        limiter: {kind: schedule, rate: 1, burst: 1}
`)
	e.apply(next)
	e.srv.SetRules(next)
	// A changed rule keeps its counters' state (a reconfigured schedule
	// keeps its debt) and answers with its new limit; a new rule counts.
	if r := e.call("api", desc("user", "a")); r.OverallCode != over || r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 1000 {
		t.Errorf("after SetRules: %v, want OVER_LIMIT (the debt kept) at 1000/s", r)
	}
	if r := e.call("api", desc("path", "/")); r.OverallCode != ok {
		t.Errorf("the new rule: %v", r)
	}
	if r := e.call("api", desc("path", "/")); r.OverallCode != over {
		t.Errorf("the new rule, again at once: %v, want OVER_LIMIT", r)
	}
	e.advance(500 * time.Millisecond)
	if r := e.call("api", desc("user", "a")); r.OverallCode != ok {
		t.Errorf("at 1000/s, once the debt is paid: %v", r)
	}
	if r := e.call("api", desc("user", "a")); r.OverallCode != over {
		t.Errorf("1000/s strict, again at once: %v, want OVER_LIMIT", r)
	}
}

// Watch keeps the service's health true to Redis; the overall status stays
// SERVING.
func TestHealthFollowsRedis(t *testing.T) {
	e := newEnv(t, perUser)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.srv.Watch(ctx, 5*time.Millisecond); close(done) }()
	defer func() { cancel(); <-done }()
	hc := healthpb.NewHealthClient(e.conn)
	stream, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{Service: ServiceName})
	if err != nil {
		t.Fatal(err)
	}
	next := func(want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		for {
			h, err := stream.Recv()
			if err != nil {
				t.Fatalf("waiting for %v: %v", want, err)
			}
			if h.Status == want {
				return
			}
		}
	}
	next(healthpb.HealthCheckResponse_SERVING)
	e.mini.Close()
	next(healthpb.HealthCheckResponse_NOT_SERVING)
	h, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("overall: %v, %v; want SERVING while the process runs", h, err)
	}
	if err := e.mini.Restart(); err != nil {
		t.Fatal(err)
	}
	next(healthpb.HealthCheckResponse_SERVING)
}

// Over a real redis-server (Redis functions where it has them): the same
// decisions, and UNAVAILABLE once it stops.
func TestRealRedis(t *testing.T) {
	redistest.Require(t)
	srv, rdb := redistest.ShortClient(t)
	e := newEnvOver(t, rdb, `
domains:
  - domain: d
    descriptors:
      - key: k
        limiter: {rate: 0.001, burst: 1}
`)
	if r := e.call("d", desc("k", "v")); r.OverallCode != ok {
		t.Fatalf("first: %v", r)
	}
	r := e.call("d", desc("k", "v"))
	if r.OverallCode != over || r.Statuses[0].DurationUntilReset.AsDuration() < 999*time.Second {
		t.Fatalf("second within 1000 s: %v, want OVER_LIMIT for about 1000 s", r)
	}
	srv.Stop()
	_, err := e.client.ShouldRateLimit(context.Background(), &rlv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommonDescriptor{desc("k", "v")}})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("Redis stopped: %v, want Unavailable", err)
	}
}

// A window rule under strict counting: hits beyond what remains are
// refused whole and take nothing; a check of 0 hits takes nothing; near_limit counts granted hits
// past 80% of the limit; the next window starts afresh.
func TestWindowRule(t *testing.T) {
	e := newEnv(t, `
domains:
  - domain: d
    descriptors:
      - key: k
        rate_limit: {unit: minute, requests_per_unit: 10}
      - key: blocked
        rate_limit: {unit: second, requests_per_unit: 0}
`, strict)
	e.expect(e.call("d", hits(desc("k", "v"), 8)), ok, lim(ok, 10, minute, 2, toMinute))
	// Over: limit_remaining is 0 whenever a rule is over, as the reference
	// answers, though the 2 left are still there.
	e.expect(e.call("d", hits(desc("k", "v"), 5)), over, lim(over, 10, minute, 0, toMinute))
	e.expect(e.call("d", hits(desc("k", "v"), 0)), ok, lim(ok, 10, minute, 2, toMinute))
	// A blocked rule in the call: refused, and the other rule takes nothing.
	e.expect(e.call("d", desc("blocked", "x"), desc("k", "v")), over, lim(over, 0, second, 0, toSecond), lim(ok, 10, minute, 2, toMinute))
	e.expect(e.call("d", desc("blocked", "x"), hits(desc("k", "v"), 3)), over, lim(over, 0, second, 0, toSecond), lim(over, 10, minute, 0, toMinute))
	e.expect(e.call("d", hits(desc("k", "v"), 2)), ok, lim(ok, 10, minute, 0, toMinute))
	for vec, want := range map[string]float64{"hits": 19, "within": 10, "near": 2, "over": 8} {
		if got := e.counter(e.srv.m.vec(vec), "d", "k"); got != want {
			t.Errorf("%s: %v, want %v", vec, got, want)
		}
	}
	e.advance(toMinute - time.Millisecond)
	// The reset in whole seconds, rounded up, as the reference answers.
	e.expect(e.call("d", desc("k", "v")), over, lim(over, 10, minute, 0, time.Second))
	e.advance(time.Millisecond)
	e.expect(e.call("d", desc("k", "v")), ok, lim(ok, 10, minute, 9, time.Minute))
	// A blocked rule checked alone (0 hits) is OK, with nothing left.
	e.expect(e.call("d", hits(desc("blocked", "x"), 0)), ok, lim(ok, 0, second, 0, toSecond))
}

// A limiter: rule may be a window of limitd's own (here a calendar day),
// answered like a rate_limit.
func TestLimiterWindowRule(t *testing.T) {
	e := newEnv(t, `
domains:
  - domain: d
    descriptors:
      - key: k
        limiter: {kind: window, limit: 3, period: day}
`)
	e.expect(e.call("d", hits(desc("k", "v"), 3)), ok, lim(ok, 3, day, 0, toDay))
	e.expect(e.call("d", desc("k", "v")), over, lim(over, 3, day, 0, toDay))
}
