package grpcapi

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/envoyrules"
)

// ServiceName is the gRPC service the server implements.
const ServiceName = "envoy.service.ratelimit.v3.RateLimitService"

// HealthNames are the names the health service (grpc.health.v1) answers
// for the rate limit service: its own, and "ratelimit", which probes
// written for the reference server ask.
var HealthNames = []string{ServiceName, "ratelimit"}

// Options configure a Server.
type Options struct {
	Service *core.Service // decides, and its observer sees every decision
	// Rules are the domains to start with (nil: none; every descriptor is
	// then unlimited, as the reference answers for an unknown domain).
	Rules *envoyrules.Rules
	// Token and AdminToken (LIMITD_TOKEN, LIMITD_ADMIN_TOKEN): with Token
	// set, every ShouldRateLimit call must carry "authorization: Bearer
	// <Token or AdminToken>" metadata. The health service is open.
	Token, AdminToken string
	Logger            *slog.Logger         // request and outage lines (nil: none)
	AccessLog         string               // LIMITD_ACCESS_LOG: "off" (or ""), "errors" or "all"
	Registry          *prometheus.Registry // the per-rule counters' (nil: a new one)
	// NearRatio is where a window rule's near_limit counter starts, a
	// fraction of its limit (0: 0.8, the reference's default).
	NearRatio float64
	// ReferenceMetrics counts the per-rule counters under the reference
	// server's Prometheus names too (refMetrics).
	ReferenceMetrics bool
	Headers          *Headers // response headers each answer adds (nil: none)
	// WaitForRules, with Rules nil, answers every call Unavailable until
	// SetRules gives the first rules, as the reference does before its
	// first config.
	WaitForRules bool
}

// Server is the Envoy rate limit service over a core.Service.
type Server struct {
	rlv3.UnimplementedRateLimitServiceServer
	svc       *core.Service
	rules     atomic.Pointer[envoyrules.Rules]
	tokens    [][sha256.Size]byte
	log       *slog.Logger
	accessLog string
	m         *metrics
	counting  core.Counting
	nearRatio float32
	health    *health.Server
	headers   *Headers
	down      atomic.Bool // Redis failed the last call: its outage was logged
	overrides overrides
}

// New returns a Server. It panics if o.Service is nil.
func New(o Options) *Server {
	if o.Service == nil {
		panic("grpcapi: Options.Service is nil")
	}
	s := &Server{svc: o.Service, log: cmp.Or(o.Logger, slog.New(slog.DiscardHandler)), accessLog: o.AccessLog,
		counting: o.Service.Counting(), nearRatio: defaultNearRatio, health: health.NewServer(), headers: o.Headers}
	if o.NearRatio > 0 {
		s.nearRatio = float32(o.NearRatio)
	}
	if o.Token != "" {
		for _, t := range []string{o.Token, o.AdminToken} {
			if t != "" {
				s.tokens = append(s.tokens, sha256.Sum256([]byte(t)))
			}
		}
	}
	reg := cmp.Or(o.Registry, prometheus.NewRegistry())
	s.m = newMetrics(reg)
	if o.ReferenceMetrics {
		s.m.withReference(reg)
	}
	if o.Rules == nil && !o.WaitForRules {
		o.Rules, _ = envoyrules.Compile(nil)
	}
	s.rules.Store(o.Rules)
	s.SetServing(true)
	return s
}

// SetRules replaces the rules for calls that start after it, and empties
// the service's over-limit cache.
func (s *Server) SetRules(r *envoyrules.Rules) {
	if r != nil {
		s.rules.Store(r)
		s.svc.ClearOverLimit()
	}
}

// Register adds the rate limit service and the standard health service
// (grpc.health.v1) to g. Under the codec of ServerOptions, a request that
// does not decode is answered InvalidArgument (codec.go).
func (s *Server) Register(g *grpc.Server) {
	g.RegisterService(checked(&rlv3.RateLimitService_ServiceDesc, s.malformed), s)
	g.RegisterService(checked(&healthpb.Health_ServiceDesc, nil), s.health)
}

// Watch keeps the rate limit service's health (under HealthNames) true to
// core.Service.Ready, as /readyz is, checked every interval until ctx
// ends. The overall status ("") stays SERVING, as /healthz does.
func (s *Server) Watch(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, max(interval, time.Second))
		err := s.svc.Ready(cctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		s.SetServing(err == nil)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// SetServing sets the rate limit service's health (under HealthNames) for
// a caller that decides it instead of Watch.
func (s *Server) SetServing(ok bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ok {
		st = healthpb.HealthCheckResponse_SERVING
	}
	for _, n := range HealthNames {
		s.health.SetServingStatus(n, st)
	}
}

// Shutdown tells health watchers that the server is stopping (NOT_SERVING)
// before the gRPC server stops.
func (s *Server) Shutdown() { s.health.Shutdown() }

const (
	maxDescriptors = core.MaxAcquireAll
	maxEntries     = 32             // one descriptor's: Envoy sends a handful
	maxHits        = math.MaxUint32 // the reference's uint32 range
)

// ShouldRateLimit decides a request: every descriptor is matched to a rule
// and counted; the overall code is OVER_LIMIT when any rule not in shadow
// mode is over its limit. Redis failing is codes.Unavailable, never an
// answer: Envoy's failure_mode_deny then decides.
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlv3.RateLimitRequest) (resp *rlv3.RateLimitResponse, err error) {
	start := time.Now()
	class := noError
	defer func() { s.finish(ctx, req, err, class, time.Since(start)) }()
	if err := s.authorize(ctx); err != nil {
		return nil, err
	}
	descs, err := parseRequest(req)
	if err != nil {
		class = serviceError // as the reference counts its request checks
		return nil, err
	}
	if resp, err = s.decide(ctx, req.GetDomain(), descs); err != nil {
		class, err = s.fail(ctx, err)
	}
	return resp, err
}

// parseRequest checks a request; its errors are InvalidArgument naming the
// field.
func parseRequest(req *rlv3.RateLimitRequest) ([]envoyrules.Request, error) {
	if req.GetDomain() == "" {
		return nil, invalidArg("domain: must not be empty")
	}
	ds := req.GetDescriptors()
	if len(ds) == 0 {
		return nil, invalidArg("descriptors: must not be empty")
	}
	if len(ds) > maxDescriptors {
		return nil, invalidArg("descriptors: at most %d in one request (got %d)", maxDescriptors, len(ds))
	}
	out := make([]envoyrules.Request, len(ds))
	for i, d := range ds {
		es := d.GetEntries()
		if len(es) == 0 {
			return nil, invalidArg("descriptors[%d].entries: must not be empty", i)
		}
		if len(es) > maxEntries {
			return nil, invalidArg("descriptors[%d].entries: at most %d (got %d)", i, maxEntries, len(es))
		}
		var err error
		if out[i].Override, err = overrideOf(i, d.GetLimit()); err != nil {
			return nil, err
		}
		if d.GetIsNegativeHits() {
			return nil, invalidArg("descriptors[%d].is_negative_hits: is not supported by limitd", i)
		}
		out[i].Entries = make([]envoyrules.Entry, len(es))
		for j, e := range es {
			if e.GetKey() == "" {
				return nil, invalidArg("descriptors[%d].entries[%d].key: must not be empty", i, j)
			}
			out[i].Entries[j] = envoyrules.Entry{Key: e.GetKey(), Value: e.GetValue()}
		}
		// A descriptor's own hits_addend wins; the request's 0 means 1.
		out[i].Hits = uint64(max(1, req.GetHitsAddend()))
		if h := d.GetHitsAddend(); h != nil {
			out[i].Hits = h.GetValue()
		}
		if out[i].Hits > maxHits {
			return nil, invalidArg("descriptors[%d].hits_addend: must be at most %d (got %d)", i, maxHits, out[i].Hits)
		}
	}
	return out, nil
}

func (s *Server) decide(ctx context.Context, domain string, descs []envoyrules.Request) (*rlv3.RateLimitResponse, error) {
	rules := s.rules.Load()
	if rules == nil {
		return nil, errNoRules
	}
	counters, matched, err := rules.Counters(domain, descs, func(t limitd.Template) error { return s.ensureOverride(ctx, t) })
	if err != nil {
		return nil, err
	}
	res, err := s.svc.Count(ctx, core.CountRequest{Counting: s.counting, Counters: counters})
	if err != nil {
		if errors.Is(err, core.ErrNotFound) {
			s.forgetOverrides() // Redis lost them: the next call puts them again
		}
		return nil, err
	}
	s.down.Store(false)
	resp := &rlv3.RateLimitResponse{OverallCode: rlv3.RateLimitResponse_OK, Statuses: make([]*rlv3.RateLimitResponse_DescriptorStatus, len(descs))}
	if res.Refused {
		resp.OverallCode = rlv3.RateLimitResponse_OVER_LIMIT
	}
	if res.Shadowed {
		s.m.globalShadow.Inc()
	}
	for i, d := range descs {
		resp.Statuses[i] = s.status(matched[i], d, res.Counts[i])
	}
	s.headers.add(resp)
	return resp, nil
}

// status is one descriptor's answer, as the reference gives it: OK without
// a limit for a descriptor no rule limits; OK with the largest remainder
// for an unlimited rule; else the rule's limit, its code, what remains of a
// window and when it resets (whole seconds, rounded up), or for an over
// schedule or smooth rule, when the hits would fit. It counts the rule's
// metrics too.
func (s *Server) status(rl *envoyrules.Rule, d envoyrules.Request, c core.Count) *rlv3.RateLimitResponse_DescriptorStatus {
	st := &rlv3.RateLimitResponse_DescriptorStatus{Code: rlv3.RateLimitResponse_OK}
	switch {
	case rl == nil:
		return st
	case rl.Unlimited:
		st.LimitRemaining = math.MaxUint32
		return st
	}
	if c.Refuses() {
		st.Code = rlv3.RateLimitResponse_OVER_LIMIT
	}
	if rl.Unit != envoyrules.UnitUnknown {
		st.CurrentLimit = &rlv3.RateLimitResponse_RateLimit{Name: rl.Name, RequestsPerUnit: rl.Limit, Unit: rlv3.RateLimitResponse_RateLimit_Unit(rl.Unit)}
	}
	if c.Window {
		if !c.Over {
			st.LimitRemaining = uint32(min(max(c.Remaining, 0), math.MaxUint32))
		}
		st.DurationUntilReset = durationpb.New(wholeSeconds(time.Duration(c.Reset - c.Now)))
	} else if c.Over {
		st.DurationUntilReset = durationpb.New(time.Duration(c.RetryAfter))
	}
	s.m.series(rl.Domain, rl.MetricLabel(d.Entries)).count(d.Hits, c, s.nearRatio)
	return st
}

func wholeSeconds(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return (d + time.Second - 1) / time.Second * time.Second
}

const defaultNearRatio float32 = 0.8

// errNoRules answers a call before the first rules (Options.WaitForRules).
var errNoRules = status.Error(codes.Unavailable, "no rate limit configuration loaded yet")

// fail maps an error of decide to the reference's error class and a gRPC
// status, logging the start of an outage once.
func (s *Server) fail(ctx context.Context, err error) (errClass, error) {
	switch {
	case err == errNoRules:
		return serviceError, err
	case errors.Is(err, core.ErrInvalid):
		return serviceError, status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, context.Canceled):
		return noError, status.Error(codes.Canceled, err.Error())
	case errors.Is(err, core.ErrNotFound):
		// The rules' templates are not in Redis yet: the keeper applies
		// them again within a second.
		return serviceError, status.Error(codes.Unavailable, "the rules' counters are not in Redis yet: "+err.Error())
	case errors.Is(err, core.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		if !s.down.Swap(true) {
			s.log.Warn("redis unavailable: rate limit calls answer UNAVAILABLE until it answers", "err", err)
		}
		return redisError, status.Error(codes.Unavailable, s.unavailable(s.svc.Explain(ctx, err)))
	}
	if _, ok := status.FromError(err); ok {
		return serviceError, err
	}
	return serviceError, status.Error(codes.Internal, err.Error())
}

// unavailable is the message of an UNAVAILABLE answer: the condition and
// the fix of a known cause, as the HTTP API's 503 says them.
func (s *Server) unavailable(err error) string {
	u, ok := s.svc.Unavailability(err)
	switch {
	case !ok:
		return "Redis is unavailable: " + err.Error()
	case u.Fix != "":
		return "Redis cannot serve (" + u.Description + "): " + u.Fix
	}
	return "Redis is unavailable (" + u.Description + ")"
}

func (s *Server) authorize(ctx context.Context) error {
	if len(s.tokens) == 0 {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get("authorization")
	if len(vals) == 0 {
		return status.Error(codes.Unauthenticated, "missing bearer token: this call needs the token (LIMITD_TOKEN); send authorization: Bearer <token> metadata")
	}
	scheme, got, _ := strings.Cut(vals[0], " ")
	if !strings.EqualFold(scheme, "Bearer") || got == "" {
		return status.Error(codes.Unauthenticated, "missing bearer token: send authorization: Bearer <token> metadata")
	}
	sum := sha256.Sum256([]byte(got))
	ok := 0
	for i := range s.tokens {
		ok |= subtle.ConstantTimeCompare(sum[:], s.tokens[i][:])
	}
	if ok != 1 {
		return status.Error(codes.Unauthenticated, "wrong token: this call needs the token (LIMITD_TOKEN)")
	}
	return nil
}

func (s *Server) finish(ctx context.Context, req *rlv3.RateLimitRequest, err error, class errClass, took time.Duration) {
	code := status.Code(err)
	s.m.called(code, class, took)
	if s.accessLog != "all" && (s.accessLog != "errors" || err == nil) {
		return
	}
	attrs := []slog.Attr{slog.String("method", "ShouldRateLimit"), slog.String("domain", req.GetDomain()),
		slog.String("code", code.String()), slog.Duration("latency", took)}
	if err != nil {
		attrs = append(attrs, slog.String("detail", status.Convert(err).Message()))
	}
	s.log.LogAttrs(context.WithoutCancel(ctx), slog.LevelInfo, "grpc request", attrs...)
}

func invalidArg(format string, a ...any) error {
	return status.Errorf(codes.InvalidArgument, format, a...)
}

// Headers names the response headers an answer adds for Envoy to pass to
// the client (response_headers_to_add), as the reference server adds them
// with LIMIT_RESPONSE_HEADERS_ENABLED: the limit, the remainder and the
// seconds until the reset of the descriptor closest to its limit.
type Headers struct {
	Limit, Remaining, Reset string
}

// add adds the headers to resp (h nil: none), of the last descriptor over
// its limit, else of the first with a limit and the least remaining. The
// reset is its duration_until_reset, by Redis' clock.
func (h *Headers) add(resp *rlv3.RateLimitResponse) {
	if h == nil {
		return
	}
	var pick *rlv3.RateLimitResponse_DescriptorStatus
	for _, st := range resp.Statuses {
		switch {
		case st.CurrentLimit == nil:
		case st.Code == rlv3.RateLimitResponse_OVER_LIMIT:
			pick = st
		case pick == nil || pick.Code != rlv3.RateLimitResponse_OVER_LIMIT && st.LimitRemaining < pick.LimitRemaining:
			pick = st
		}
	}
	if pick == nil {
		return
	}
	reset := int64(wholeSeconds(pick.GetDurationUntilReset().AsDuration()) / time.Second) // nil: 0
	resp.ResponseHeadersToAdd = []*corev3.HeaderValue{
		{Key: h.Limit, Value: strconv.FormatUint(uint64(pick.CurrentLimit.RequestsPerUnit), 10)},
		{Key: h.Remaining, Value: strconv.FormatUint(uint64(pick.LimitRemaining), 10)},
		{Key: h.Reset, Value: strconv.FormatInt(reset, 10)},
	}
}

// overrideOf reads a descriptor's limit; nil without one. The unit must be
// one the protocol names (the reference cannot count UNKNOWN either);
// unit_multiplier is not read, as the reference does not read it.
func overrideOf(i int, l *rlcommon.RateLimitDescriptor_RateLimitOverride) (*envoyrules.Override, error) {
	if l == nil {
		return nil, nil
	}
	u := envoyrules.Unit(l.GetUnit())
	if _, ok := envoyrules.UnitPeriod(u); !ok {
		return nil, invalidArg("descriptors[%d].limit.unit: must be one of SECOND, MINUTE, HOUR, DAY, WEEK, MONTH, YEAR (got %v)", i, l.GetUnit())
	}
	return &envoyrules.Override{Limit: l.GetRequestsPerUnit(), Unit: u}, nil
}

// overrides are the override templates this process has put in Redis.
type overrides struct {
	mu  sync.Mutex
	put map[string]bool
}

// maxOverrideTemplates bounds the templates remembered as put; past it they
// start over (put again, a template is unchanged).
const maxOverrideTemplates = 4096

func (s *Server) ensureOverride(ctx context.Context, t limitd.Template) error {
	s.overrides.mu.Lock()
	done := s.overrides.put[t.ID]
	s.overrides.mu.Unlock()
	if done {
		return nil
	}
	if _, _, err := s.svc.PutTemplate(ctx, t); err != nil {
		return err
	}
	s.overrides.mu.Lock()
	defer s.overrides.mu.Unlock()
	if s.overrides.put == nil || len(s.overrides.put) >= maxOverrideTemplates {
		s.overrides.put = map[string]bool{}
	}
	s.overrides.put[t.ID] = true
	return nil
}

// forgetOverrides makes the next call put its templates again (Redis lost
// them).
func (s *Server) forgetOverrides() {
	s.overrides.mu.Lock()
	defer s.overrides.mu.Unlock()
	clear(s.overrides.put)
}
