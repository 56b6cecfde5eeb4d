package grpcapi

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/internal/testkit/grpctest"
)

// What one held call and one connection may cost the server at most, as
// the README's Reliability section states them (about 12 KiB a call with
// Envoy's metadata, 24 KiB with metadata filling MaxHeaderListSize in many
// fields, 50 KiB a connection: TestStreamFlood logs them), and what the
// test's own side and the collector's noise may add.
const (
	heldCallCost = 32 << 10
	connCost     = 128 << 10
	floodSlack   = 1 << 20
)

// envoyMetadata is about what Envoy sends with a rate limit call, but for
// its grpc-timeout: a call that never sends its message does not set one.
var envoyMetadata = []string{"user-agent", "envoy/1.31.0", "x-envoy-internal", "true",
	"x-request-id", "6c2a4e63-1f1b-4b53-8c4e-0f3f7a2d9b11", "x-envoy-expected-rq-timeout-ms", "20"}

// costliestMetadata fills MaxHeaderListSize (4 KiB by default) with as
// many fields as fit: gRPC keeps a call's metadata in a map sized by its
// fields, so this shape costs the most memory for its size.
func costliestMetadata(limit uint32) []string {
	fields := callHeaders(shouldRateLimit)
	var md []string
	for i := 0; ; i++ {
		f := [2]string{fmt.Sprintf("%02x", i), ""}
		if headerListSize(append(fields, f)) > int(limit) {
			return md
		}
		fields = append(fields, f)
		md = append(md, f[0], f[1])
	}
}

// A flood of calls that never send their message holds at most
// MaxConcurrentStreams of them per connection: the server advertises the
// bound, refuses every stream past it, and its memory stays within the
// bound while the flood is held, with Envoy's metadata and with metadata
// in its costliest shape; a call on another connection is answered
// meanwhile, and a held call once its message comes.
func TestStreamFlood(t *testing.T) {
	const (
		conns   = 4
		streams = 50  // MaxConcurrentStreams
		opened  = 500 // streams each connection opens
	)
	for _, md := range []struct {
		name string
		kv   []string
	}{{"envoy", envoyMetadata}, {"costliest", costliestMetadata(DefaultLimits().MaxHeaderListSize)}} {
		t.Run(md.name, func(t *testing.T) {
			l := DefaultLimits()
			l.MaxConcurrentStreams = streams
			e, addr := newLimitedEnv(t, perUser, l)
			if r := e.call("api", desc("user", "warm")); r.OverallCode != ok {
				t.Fatalf("before the flood: %v", r)
			}
			before := live()
			flood := make([]*h2, conns)
			for i := range flood {
				h := dialH2(t, addr)
				for range opened {
					h.open(shouldRateLimit, md.kv...)
				}
				if !h.sync() {
					t.Fatalf("connection %d closed during the flood (GOAWAY %+v)", i, h.goAway)
				}
				flood[i] = h
			}
			// What the flood holds: what is live now beyond what was
			// before it (0 when the collector freed more meanwhile).
			held := max(live(), before) - before
			for i, h := range flood {
				if got := h.settings[http2.SettingMaxConcurrentStreams]; got != streams {
					t.Errorf("connection %d: SETTINGS_MAX_CONCURRENT_STREAMS %d, want %d", i, got, streams)
				}
				var refused, within, past int // refused; within the bound reset; past it not refused
				for id := uint32(1); id < 2*opened; id += 2 {
					code, reset := h.resets[id]
					switch {
					case id < 2*streams && reset:
						within++
					case id > 2*streams && code != http2.ErrCodeRefusedStream:
						past++
					case reset:
						refused++
					}
				}
				if refused != opened-streams || within+past > 0 {
					t.Errorf("connection %d: %d streams refused (REFUSED_STREAM), want %d; %d within the bound reset, %d past it not refused",
						i, refused, opened-streams, within, past)
				}
			}
			bound := uint64(conns*(streams*heldCallCost+connCost) + floodSlack)
			t.Logf("%d connections holding %d calls each (%d refused each): %d bytes held, %.1f KiB a call with its connection's share (bound %d)",
				conns, streams, opened-streams, held, float64(held)/conns/streams/1024, bound)
			if held > bound {
				t.Errorf("the flood holds %d bytes, over the bound of %d (without the bound it would hold %d calls)", held, bound, conns*opened)
			}
			// Another connection is served while the flood is held.
			if r := e.call("api", desc("user", "during")); r.OverallCode != ok {
				t.Errorf("during the flood: %v", r)
			}
			// A held call is answered once its message comes.
			h := flood[0]
			h.send(1, mustMarshal(t, &rlv3.RateLimitRequest{Domain: "api", Descriptors: []*rlcommonDescriptor{desc("user", "held")}}), 0, true)
			if !h.until(func() bool { return h.done(1) }) || h.status(1) != "0" {
				t.Errorf("a held call, its message sent: grpc-status %q (reset %v), want 0", h.status(1), h.resets[1])
			}
		})
	}
}

// A call whose metadata is over MaxHeaderListSize is reset before it is
// kept; one within it is not.
func TestHeaderListBound(t *testing.T) {
	l := DefaultLimits()
	_, addr := newLimitedEnv(t, perUser, l)
	h := dialH2(t, addr)
	within := h.open(shouldRateLimit, "x-pad", strings.Repeat("v", int(l.MaxHeaderListSize)/2))
	over := h.open(shouldRateLimit, "x-pad", strings.Repeat("v", int(l.MaxHeaderListSize)))
	if !h.sync() {
		t.Fatal("connection closed")
	}
	if _, reset := h.resets[within]; reset {
		t.Errorf("metadata of half the bound: reset %v", h.resets[within])
	}
	if _, reset := h.resets[over]; !reset && h.status(over) == "" {
		t.Errorf("metadata over the bound: neither reset nor answered")
	}
}

// With a token set, a rate limit call without it is answered
// UNAUTHENTICATED before its stream exists: 500 of them on one connection
// whose bound is 10 are all answered so, none refused for want of a
// stream, and counted. The health service stays open.
func TestTokenBeforeStream(t *testing.T) {
	l := DefaultLimits()
	l.MaxConcurrentStreams = 10
	e, addr := newLimitedEnv(t, perUser, l, func(o *Options, _ *core.Options) { o.Token = "tok" })
	h := dialH2(t, addr)
	for i := range 500 {
		if i%2 == 0 {
			h.open(shouldRateLimit)
		} else {
			h.open(shouldRateLimit, "authorization", "Bearer wrong")
		}
	}
	if !h.sync() {
		t.Fatal("connection closed")
	}
	for id := uint32(1); id < 1000; id += 2 {
		if got := h.status(id); got != "16" {
			t.Fatalf("stream %d without the token: grpc-status %q (reset %v), want 16 (UNAUTHENTICATED)", id, got, h.resets[id])
		}
	}
	if got := testutil.ToFloat64(e.srv.m.requests.WithLabelValues("Unauthenticated")); got != 500 {
		t.Errorf("limitd_grpc_requests_total{code=Unauthenticated} %v, want 500", got)
	}
	// With the token, the call is decided; the health service needs none.
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer tok")
	if r, err := e.client.ShouldRateLimit(ctx, &rlv3.RateLimitRequest{Domain: "api", Descriptors: []*rlcommonDescriptor{desc("user", "a")}}); err != nil || r.OverallCode != ok {
		t.Errorf("with the token: %v, %v", r, err)
	}
	if r, err := healthpb.NewHealthClient(e.conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: ServiceName}); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health without a token: %v, %v", r, err)
	}
}

// A request that is not a valid protobuf, or whose strings are not UTF-8,
// is INVALID_ARGUMENT (gRPC's own answer would be INTERNAL), for the rate
// limit service (counted) and the health service alike; the same bytes
// well formed are decided.
func TestMalformedRequest(t *testing.T) {
	e, addr := newLimitedEnv(t, perUser, DefaultLimits())
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(grpctest.RawCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	valid := mustMarshal(t, &rlv3.RateLimitRequest{Domain: "api", Descriptors: []*rlcommonDescriptor{desc("user", "a")}})
	for _, tc := range []struct {
		name, method string
		msg          []byte
		want         codes.Code
	}{
		{"well formed", shouldRateLimit, valid, codes.OK},
		{"truncated", shouldRateLimit, valid[:len(valid)-1], codes.InvalidArgument},
		{"not protobuf", shouldRateLimit, []byte{0xff, 0xff, 0xff, 0xff}, codes.InvalidArgument},
		// domain (field 1) = "\xff\xfe"
		{"domain not UTF-8", shouldRateLimit, []byte{0x0a, 0x02, 0xff, 0xfe}, codes.InvalidArgument},
		{"health, not UTF-8", "/grpc.health.v1.Health/Check", []byte{0x0a, 0x01, 0xff}, codes.InvalidArgument},
		{"health, well formed", "/grpc.health.v1.Health/Check", []byte{0x0a, 0x00}, codes.OK},
	} {
		var reply []byte
		err := conn.Invoke(context.Background(), tc.method, &tc.msg, &reply)
		if got := status.Code(err); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
		if tc.want == codes.InvalidArgument && !strings.Contains(status.Convert(err).Message(), "the request is not a valid") {
			t.Errorf("%s: message %q does not say the request is invalid", tc.name, status.Convert(err).Message())
		}
	}
	if got := testutil.ToFloat64(e.srv.m.requests.WithLabelValues("InvalidArgument")); got != 3 {
		t.Errorf("limitd_grpc_requests_total{code=InvalidArgument} %v, want 3", got)
	}
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A client that pings more often than KeepaliveMinTime is told to go away
// (GOAWAY ENHANCE_YOUR_CALM, "too_many_pings"), with or without calls open.
func TestKeepalivePingFlood(t *testing.T) {
	l := DefaultLimits()
	l.KeepaliveMinTime = time.Hour // every ping of the test is too soon
	_, addr := newLimitedEnv(t, perUser, l)
	h := dialH2(t, addr)
	for range 5 {
		if !h.sync() {
			break
		}
	}
	if !h.until(func() bool { return h.goAway != nil }) {
		t.Fatal("the connection closed without GOAWAY")
	}
	if h.goAway.code != http2.ErrCodeEnhanceYourCalm || h.goAway.debug != "too_many_pings" {
		t.Errorf("GOAWAY %+v, want ENHANCE_YOUR_CALM too_many_pings", *h.goAway)
	}
}

// A client that pings no more often than KeepaliveMinTime is left alone,
// on a connection without calls too (Envoy's connection_keepalive).
func TestKeepalivePingsAllowed(t *testing.T) {
	l := DefaultLimits()
	l.KeepaliveMinTime = 20 * time.Millisecond
	_, addr := newLimitedEnv(t, perUser, l)
	h := dialH2(t, addr)
	for i := range 5 {
		// Waiting longer than asked only makes the pings slower.
		time.Sleep(2 * l.KeepaliveMinTime)
		if !h.sync() {
			t.Fatalf("ping %d: GOAWAY %+v", i, h.goAway)
		}
	}
	if h.goAway != nil {
		t.Errorf("GOAWAY %+v", *h.goAway)
	}
}

// A connection past MaxConnectionAge is sent GOAWAY, and a call in flight
// on it still finishes within the grace period.
func TestConnectionAgeGrace(t *testing.T) {
	l := DefaultLimits()
	l.MaxConnectionAge, l.MaxConnectionAgeGrace = 50*time.Millisecond, time.Hour
	_, addr := newLimitedEnv(t, perUser, l)
	h := dialH2(t, addr)
	id := h.open(shouldRateLimit, envoyMetadata...)
	// gRPC drains in two GOAWAYs: the second names the last stream it takes.
	if !h.until(func() bool { return h.goAway != nil && h.goAway.lastStream == id }) {
		t.Fatalf("closed before a GOAWAY naming stream %d (GOAWAY %+v)", id, h.goAway)
	}
	if h.goAway.code != http2.ErrCodeNo || h.goAway.debug != "max_age" {
		t.Errorf("GOAWAY %+v, want NO_ERROR max_age", *h.goAway)
	}
	h.send(id, mustMarshal(t, &rlv3.RateLimitRequest{Domain: "api", Descriptors: []*rlcommonDescriptor{desc("user", "a")}}), 0, true)
	if !h.until(func() bool { return h.done(id) }) || h.status(id) != "0" {
		t.Errorf("the call in flight after GOAWAY: grpc-status %q (reset %v), want 0", h.status(id), h.resets[id])
	}
}

// A connection without calls for MaxConnectionIdle is sent GOAWAY.
func TestConnectionIdle(t *testing.T) {
	l := DefaultLimits()
	l.MaxConnectionIdle = 50 * time.Millisecond
	_, addr := newLimitedEnv(t, perUser, l)
	h := dialH2(t, addr)
	if !h.until(func() bool { return h.goAway != nil }) {
		t.Fatal("closed without GOAWAY")
	}
	if h.goAway.code != http2.ErrCodeNo || h.goAway.debug != "max_idle" {
		t.Errorf("GOAWAY %+v, want NO_ERROR max_idle", *h.goAway)
	}
}

// Past MaxConnections a connection is closed as soon as it is accepted,
// and counted; once one closes, a new one is served.
func TestMaxConnections(t *testing.T) {
	l := DefaultLimits()
	l.MaxConnections = 2
	e, addr := newLimitedEnv(t, perUser, l)
	a, b := dialH2(t, addr), dialH2(t, addr)
	if !a.sync() || !b.sync() {
		t.Fatal("a connection within the bound was closed")
	}
	c := dialH2(t, addr)
	if c.sync() {
		t.Fatal("a connection past the bound was served")
	}
	if c.goAway != nil || len(c.settings) > 0 {
		t.Errorf("the connection past the bound got frames (GOAWAY %+v, settings %v), want none", c.goAway, c.settings)
	}
	if got := testutil.ToFloat64(e.srv.m.connsRefused); got != 1 {
		t.Errorf("limitd_grpc_connections_refused_total %v, want 1", got)
	}
	if got := testutil.ToFloat64(e.srv.m.conns); got != 2 {
		t.Errorf("limitd_grpc_connections %v, want 2", got)
	}
	_ = a.c.Close()
	for testutil.ToFloat64(e.srv.m.conns) != 1 {
		time.Sleep(time.Millisecond) // the server notices the close
	}
	if d := dialH2(t, addr); !d.sync() {
		t.Error("a connection after one closed was not served")
	}
}

func TestLimitsCheck(t *testing.T) {
	srv := New(Options{Service: newEnv(t, perUser).svc})
	if err := DefaultLimits().Check(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if err := (Limits{}).Check(); err != nil {
		t.Errorf("no limits: %v", err)
	}
	for _, tc := range []struct {
		set  func(*Limits)
		want string
	}{
		{func(l *Limits) { l.MaxConnectionAge = -time.Second }, "MaxConnectionAge: must not be negative"},
		{func(l *Limits) { l.KeepaliveMinTime = -1 }, "KeepaliveMinTime: must not be negative"},
		{func(l *Limits) { l.KeepaliveTime = 500 * time.Millisecond }, "KeepaliveTime: must be 0 (no pings) or at least 1s"},
		{func(l *Limits) { l.KeepaliveTimeout = 0 }, "KeepaliveTimeout: must be more than 0"},
		{func(l *Limits) { l.MaxRecvMsgSize = 1 << 31 }, "MaxRecvMsgSize: must be at most 2147483647 bytes"},
		{func(l *Limits) { l.MaxSendMsgSize = math.MaxUint32 }, "MaxSendMsgSize: must be at most"},
	} {
		l := DefaultLimits()
		tc.set(&l)
		err := l.Check()
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q…", l, err, tc.want)
		}
		if _, err := srv.ServerOptions(l); err == nil {
			t.Errorf("%+v: ServerOptions took it", l)
		}
	}
}
