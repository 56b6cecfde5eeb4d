package grpcapi

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"log/slog"
	"math"
	"strings"
	"sync/atomic"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/limitd/limitd/core"
)

// ServiceName is the gRPC service the server implements.
const ServiceName = "envoy.service.ratelimit.v3.RateLimitService"

// Options configure a Server.
type Options struct {
	// Service decides (its observer sees every decision: pass the one the
	// HTTP front end's metrics observe, so both count in the same series).
	Service *core.Service
	// Rules are the domains to start with (nil: none; every descriptor is
	// then unlimited, as the reference answers for an unknown domain).
	Rules *Rules
	// Token and AdminToken (LIMITD_TOKEN, LIMITD_ADMIN_TOKEN): with Token
	// set, every ShouldRateLimit call must carry "authorization: Bearer
	// <Token or AdminToken>" metadata, as every HTTP /v1 read must. The
	// health service is open, like /healthz.
	Token, AdminToken string
	// Logger gets the request lines and outage lines (nil: none).
	Logger *slog.Logger
	// AccessLog is LIMITD_ACCESS_LOG: "off" (or ""), "errors" (calls
	// answered with an error code) or "all".
	AccessLog string
	// Registry gets the per-rule counters (nil: a new one).
	Registry *prometheus.Registry
	// ShadowMode answers OK whatever the rules decide, counting as usual.
	ShadowMode bool
}

// Server is the Envoy rate limit service over a core.Service.
type Server struct {
	rlv3.UnimplementedRateLimitServiceServer
	svc       *core.Service
	rules     atomic.Pointer[Rules]
	tokens    [][sha256.Size]byte
	log       *slog.Logger
	accessLog string
	m         *metrics
	shadow    bool
	health    *health.Server
	down      atomic.Bool // Redis failed the last call: its outage was logged
}

// New returns a Server. It panics if o.Service is nil.
func New(o Options) *Server {
	if o.Service == nil {
		panic("grpcapi: Options.Service is nil")
	}
	s := &Server{svc: o.Service, log: o.Logger, accessLog: o.AccessLog, shadow: o.ShadowMode, health: health.NewServer()}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if o.Token != "" {
		for _, t := range []string{o.Token, o.AdminToken} {
			if t != "" {
				s.tokens = append(s.tokens, sha256.Sum256([]byte(t)))
			}
		}
	}
	reg := o.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	s.m = newMetrics(reg)
	if o.Rules == nil {
		o.Rules, _ = Compile(nil)
	}
	s.rules.Store(o.Rules)
	s.health.SetServingStatus(ServiceName, healthpb.HealthCheckResponse_SERVING)
	return s
}

// SetRules replaces the rules: calls that start after it see the new ones.
func (s *Server) SetRules(r *Rules) {
	if r != nil {
		s.rules.Store(r)
	}
}

// Register adds the rate limit service and the standard health service
// (grpc.health.v1) to g. Under the codec of ServerOptions, a request that
// does not decode is answered InvalidArgument (codec.go).
func (s *Server) Register(g *grpc.Server) {
	g.RegisterService(checked(&rlv3.RateLimitService_ServiceDesc, s.malformed), s)
	g.RegisterService(checked(&healthpb.Health_ServiceDesc, nil), s.health)
}

// Watch keeps the rate limit service's health (grpc.health.v1, service
// ServiceName) true to Redis, as /readyz is: SERVING while the service is
// ready (core.Service.Ready), NOT_SERVING while it is not, checked every
// interval until ctx ends. The overall status ("") stays SERVING while the
// process runs, as /healthz does.
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
		st := healthpb.HealthCheckResponse_SERVING
		if err != nil {
			st = healthpb.HealthCheckResponse_NOT_SERVING
		}
		s.health.SetServingStatus(ServiceName, st)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Shutdown tells health watchers that the server is stopping (NOT_SERVING)
// before the gRPC server stops.
func (s *Server) Shutdown() { s.health.Shutdown() }

// maxDescriptors bounds one request's descriptors (the most one
// AcquireAll takes), and maxEntries one descriptor's entries: Envoy sends a
// handful.
const (
	maxDescriptors = core.MaxAcquireAll
	maxEntries     = 32
	maxHits        = 1 << 31
)

// ShouldRateLimit decides a request: every descriptor is matched to a rule
// and counted; the overall code is OVER_LIMIT when any rule not in shadow
// mode is over its limit. Redis failing is codes.Unavailable, never an
// answer: Envoy's failure_mode_deny then decides.
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlv3.RateLimitRequest) (resp *rlv3.RateLimitResponse, err error) {
	start := time.Now()
	defer func() { s.finish(ctx, req, err, time.Since(start)) }()
	if err := s.authorize(ctx); err != nil {
		return nil, err
	}
	descs, err := parseRequest(req)
	if err != nil {
		return nil, err
	}
	return s.decide(ctx, req.GetDomain(), descs)
}

// descriptor is one checked request descriptor.
type descriptor struct {
	entries []Entry
	hits    uint64
}

// parseRequest checks a request; its errors are InvalidArgument naming the
// field.
func parseRequest(req *rlv3.RateLimitRequest) ([]descriptor, error) {
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
	out := make([]descriptor, len(ds))
	for i, d := range ds {
		es := d.GetEntries()
		if len(es) == 0 {
			return nil, invalidArg("descriptors[%d].entries: must not be empty", i)
		}
		if len(es) > maxEntries {
			return nil, invalidArg("descriptors[%d].entries: at most %d (got %d)", i, maxEntries, len(es))
		}
		if d.GetLimit() != nil {
			return nil, invalidArg("descriptors[%d].limit: limit overrides are not supported by limitd: put the limit in the domain's config", i)
		}
		if d.GetIsNegativeHits() {
			return nil, invalidArg("descriptors[%d].is_negative_hits: is not supported by limitd", i)
		}
		out[i].entries = make([]Entry, len(es))
		for j, e := range es {
			if e.GetKey() == "" {
				return nil, invalidArg("descriptors[%d].entries[%d].key: must not be empty", i, j)
			}
			out[i].entries[j] = Entry{e.GetKey(), e.GetValue()}
		}
		// A descriptor's own hits_addend wins; the request's 0 means 1.
		out[i].hits = uint64(max(1, req.GetHitsAddend()))
		if h := d.GetHitsAddend(); h != nil {
			out[i].hits = h.GetValue()
		}
		if out[i].hits > maxHits {
			return nil, invalidArg("descriptors[%d].hits_addend: must be at most %d (got %d)", i, maxHits, out[i].hits)
		}
	}
	return out, nil
}

// check is one descriptor's rule and what it decided.
type check struct {
	rl     *rule
	name   string // its counter's limitd name
	label  string // its metrics' rule label
	hits   uint64
	status *rlv3.RateLimitResponse_DescriptorStatus
}

func (s *Server) decide(ctx context.Context, domain string, descs []descriptor) (*rlv3.RateLimitResponse, error) {
	rules := s.rules.Load()
	checks := make([]check, len(descs))
	replaced := map[string]bool{}
	for i, d := range descs {
		rl := rules.match(domain, d.entries)
		checks[i] = check{rl: rl, hits: d.hits}
		if rl == nil {
			continue
		}
		for _, n := range rl.replaces {
			replaced[n] = true
		}
	}
	for i, d := range descs {
		c := &checks[i]
		switch {
		case c.rl == nil || c.rl.name != "" && replaced[c.rl.name]:
			// No rule, or one another matched rule replaces: no limit.
			c.rl = nil
			c.status = &rlv3.RateLimitResponse_DescriptorStatus{Code: rlv3.RateLimitResponse_OK}
		case c.rl.unlimited:
			c.status = &rlv3.RateLimitResponse_DescriptorStatus{Code: rlv3.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}
			c.label = c.rl.metricLabel(d.entries)
			s.m.series(c.rl.domain, c.label).hits.Add(float64(c.hits))
		default:
			c.name = c.rl.counter(d.entries)
			c.label = c.rl.metricLabel(d.entries)
		}
	}
	if err := s.count(ctx, checks); err != nil {
		return nil, err
	}
	resp := &rlv3.RateLimitResponse{OverallCode: rlv3.RateLimitResponse_OK, Statuses: make([]*rlv3.RateLimitResponse_DescriptorStatus, len(checks))}
	for i, c := range checks {
		resp.Statuses[i] = c.status
		if c.status.Code == rlv3.RateLimitResponse_OVER_LIMIT {
			resp.OverallCode = rlv3.RateLimitResponse_OVER_LIMIT
		}
	}
	// With LIMITD_SHADOW_MODE nothing is refused: the descriptors say what
	// the rules decided, the call is OK.
	if s.shadow && resp.OverallCode == rlv3.RateLimitResponse_OVER_LIMIT {
		resp.OverallCode = rlv3.RateLimitResponse_OK
		s.m.globalShadow.Inc()
	}
	return resp, nil
}

// count decides every check with a counter in one core.AcquireAll, all or
// nothing (a refusal takes nothing from any counter; a shadow-mode rule never
// refuses), and fills each check's status and its rule's counters.
// Descriptors that name the same counter ask it once, for their hits
// together, and share its answer.
func (s *Server) count(ctx context.Context, checks []check) error {
	var reqs []core.LimiterPermits
	at := make([]int, len(checks)) // check → its request
	seen := map[string]int{}
	blocked := false // a rule of 0 requests refuses the call
	for i := range checks {
		c := &checks[i]
		if c.status != nil {
			continue
		}
		j, ok := seen[c.name]
		if !ok {
			j = len(reqs)
			seen[c.name] = j
			reqs = append(reqs, core.LimiterPermits{Name: c.name})
		}
		at[i] = j
		if c.rl.blocked {
			// Only checked, for its window's reset: it refuses every hit.
			blocked = blocked || c.hits > 0 && !c.rl.shadow && !s.shadow
			continue
		}
		reqs[j].Permits += int64(c.hits)
	}
	if len(reqs) == 0 {
		return nil
	}
	if blocked {
		// The call is refused: nothing may be taken, but every rule says
		// what it would decide.
		for j := range reqs {
			reqs[j].Permits = 0
		}
	}
	res, err := s.svc.AcquireAll(ctx, core.AcquireAllRequest{Requests: reqs})
	if err != nil {
		return s.fail(err)
	}
	s.down.Store(false)
	if len(res.Results) != len(reqs) {
		return status.Errorf(codes.Internal, "%d decisions for %d counters", len(res.Results), len(reqs))
	}
	for i := range checks {
		c := &checks[i]
		if c.status != nil {
			continue
		}
		o := decisionOutcome(c.rl, res.Results[at[i]])
		switch {
		case c.rl.blocked:
			o.granted, o.shadowed, o.remaining = c.hits == 0 || c.rl.shadow || s.shadow, c.hits > 0 && (c.rl.shadow || s.shadow), 0
			// A check of an untouched window has no end yet: the window
			// is the one of the decision's Redis time.
			p := int64(c.rl.period)
			o.reset = time.Duration(p - res.Results[at[i]].Now%p)
		case blocked && o.window:
			// Asked for 0 hits: what remains says whether its own limit
			// would grant the real ones. (A schedule or smooth limit's
			// check says whether a hit would be granted now.)
			fits := o.remaining >= int64(c.hits)
			o.granted, o.shadowed = fits || c.rl.shadow || s.shadow, !fits && (c.rl.shadow || s.shadow)
		}
		s.answer(c, o, res.Granted && !blocked)
	}
	return nil
}

// outcome is one counter's decision as the rules read it.
type outcome struct {
	granted  bool // the counter's own limit allows the hits
	shadowed bool // a shadow-mode limit would have refused them (granted is true)
	// Windows: the limit, what remains after the call, and how long until
	// the window resets.
	limit, remaining int64
	reset            time.Duration
	window           bool
	retryAfter       time.Duration // a refused schedule or smooth limit
}

// answer fills a check's status from its outcome and counts it as the
// reference does: every hit in total_hits; a taken one within_limit, and
// near_limit the part of it past 80% of the limit; a refused one
// over_limit, and in a shadow-mode rule shadow_mode too (then it is
// answered OK). taken says whether the call took its hits: a refused call
// takes nothing, even from the counters that would have granted.
func (s *Server) answer(c *check, o outcome, taken bool) {
	st := &rlv3.RateLimitResponse_DescriptorStatus{Code: rlv3.RateLimitResponse_OK}
	if c.rl.unit != UnitUnknown {
		st.CurrentLimit = &rlv3.RateLimitResponse_RateLimit{Name: c.rl.name, RequestsPerUnit: c.rl.limit, Unit: rlv3.RateLimitResponse_RateLimit_Unit(c.rl.unit)}
	}
	if o.window {
		st.LimitRemaining = uint32(min(max(o.remaining, 0), math.MaxUint32))
		st.DurationUntilReset = durationpb.New(o.reset)
	} else if !o.granted || o.shadowed {
		st.DurationUntilReset = durationpb.New(o.retryAfter)
	}
	m := s.m.series(c.rl.domain, c.label)
	hits := float64(c.hits)
	m.hits.Add(hits)
	switch {
	case o.shadowed:
		m.over.Add(hits)
		if c.rl.shadow {
			m.shadow.Add(hits)
		} else {
			// Only the global shadow mode (LIMITD_SHADOW_MODE) lets a
			// rule's refusal through: the descriptor says OVER_LIMIT, the
			// call OK (decide).
			st.Code = rlv3.RateLimitResponse_OVER_LIMIT
		}
	case !o.granted:
		st.Code = rlv3.RateLimitResponse_OVER_LIMIT
		m.over.Add(hits)
	case taken:
		m.within.Add(hits)
		if o.window {
			near := math.Floor(float64(o.limit) * nearRatio)
			after := float64(o.limit - o.remaining)
			if before := after - hits; after > near {
				m.near.Add(after - max(before, near))
			}
		}
	}
	c.status = st
}

// nearRatio is where near_limit starts: 80% of the limit, the reference's
// default.
const nearRatio = 0.8

// fail maps an error of the service to a gRPC status, logging the start of
// an outage once.
func (s *Server) fail(err error) error {
	switch {
	case errors.Is(err, core.ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, core.ErrNotFound):
		// The rules' templates are not in Redis (yet): the boot file keeper
		// applies them again within a second.
		return status.Error(codes.Unavailable, "the rules' counters are not in Redis yet: "+err.Error())
	case errors.Is(err, core.ErrUnavailable), errors.Is(err, core.ErrClosed), errors.Is(err, context.DeadlineExceeded):
		if !s.down.Swap(true) {
			s.log.Warn("redis unavailable: rate limit calls answer UNAVAILABLE until it answers", "err", err)
		}
		return status.Error(codes.Unavailable, "Redis is unavailable: "+err.Error())
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(codes.Internal, err.Error())
}

// authorize checks the bearer token when one is required.
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

// finish counts a call and writes its access log line.
func (s *Server) finish(ctx context.Context, req *rlv3.RateLimitRequest, err error, took time.Duration) {
	code := status.Code(err)
	s.m.requests.WithLabelValues(code.String()).Inc()
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
