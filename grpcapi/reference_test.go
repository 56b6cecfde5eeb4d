package grpcapi

import (
	"math"
	"strconv"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/limitd/limitd/internal/testkit/redistest"
)

// The examples of the reference server's README ("Configuration",
// "Examples"), each config as written there, asked the requests the text
// describes, step by step; the answers are the reference's (its
// base_limiter and service: every hit counted, refused or not; OVER_LIMIT
// once a count passes its limit; the remainder 0 when over; the reset the
// time to the window's end in whole seconds). Time is Redis time (t0: 9 s
// into a minute, 07:08:09 UTC). The tests run on miniredis here and on a
// real redis-server in TestReferenceOnRealRedis.

// status wants: a rule's answer (limit rpu per unit, remaining, reset).
type want struct {
	code      rlv3.RateLimitResponse_Code
	rpu       uint32
	unit      rlv3.RateLimitResponse_RateLimit_Unit
	remaining uint32
	reset     time.Duration
}

const (
	second = rlv3.RateLimitResponse_RateLimit_SECOND
	minute = rlv3.RateLimitResponse_RateLimit_MINUTE
	hour   = rlv3.RateLimitResponse_RateLimit_HOUR
	day    = rlv3.RateLimitResponse_RateLimit_DAY
)

// Resets from t0.
const (
	toSecond = time.Second
	toMinute = 51 * time.Second
	toHour   = 51*time.Minute + 51*time.Second
	toDay    = 16*time.Hour + 51*time.Minute + 51*time.Second
)

// none is the answer for a descriptor no rule limits; unlimited for an
// unlimited rule.
var (
	none      = want{code: ok}
	unlimited = want{code: ok, remaining: math.MaxUint32}
)

// unitOf is the window of a unit (the reference's week, month and year
// are 7, 30 and 365 days); a second for UNKNOWN.
func unitOf(u rlv3.RateLimitResponse_RateLimit_Unit) time.Duration {
	day := 24 * time.Hour
	if d, ok := map[rlv3.RateLimitResponse_RateLimit_Unit]time.Duration{rlv3.RateLimitResponse_RateLimit_MINUTE: time.Minute,
		rlv3.RateLimitResponse_RateLimit_HOUR: time.Hour, rlv3.RateLimitResponse_RateLimit_DAY: day, rlv3.RateLimitResponse_RateLimit_WEEK: 7 * day,
		rlv3.RateLimitResponse_RateLimit_MONTH: 30 * day, rlv3.RateLimitResponse_RateLimit_YEAR: 365 * day}[u]; ok {
		return d
	}
	return time.Second
}

func lim(code rlv3.RateLimitResponse_Code, rpu uint32, unit rlv3.RateLimitResponse_RateLimit_Unit, remaining uint32, reset time.Duration) want {
	return want{code, rpu, unit, remaining, reset}
}

// expect checks a response's overall code and statuses.
func (e *env) expect(r *rlv3.RateLimitResponse, overall rlv3.RateLimitResponse_Code, ws ...want) {
	e.t.Helper()
	if r.OverallCode != overall || len(r.Statuses) != len(ws) {
		e.t.Fatalf("overall %v with %d statuses, want %v with %d: %v", r.OverallCode, len(r.Statuses), overall, len(ws), r)
	}
	for i, w := range ws {
		st := r.Statuses[i]
		got := want{code: st.Code, remaining: st.LimitRemaining, reset: st.DurationUntilReset.AsDuration()}
		if st.CurrentLimit != nil {
			got.rpu, got.unit = st.CurrentLimit.RequestsPerUnit, st.CurrentLimit.Unit
		}
		if st.DurationUntilReset == nil {
			got.reset = 0
		}
		if e.real() && w.reset != 0 && got.reset > 0 && got.reset <= w.reset.Round(unitOf(w.unit)) && got.reset%time.Second == 0 {
			// On a real Redis the window's end is the real time's: whole
			// seconds within the unit.
			got.reset = w.reset
		}
		if got != w {
			e.t.Errorf("status %d: %+v, want %+v", i, got, w)
		}
	}
}

// envMaker makes a test server (newEnv: over miniredis).
type envMaker func(t *testing.T, domains string, opts ...option) *env

var referenceExamples = []func(*testing.T, envMaker){referenceExample1, referenceExample2, referenceExample3,
	referenceExample4, referenceExample5, referenceExample6, referenceExample7, referenceExample8,
	referenceExample9, referenceExample10, referenceExample11}

func TestReferenceExamples(t *testing.T) {
	for i, x := range referenceExamples {
		t.Run(strconv.Itoa(i+1), func(t *testing.T) { x(t, newEnv) })
	}
}

// TestReferenceOnRealRedis runs the reference's examples and the cases of
// counting_test.go on a real redis-server (Redis functions, binary state),
// up to where they would move time.
func TestReferenceOnRealRedis(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Server(t)
	real := realEnv(srv)
	for i, x := range referenceExamples {
		t.Run(strconv.Itoa(i+1), func(t *testing.T) { x(t, real) })
	}
	for name, x := range countingCases {
		t.Run(name, func(t *testing.T) { x(t, real) })
	}
}

func referenceExample1(t *testing.T, newEnv envMaker) {
	e := newEnv(t, reference(`
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500

  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 500
`))
	e.expect(e.call("mongo_cps", hits(desc("database", "users"), 499)), ok, lim(ok, 500, second, 1, toSecond))
	e.expect(e.call("mongo_cps", desc("database", "users")), ok, lim(ok, 500, second, 0, toSecond))
	e.expect(e.call("mongo_cps", desc("database", "users")), over, lim(over, 500, second, 0, toSecond))
	e.expect(e.call("mongo_cps", desc("database", "default")), ok, lim(ok, 500, second, 499, toSecond))
	e.expect(e.call("mongo_cps", desc("database", "other")), ok, none)
	if e.real() {
		return // time on a real Redis is not the test's to move
	}
	e.advance(time.Second)
	e.expect(e.call("mongo_cps", desc("database", "users")), ok, lim(ok, 500, second, 499, toSecond))
}

func referenceExample2(t *testing.T, newEnv envMaker) {
	e := newEnv(t, reference(`
domain: messaging
descriptors:
  # Only allow 5 marketing messages a day
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5

  # Only allow 100 messages a day to any unique phone number
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
`))
	marketing := func(n string) *rlcommonDescriptor { return desc("message_type", "marketing", "to_number", n) }
	for i := range 5 {
		e.expect(e.call("messaging", marketing("2061111111"), desc("to_number", "2061111111")), ok,
			lim(ok, 5, day, uint32(4-i), toDay), lim(ok, 100, day, uint32(99-i), toDay))
	}
	// The 6th marketing message is over its 5; the 100 a day counts it
	// all the same, as the reference counts every hit.
	e.expect(e.call("messaging", marketing("2061111111"), desc("to_number", "2061111111")), over,
		lim(over, 5, day, 0, toDay), lim(ok, 100, day, 94, toDay))
	e.expect(e.call("messaging", desc("to_number", "2061111111")), ok, lim(ok, 100, day, 93, toDay))
	// Every number has its own counters; messages that are not marketing
	// count only against the 100.
	e.expect(e.call("messaging", marketing("2062222222")), ok, lim(ok, 5, day, 4, toDay))
	e.expect(e.call("messaging", desc("message_type", "transactional", "to_number", "2062222222")), ok, none)
	if e.real() {
		return
	}
	e.advance(toDay)
	e.expect(e.call("messaging", marketing("2061111111")), ok, lim(ok, 5, day, 4, 24*time.Hour))
}

func referenceExample3(t *testing.T, newEnv envMaker) {
	e := newEnv(t, reference(`
domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10

  # Black list IP
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
`))
	e.expect(e.call("edge_proxy_per_ip", desc("remote_address", "50.0.0.1")), ok, lim(ok, 10, second, 9, toSecond))
	e.expect(e.call("edge_proxy_per_ip", desc("remote_address", "50.0.0.2")), ok, lim(ok, 10, second, 9, toSecond))
	e.expect(e.call("edge_proxy_per_ip", desc("remote_address", "50.0.0.5")), over, lim(over, 0, second, 0, toSecond))
}

func referenceExample4(t *testing.T, newEnv envMaker) {
	req := []*rlcommonDescriptor{desc("key", "value", "subkey", "subvalue")}
	e := newEnv(t, reference(`
domain: example4
descriptors:
  - key: key
    value: value
    rate_limit:
      requests_per_unit: 300
      unit: second
`))
	e.expect(e.call("example4", req...), ok, none)
	e = newEnv(t, reference(`
domain: example4
descriptors:
  - key: key
    value: value
    descriptors:
      - key: subkey
        rate_limit:
          requests_per_unit: 300
          unit: second
`))
	e.expect(e.call("example4", req...), ok, lim(ok, 300, second, 299, toSecond))
}

func referenceExample5(t *testing.T, newEnv envMaker) {
	e := newEnv(t, reference(`
domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true

  - key: azure
    rate_limit:
      unit: minute
      requests_per_unit: 100
`))
	e.expect(e.call("internal", desc("ldap", "x"), desc("azure", "y")), ok, unlimited, lim(ok, 100, minute, 99, toMinute))
}

func referenceExample6(t *testing.T, newEnv envMaker) {
	e := newEnv(t, reference(`
domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit:
          requests_per_unit: 10
          unit: second
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit:
          requests_per_unit: 20
          unit: second
`))
	a, b := desc("service", "auth-service", "user", "user-a"), desc("service", "auth-service", "user", "user-b")
	e.expect(e.call("example6", hits(a, 10)), ok, lim(ok, 10, second, 0, toSecond))
	e.expect(e.call("example6", desc("service", "auth-service", "user", "user-a")), ok, lim(ok, 10, second, 0, toSecond))
	if got := e.counter(e.srv.m.shadow, "example6", "service.user_user-a"); got != 1 {
		t.Errorf("shadow_mode counter %v, want 1", got)
	}
	e.expect(e.call("example6", hits(b, 20)), ok, lim(ok, 20, second, 0, toSecond))
	e.expect(e.call("example6", desc("service", "auth-service", "user", "user-b")), over, lim(over, 20, second, 0, toSecond))
}

func referenceExample7(t *testing.T, newEnv envMaker) {
	e := newEnv(t, reference(`
domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 5
          unit: second
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: second
`))
	one := func() *rlcommonDescriptor { return desc("key_1", "value_1", "user", "bkthomps") }
	two := func() *rlcommonDescriptor { return desc("key_2", "value_2", "user", "bkthomps") }
	// Together: the 5/s rule is replaced and not counted.
	e.expect(e.call("example7", one(), two()), ok, none, want{ok, 10, second, 9, toSecond})
	e.expect(e.call("example7", one()), ok, want{code: ok, rpu: 5, unit: second, remaining: 4, reset: toSecond})
	e.expect(e.call("example7", two()), ok, want{ok, 10, second, 8, toSecond})
}

func referenceExample8(t *testing.T, newEnv envMaker) {
	e := newEnv(t, reference(`
domain: example8
descriptors:
  - key: key1
    detailed_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 10
  - key: key1
    value: value1
    rate_limit:
      unit: minute
      requests_per_unit: 20
`))
	e.expect(e.call("example8", desc("key1", "unspecified_value")), ok, lim(ok, 10, minute, 9, toMinute))
	e.expect(e.call("example8", desc("key1", "unspecified_value2")), ok, lim(ok, 10, minute, 9, toMinute))
	e.expect(e.call("example8", desc("key1", "value1")), ok, lim(ok, 20, minute, 19, toMinute))
	for _, rule := range []string{"key1_unspecified_value", "key1_unspecified_value2", "key1_value1"} {
		if got := e.counter(e.srv.m.hits, "example8", rule); got != 1 {
			t.Errorf("hits of rule %s: %v, want 1", rule, got)
		}
	}
}

func referenceExample9(t *testing.T, newEnv envMaker) {
	for _, c := range []struct {
		config     string
		key        string
		yes, other []string
	}{
		{`
domain: example9
descriptors:
  - key: key1
    value: value*
    rate_limit:
      unit: minute
      requests_per_unit: 20
`, "key1", []string{"value1", "value2", "valueXYZ"}, []string{"valu"}},
		{`
domain: example9
descriptors:
  - key: path
    value: /api/*/action
    rate_limit:
      unit: minute
      requests_per_unit: 20
`, "path", []string{"/api/123/action", "/api/user-id/action"}, []string{"/api/123/other"}},
		{`
domain: example9
descriptors:
  - key: route
    value: /api/*/resource/*/action
    rate_limit:
      unit: minute
      requests_per_unit: 20
`, "route", []string{"/api/v1/resource/123/action", "/api/v2/resource/456/action"}, []string{"/api/v1/resource/123"}},
	} {
		e := newEnv(t, reference(c.config))
		for _, v := range c.yes {
			e.expect(e.call("example9", desc(c.key, v)), ok, lim(ok, 20, minute, 19, toMinute)) // each value its own counter
		}
		for _, v := range c.other {
			e.expect(e.call("example9", desc(c.key, v)), ok, none)
		}
	}
}

func referenceExample10(t *testing.T, newEnv envMaker) {
	e := newEnv(t, reference(`
domain: example10
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit:
              unit: minute
              requests_per_unit: 60
`))
	e.expect(e.call("example10", desc("route", "api", "http_method", "GET", "subject_id", "123")), ok, lim(ok, 60, minute, 59, toMinute))
	e.expect(e.call("example10", desc("route", "web", "http_method", "POST", "subject_id", "456")), ok, lim(ok, 60, minute, 59, toMinute))
	for _, rule := range []string{"route_api.http_method_GET.subject_id", "route_web.http_method_POST.subject_id"} {
		if got := e.counter(e.srv.m.hits, "example10", rule); got != 1 {
			t.Errorf("hits of rule %s: %v, want 1", rule, got)
		}
	}
	e = newEnv(t, reference(`
domain: example10_wildcard
descriptors:
  - key: user
    value_to_metric: true
    descriptors:
      - key: action
        value: read*
        value_to_metric: true
        descriptors:
          - key: resource
            rate_limit:
              unit: minute
              requests_per_unit: 100
`))
	e.expect(e.call("example10_wildcard", desc("user", "alice", "action", "readfile", "resource", "documents")), ok, lim(ok, 100, minute, 99, toMinute))
	if got := e.counter(e.srv.m.hits, "example10_wildcard", "user_alice.action_readfile.resource"); got != 1 {
		t.Errorf("hits: %v, want 1", got)
	}
}

func referenceExample11(t *testing.T, newEnv envMaker) {
	e := newEnv(t, reference(`
domain: example11
descriptors:
  # With share_threshold: true, all files/* matches share the same threshold
  - key: files
    value: files/*
    share_threshold: true
    rate_limit:
      unit: hour
      requests_per_unit: 10

  # Without share_threshold, each files_no_share/* match has its own isolated threshold
  - key: files_no_share
    value: files_no_share/*
    share_threshold: false
    rate_limit:
      unit: hour
      requests_per_unit: 10
`))
	e.expect(e.call("example11", hits(desc("files", "files/a.pdf"), 5)), ok, lim(ok, 10, hour, 5, toHour))
	e.expect(e.call("example11", hits(desc("files", "files/b.csv"), 5)), ok, lim(ok, 10, hour, 0, toHour))
	e.expect(e.call("example11", desc("files", "files/c.txt")), over, lim(over, 10, hour, 0, toHour))
	e.expect(e.call("example11", hits(desc("files_no_share", "files_no_share/a.pdf"), 10)), ok, lim(ok, 10, hour, 0, toHour))
	e.expect(e.call("example11", desc("files_no_share", "files_no_share/b.csv")), ok, lim(ok, 10, hour, 9, toHour))

	e = newEnv(t, reference(`
domain: example11_metrics
descriptors:
  - key: route
    value: api/*
    share_threshold: true
    value_to_metric: true
    descriptors:
      - key: method
        rate_limit:
          unit: minute
          requests_per_unit: 60
`))
	e.expect(e.call("example11_metrics", desc("route", "api/v1", "method", "GET")), ok, lim(ok, 60, minute, 59, toMinute))
	e.expect(e.call("example11_metrics", desc("route", "api/v2", "method", "GET")), ok, lim(ok, 60, minute, 58, toMinute))
	e.expect(e.call("example11_metrics", desc("route", "api/v2", "method", "PUT")), ok, lim(ok, 60, minute, 59, toMinute))
}
