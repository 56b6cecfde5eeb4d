package grpcapi

import (
	"context"
	"math"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// The reference counting (the default): where the reference server's answers
// differ from limitd's strict counting, each case as the reference answers
// it (its base_limiter.go and service/ratelimit.go).

const llm = `
domains:
  - domain: llm
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 1000}
`

// countingCases run on a real Redis too (TestReferenceOnRealRedis).
var countingCases = map[string]func(*testing.T, envMaker){
	"TokenBudget": countTokenBudget, "HitsAboveLimit": countHitsAboveLimit, "LargeLimitsAndHits": countLargeLimitsAndHits,
	"ShadowRuleBesideRefusal": countShadowRuleBesideRefusal, "ResetOfUntouchedWindow": countResetOfUntouchedWindow,
	"UnlimitedNotReplaced": countUnlimitedNotReplaced, "QuotaMode": countQuotaMode, "GlobalQuotaMode": countGlobalQuotaMode,
	"LimiterRuleDebt": countLimiterRuleDebt, "ReferenceMetrics": countReferenceMetrics,
}

// An LLM gateway's token budget (Envoy Gateway's cost, Envoy AI Gateway):
// each request is checked with its descriptor's hits_addend 0, and once its
// answer is known the tokens it used are added with hits_addend N, whatever
// is left. 1,000 tokens a minute and 300-token answers admit 4 requests; a
// 1,500-token answer admits 1; the budget comes back with the next window.
func TestTokenBudget(t *testing.T) { countTokenBudget(t, newEnv) }

func countTokenBudget(t *testing.T, newEnv envMaker) {
	e := newEnv(t, llm)
	user := func() *rlcommonDescriptor { return desc("user", "ann") }
	admitted := 0
	for range 10 {
		if r := e.call("llm", hits(user(), 0)); r.OverallCode != ok {
			continue
		}
		admitted++
		e.call("llm", hits(user(), 300)) // the response's tokens: counted, whatever the answer
	}
	if admitted != 4 {
		t.Errorf("300-token answers: %d requests admitted in the minute, want 4", admitted)
	}
	// The 5th check: 1,200 counted of 1,000, over until the minute ends.
	e.expect(e.call("llm", hits(user(), 0)), over, lim(over, 1000, minute, 0, toMinute))

	if e.real() {
		return
	}
	e.advance(toMinute)
	e.expect(e.call("llm", hits(user(), 0)), ok, lim(ok, 1000, minute, 1000, time.Minute))
	// One answer larger than the whole budget is counted, not refused as
	// bad input: the response call says OVER_LIMIT (Envoy ignores it), and
	// every check after it is over.
	e.expect(e.call("llm", hits(user(), 1500)), over, lim(over, 1000, minute, 0, time.Minute))
	e.expect(e.call("llm", hits(user(), 0)), over, lim(over, 1000, minute, 0, time.Minute))
	if got := e.counter(e.srv.m.hits, "llm", "user"); got != 4*300+1500 {
		t.Errorf("total_hits %v, want %v (checks count 0)", got, 4*300+1500)
	}
}

// Hits above the limit are a refusal, never bad input: OVER_LIMIT, and OK
// for a rule in shadow mode or under the global shadow mode. Two
// descriptors of one counter count one after the other.
func TestHitsAboveLimit(t *testing.T) { countHitsAboveLimit(t, newEnv) }

func countHitsAboveLimit(t *testing.T, newEnv envMaker) {
	cfg := `
domains:
  - domain: d
    descriptors:
      - key: k
        rate_limit: {unit: minute, requests_per_unit: 10}
      - key: s
        shadow_mode: true
        rate_limit: {unit: minute, requests_per_unit: 10}
`
	e := newEnv(t, cfg)
	e.expect(e.call("d", hits(desc("k", "a"), 11)), over, lim(over, 10, minute, 0, toMinute))
	e.expect(e.call("d", hits(desc("s", "a"), 11)), ok, lim(ok, 10, minute, 0, toMinute))
	e.expect(e.call("d", hits(desc("k", "b"), 6), hits(desc("k", "b"), 6)), over,
		lim(ok, 10, minute, 4, toMinute), lim(over, 10, minute, 0, toMinute))
	if got := e.counter(e.srv.m.shadow, "d", "s"); got != 1 {
		t.Errorf("shadow_mode %v, want 1 (the hit past 10)", got)
	}

	g := newEnv(t, cfg, globalShadow)
	g.expect(g.call("d", hits(desc("k", "a"), 11)), ok, lim(over, 10, minute, 0, toMinute))
	if got := testutilValue(g.srv.m.globalShadow); got != 1 {
		t.Errorf("global shadow counter %v, want 1", got)
	}
}

// requests_per_unit and hits_addend take the reference's whole range: up
// to 2^32−1.
func TestLargeLimitsAndHits(t *testing.T) { countLargeLimitsAndHits(t, newEnv) }

func countLargeLimitsAndHits(t *testing.T, newEnv envMaker) {
	e := newEnv(t, `
domains:
  - domain: d
    descriptors:
      - key: k
        rate_limit: {unit: hour, requests_per_unit: 4294967295}
`)
	e.expect(e.call("d", hits(desc("k", "a"), 4294967294)), ok, lim(ok, math.MaxUint32, hour, 1, toHour))
	e.expect(e.call("d", hits(desc("k", "a"), 1)), ok, lim(ok, math.MaxUint32, hour, 0, toHour))
	e.expect(e.call("d", hits(desc("k", "a"), 4294967295)), over, lim(over, math.MaxUint32, hour, 0, toHour))
	_, err := e.client.ShouldRateLimit(context.Background(), &rlv3.RateLimitRequest{Domain: "d",
		Descriptors: []*rlcommonDescriptor{hits(desc("k", "a"), 1<<32)}})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("hits_addend 2^32: %v, want InvalidArgument", err)
	}
	// The request's own hits_addend is a uint32: its largest counts too.
	r, err := e.client.ShouldRateLimit(context.Background(), &rlv3.RateLimitRequest{Domain: "d",
		Descriptors: []*rlcommonDescriptor{desc("k", "b")}, HitsAddend: math.MaxUint32})
	if err != nil || r.OverallCode != ok || r.Statuses[0].LimitRemaining != 0 {
		t.Errorf("request hits_addend 2^32−1: %v, %v; want OK with 0 left", r, err)
	}
}

// A shadow-mode rule over its limit answers OK even when another rule
// refuses the call.
func TestShadowRuleBesideRefusal(t *testing.T) { countShadowRuleBesideRefusal(t, newEnv) }

func countShadowRuleBesideRefusal(t *testing.T, newEnv envMaker) {
	e := newEnv(t, `
domains:
  - domain: d
    descriptors:
      - key: k
        rate_limit: {unit: minute, requests_per_unit: 1}
      - key: s
        shadow_mode: true
        rate_limit: {unit: minute, requests_per_unit: 1}
`)
	e.call("d", desc("k", "a"), desc("s", "a"))
	e.expect(e.call("d", desc("k", "a"), desc("s", "a")), over, lim(over, 1, minute, 0, toMinute), lim(ok, 1, minute, 0, toMinute))
	// The same under strict counting.
	e = newEnv(t, `
domains:
  - domain: d
    descriptors:
      - key: k
        rate_limit: {unit: minute, requests_per_unit: 1}
      - key: s
        shadow_mode: true
        rate_limit: {unit: minute, requests_per_unit: 1}
`, strict)
	e.call("d", desc("k", "a"), desc("s", "a"))
	r := e.call("d", desc("k", "a"), desc("s", "a"))
	if r.OverallCode != over || r.Statuses[0].Code != over || r.Statuses[1].Code != ok {
		t.Errorf("strict: %v, want the call and the enforced rule OVER_LIMIT, the shadow rule OK", r)
	}
}

// A window nothing has counted yet answers the time to its end, like any
// other.
func TestResetOfUntouchedWindow(t *testing.T) { countResetOfUntouchedWindow(t, newEnv) }

func countResetOfUntouchedWindow(t *testing.T, newEnv envMaker) {
	e := newEnv(t, llm)
	e.expect(e.call("llm", hits(desc("user", "new"), 0)), ok, lim(ok, 1000, minute, 1000, toMinute))
	if e.real() {
		return
	}
	e.advance(1500 * time.Millisecond)
	e.expect(e.call("llm", hits(desc("user", "newer"), 0)), ok, lim(ok, 1000, minute, 1000, toMinute-time.Second))
}

// An unlimited rule is never replaced: replaces names only rules with a
// limit.
func TestUnlimitedNotReplaced(t *testing.T) { countUnlimitedNotReplaced(t, newEnv) }

func countUnlimitedNotReplaced(t *testing.T, newEnv envMaker) {
	e := newEnv(t, `
domains:
  - domain: d
    descriptors:
      - key: a
        rate_limit: {unlimited: true, name: free}
      - key: b
        rate_limit: {unit: second, requests_per_unit: 5, replaces: [{name: free}]}
`)
	e.expect(e.call("d", desc("a", "x"), desc("b", "x")), ok, unlimited, lim(ok, 5, second, 4, toSecond))
}

const quotas = `
domains:
  - domain: d
    descriptors:
      - key: q1
        quota_mode: true
        rate_limit: {unit: minute, requests_per_unit: 1}
      - key: q2
        quota_mode: true
        rate_limit: {unit: minute, requests_per_unit: 1}
      - key: k
        rate_limit: {unit: minute, requests_per_unit: 1}
`

// quota_mode: a quota rule over its limit refuses the call only when every
// quota rule of the call is over; a rule without quota_mode refuses as
// always.
func TestQuotaMode(t *testing.T) { countQuotaMode(t, newEnv) }

func countQuotaMode(t *testing.T, newEnv envMaker) {
	e := newEnv(t, quotas)
	e.expect(e.call("d", desc("q1", "a"), desc("q2", "a")), ok, lim(ok, 1, minute, 0, toMinute), lim(ok, 1, minute, 0, toMinute))
	e.call("d", desc("q2", "b"))
	// q1 over, q2 (another value) within: the call passes; the status says
	// which is over.
	e.expect(e.call("d", desc("q1", "a"), desc("q2", "c")), ok, lim(over, 1, minute, 0, toMinute), lim(ok, 1, minute, 0, toMinute))
	// Both over: refused.
	e.expect(e.call("d", desc("q1", "a"), desc("q2", "b")), over, lim(over, 1, minute, 0, toMinute), lim(over, 1, minute, 0, toMinute))
	// A rule that is not a quota refuses alone.
	e.call("d", desc("k", "a"))
	e.expect(e.call("d", desc("q1", "z"), desc("k", "a")), over, lim(ok, 1, minute, 0, toMinute), lim(over, 1, minute, 0, toMinute))

	// Strict counting cannot take quota rules: the call is bad input.
	s := newEnv(t, quotas, strict)
	_, err := s.client.ShouldRateLimit(context.Background(), &rlv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommonDescriptor{desc("q1", "a")}})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("a quota rule under strict counting: %v, want InvalidArgument", err)
	}
}

// The global quota mode makes every descriptor a quota but unlimited ones,
// those no rule limits included (as the reference counts them): the call is
// refused only when every one is over.
func TestGlobalQuotaMode(t *testing.T) { countGlobalQuotaMode(t, newEnv) }

func countGlobalQuotaMode(t *testing.T, newEnv envMaker) {
	e := newEnv(t, quotas+`
      - key: free
        rate_limit: {unlimited: true}
`, globalQuota)
	e.call("d", desc("k", "a"))
	e.expect(e.call("d", desc("k", "a"), desc("q1", "a")), ok, lim(over, 1, minute, 0, toMinute), lim(ok, 1, minute, 0, toMinute))
	e.expect(e.call("d", desc("k", "a"), desc("q1", "a")), over, lim(over, 1, minute, 0, toMinute), lim(over, 1, minute, 0, toMinute))
	// An unlimited descriptor takes no part; one no rule limits does, and
	// is never over.
	e.expect(e.call("d", desc("k", "a"), desc("free", "x")), over, lim(over, 1, minute, 0, toMinute), unlimited)
	e.expect(e.call("d", desc("k", "a"), desc("nothing", "x")), ok, lim(over, 1, minute, 0, toMinute), none)
}

// The health service answers the reference's name too.
func TestHealthReferenceName(t *testing.T) {
	e := newEnv(t, llm)
	h, err := healthpb.NewHealthClient(e.conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: "ratelimit"})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("ratelimit: %v, %v; want SERVING", h, err)
	}
}

// A limiter: rule (a schedule here) takes hits that arrive after the fact
// as debt: the schedule moves on, and later checks are over until it is
// paid.
func TestLimiterRuleDebt(t *testing.T) { countLimiterRuleDebt(t, newEnv) }

func countLimiterRuleDebt(t *testing.T, newEnv envMaker) {
	e := newEnv(t, `
domains:
  - domain: d
    descriptors:
      - key: user
        limiter: {kind: schedule, rate: 100, burst: 1}
`)
	if r := e.call("d", hits(desc("user", "a"), 0)); r.OverallCode != ok {
		t.Fatalf("first check: %v", r)
	}
	e.call("d", hits(desc("user", "a"), 300)) // 3 s of schedule, taken whatever is left
	r := e.call("d", hits(desc("user", "a"), 0))
	if r.OverallCode != over || !e.about(r.Statuses[0].DurationUntilReset.AsDuration(), 3*time.Second) {
		t.Fatalf("check after 300 hits: %v, want OVER_LIMIT for 3s", r)
	}
	if e.real() {
		return
	}
	e.advance(3 * time.Second)
	if r := e.call("d", hits(desc("user", "a"), 0)); r.OverallCode != ok {
		t.Errorf("once the debt is paid: %v, want OK", r)
	}
}

// The per-rule counters split a window's hits as the reference does:
// within and near while the count stays within the limit; over for the
// part past it, near for the part between 80% and the limit.
func TestReferenceMetrics(t *testing.T) { countReferenceMetrics(t, newEnv) }

func countReferenceMetrics(t *testing.T, newEnv envMaker) {
	e := newEnv(t, `
domains:
  - domain: d
    descriptors:
      - key: k
        rate_limit: {unit: minute, requests_per_unit: 10}
`)
	e.call("d", hits(desc("k", "a"), 7)) // within 7
	e.call("d", hits(desc("k", "a"), 2)) // within 2, near 1 (9 > 8)
	e.call("d", hits(desc("k", "a"), 3)) // over 2 (12 > 10), near 1 (10 − 9)
	e.call("d", hits(desc("k", "a"), 4)) // over 4 (it was past already)
	for vec, want := range map[string]float64{"hits": 16, "within": 9, "near": 2, "over": 6, "shadow": 0} {
		if got := e.counter(e.srv.m.vec(vec), "d", "k"); got != want {
			t.Errorf("%s: %v, want %v", vec, got, want)
		}
	}
}
