package api

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/limitd/limitd/wire"
)

// front is the one middleware every request passes, no-route answers
// included: request id, deadline and body limit, panic recovery, every error
// written as a problem at once (so the status is known here), then metrics
// and the access log. One middleware, not a chain: echo wraps its middleware
// around the handler on every request.
func (s *server) front(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		s.setRequestID(c)
		var span trace.Span
		if s.tracing != nil {
			span = s.tracing.start(c, s.routeOf(c, nil).label)
		}
		err := s.limits(c, next)
		if err != nil {
			c.Error(err)
		}
		if span != nil {
			s.tracing.end(c, span)
		}
		s.observe(c, err, time.Since(start))
		return nil
	}
}

// setRequestID keeps an incoming X-Request-Id that is a short token and
// makes one otherwise, so that a client cannot bloat log lines with it.
func (s *server) setRequestID(c echo.Context) {
	id := c.Request().Header.Get(echo.HeaderXRequestID)
	if id == "" || !tokenLike(id) {
		id = s.ids.next()
	}
	c.Response().Header().Set(echo.HeaderXRequestID, id)
}

func tokenLike(s string) bool {
	return len(s) <= 128 && !strings.ContainsFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.:", r))
	})
}

// requestIDs makes request ids: 16 hex digits drawn at random once, then 16
// of a counter, so that no request reads crypto/rand.
type requestIDs struct {
	prefix [16]byte
	n      atomic.Uint64
}

func newRequestIDs() *requestIDs {
	var r [8]byte
	_, _ = rand.Read(r[:]) // crypto/rand.Read never fails
	g := &requestIDs{}
	hex.Encode(g.prefix[:], r[:])
	return g
}

func (g *requestIDs) next() string {
	var b [32]byte
	copy(b[:16], g.prefix[:])
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], g.n.Add(1))
	hex.Encode(b[16:], n[:])
	return string(b[:])
}

// observe counts and times a request and writes its access log line. Probes
// (/healthz, /readyz) are counted, never logged.
func (s *server) observe(c echo.Context, err error, latency time.Duration) {
	rt := s.routeOf(c, err)
	r := c.Request()
	status := c.Response().Status
	s.m.request(rt, r.Method, status, latency)

	if s.accessLog == AccessLogOff || rt.probe || s.accessLog == AccessLogErrors && err == nil {
		return
	}
	if !s.log.Enabled(r.Context(), slog.LevelInfo) {
		return
	}
	attrs := []slog.Attr{
		slog.String("method", r.Method), slog.String("route", rt.label), slog.String("path", r.URL.Path),
		slog.Int("status", status), slog.Duration("latency", latency), slog.String("request_id", requestID(c)),
	}
	if p, ok := c.Get(ctxProblem).(*problem); ok {
		attrs = append(attrs, slog.String("problem", p.slug), slog.String("detail", p.Detail))
		if p.Field != "" {
			attrs = append(attrs, slog.String("field", p.Field))
		}
	}
	// The request's own context may be cancelled by now.
	s.log.LogAttrs(context.WithoutCancel(r.Context()), slog.LevelInfo, "http request", attrs...)
}

// routeOf is the route a request matched (err: its handler's).
func (s *server) routeOf(c echo.Context, err error) *route {
	rt := s.routes[c.Path()]
	if rt == nil || errors.Is(err, echo.ErrNotFound) { // echo's "no route" handler
		rt = s.unmatched
	}
	return rt
}

// limits gives the request its deadline and caps its body (a declared
// Content-Length over the limit is refused before reading), and classifies
// every error while the deadline's context is still live.
func (s *server) limits(c echo.Context, next echo.HandlerFunc) error {
	r := c.Request()
	if r.ContentLength > s.bodyLimit {
		return tooLarge(s.bodyLimit)
	}
	switch c.Path() {
	case eventsPath: // a stream lasts as long as its client listens
	case acquirePath: // no timer on this context: see acquirePath
	default:
		ctx, cancel := context.WithTimeout(r.Context(), s.timeout)
		defer cancel()
		r = r.WithContext(ctx)
	}
	if hasBody(r) {
		b := &limitedBody{rc: r.Body, left: s.bodyLimit, limit: s.bodyLimit, timeout: s.bodyTimeout}
		r.Body = b
		// net/http lifts its server's ReadTimeout once the body is read.
		srv, _ := r.Context().Value(http.ServerContextKey).(*http.Server)
		if srv != nil && srv.ReadTimeout > 0 && srv.ReadTimeout <= s.bodyTimeout {
			// The server bounds reading the whole request at least as
			// tightly: no deadline of our own.
			b.timeout = srv.ReadTimeout
		} else {
			// Only while the body is read: readBody lifts it, as net/http
			// would cancel a request still running once it passed.
			b.ctl = http.NewResponseController(c.Response())
			_ = b.ctl.SetReadDeadline(time.Now().Add(s.bodyTimeout))
		}
	} else if r.Body != nil && r.Body != http.NoBody {
		r.Body = &limitedBody{rc: r.Body, left: s.bodyLimit, limit: s.bodyLimit}
	}
	c.SetRequest(r)
	if err := s.recovered(c, next); err != nil {
		return s.problemOf(err, c) // now: once cancel runs, every error looks like a client gone
	}
	return nil
}

// recovered runs next, turning a panic into a logged *panicError (but
// http.ErrAbortHandler, which aborts the response on purpose).
func (s *server) recovered(c echo.Context, next echo.HandlerFunc) (err error) {
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		if v == http.ErrAbortHandler {
			panic(v)
		}
		perr, ok := v.(error)
		if !ok {
			perr = fmt.Errorf("%v", v)
		}
		stack := make([]byte, 4<<10)
		stack = stack[:runtime.Stack(stack, false)]
		s.log.Error("panic serving request", "err", perr, "method", c.Request().Method,
			"path", c.Request().URL.Path, "request_id", requestID(c), "stack", string(stack))
		err = &panicError{perr}
	}()
	return next(c)
}

// hasBody reports whether a request came with a body (Content-Length ≠ 0, or chunked).
func hasBody(r *http.Request) bool {
	return r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody
}

// limitedBody is a request body capped as http.MaxBytesReader caps it, that
// also knows whether a handler read it and how long it has for that.
type limitedBody struct {
	rc      io.ReadCloser
	ctl     *http.ResponseController // sets the body's read deadline; nil: none
	left    int64                    // bytes it may still read
	limit   int64
	timeout time.Duration
	read    bool // a handler started reading it
	err     error
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	// Read one byte more than allowed, to tell a body of exactly the
	// limit from a longer one.
	if int64(len(p))-1 > b.left {
		p = p[:b.left+1]
	}
	n, err := b.rc.Read(p)
	if int64(n) <= b.left {
		b.left -= int64(n)
		b.err = err
		return n, err
	}
	n = int(b.left)
	b.left = 0
	b.err = &http.MaxBytesError{Limit: b.limit}
	return n, b.err
}

func (b *limitedBody) Close() error { return b.rc.Close() }

// timeoutOrZero is the time the body had to arrive (b may be nil).
func (b *limitedBody) timeoutOrZero() time.Duration {
	if b == nil {
		return 0
	}
	return b.timeout
}

// dropUnreadBody is called before an error response: if the request's body
// was never read, the connection is closed after the answer instead of
// net/http reading up to 256 KiB of a body nobody wants first.
func dropUnreadBody(c echo.Context) {
	r := c.Request()
	if !hasBody(r) {
		return
	}
	if b, ok := r.Body.(*limitedBody); ok && b.read {
		return
	}
	closeAfter(c)
}

// closeAfter ends the connection after this response, reading nothing more.
func closeAfter(c echo.Context) {
	c.Response().Header().Set(echo.HeaderConnection, "close")
	_ = http.NewResponseController(c.Response()).SetReadDeadline(time.Now())
}

// auth holds the route middleware that check bearer tokens.
type auth struct {
	read  echo.MiddlewareFunc // every /v1 request that changes no config
	admin echo.MiddlewareFunc // PUT, PATCH, DELETE, reset
}

// newAuth: with an admin token, config changes need it; with a token, every
// other /v1 request needs it (or the admin token). Without an admin token,
// config changes need the token, so that setting only LIMITD_TOKEN never
// leaves writes open while reads are closed. Routes that need no token are
// kept from browsers on other origins (untokened).
func newAuth(adminToken, token string) auth {
	a := auth{read: untokened, admin: untokened}
	switch {
	case adminToken != "":
		a.admin = bearer("this request changes a config and needs the admin token (LIMITD_ADMIN_TOKEN)", adminToken)
	case token != "":
		a.admin = bearer("this request needs the token (LIMITD_TOKEN)", token)
	}
	if token != "" {
		a.read = bearer("this request needs the token (LIMITD_TOKEN)", token, adminToken)
	}
	return a
}

// bearer accepts a request whose Authorization header carries one of tokens.
// Tokens are compared as SHA-256 sums in constant time, so that neither their
// content nor their length leaks through timing.
func bearer(need string, tokens ...string) echo.MiddlewareFunc {
	var sums [][sha256.Size]byte
	for _, t := range tokens {
		if t != "" {
			sums = append(sums, sha256.Sum256([]byte(t)))
		}
	}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			scheme, got, _ := strings.Cut(c.Request().Header.Get(echo.HeaderAuthorization), " ")
			if !strings.EqualFold(scheme, "Bearer") || got == "" {
				return newProblem(http.StatusUnauthorized, wire.ProblemUnauthorized, "missing bearer token: "+need+"; send Authorization: Bearer <token>")
			}
			sum := sha256.Sum256([]byte(got))
			ok := 0
			for i := range sums {
				ok |= subtle.ConstantTimeCompare(sum[:], sums[i][:])
			}
			if ok != 1 {
				return newProblem(http.StatusUnauthorized, wire.ProblemUnauthorized, "wrong token: "+need)
			}
			return next(c)
		}
	}
}

// tracing is the API's span of each request (Options.TracerProvider),
// continuing the caller's trace; Redis calls are traced under it by the
// Redis client's own hooks. nil: no tracing.
type tracing struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
}

func newTracing(tp trace.TracerProvider, prop propagation.TextMapPropagator) *tracing {
	if tp == nil {
		return nil
	}
	if prop == nil {
		prop = propagation.TraceContext{}
	}
	return &tracing{tracer: tp.Tracer("github.com/limitd/limitd/api"), prop: prop}
}

// start starts the request's span, named by method and route, in its context.
func (t *tracing) start(c echo.Context, route string) trace.Span {
	r := c.Request()
	ctx := t.prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	ctx, span := t.tracer.Start(ctx, r.Method+" "+route, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("http.request.method", r.Method), attribute.String("http.route", route)))
	c.SetRequest(r.WithContext(ctx))
	return span
}

// end ends a request's span with its status (an error from 500 up).
func (t *tracing) end(c echo.Context, span trace.Span) {
	status := c.Response().Status
	span.SetAttributes(attribute.Int("http.response.status_code", status))
	if status >= 500 {
		span.SetStatus(otelcodes.Error, "")
	}
	span.End()
}

// untokened is the middleware of every route that needs no token. Without a
// token any page the user opens could send requests through the browser, so
// such a request is refused as docs/http.md ("Browsers") tells: on a
// loopback address under a non-loopback Host (421: DNS rebinding), a write
// from another origin (403), or a body not declared JSON (415: a page may
// send no JSON without asking first). Reads pass: limitd sends no CORS
// headers, so another origin cannot read the answers.
func untokened(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		if p := misdirected(r); p != nil {
			return p
		}
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			return next(c)
		}
		if p := crossOrigin(r); p != nil {
			return p
		}
		if hasBody(r) {
			if ct := r.Header.Get(echo.HeaderContentType); !jsonMediaType(ct) {
				return notJSON(ct)
			}
		}
		return next(c)
	}
}

// noTokenRule ends the details of untokened's problems.
const noTokenRule = "limitd without tokens (LIMITD_TOKEN, LIMITD_ADMIN_TOKEN) takes such requests only from its own pages and from clients that are not browsers"

// misdirected is the 421 of a request that reached a loopback address under
// a name that does not stay on this machine, nil for any other.
func misdirected(r *http.Request) *problem {
	local, ok := r.Context().Value(http.LocalAddrContextKey).(*net.TCPAddr)
	if !ok || !local.IP.IsLoopback() || loopbackHost(r.Host) {
		return nil
	}
	return newProblem(http.StatusMisdirectedRequest, wire.ProblemMisdirected, fmt.Sprintf(
		"Host %s is not a loopback name: a request that reaches limitd on a loopback address must name it 127.0.0.1, [::1] or localhost "+
			"(a page on another site could reach it under its own name through DNS rebinding); "+
			"a proxy in front of limitd must send one of those as Host, or limitd needs tokens (LIMITD_TOKEN; for /metrics LIMITD_METRICS_TOKEN)", quote(r.Host)))
}

// loopbackHost reports whether a Host header names this machine whatever
// the DNS says: a loopback address, localhost or a name under .localhost
// (which resolvers and browsers keep on loopback, RFC 6761). An empty Host
// (HTTP/1.0) is not a browser's.
func loopbackHost(host string) bool {
	if host == "" {
		return true
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	} else {
		host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]") // [::1] without a port
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// crossOriginCheck is Go's check of Sec-Fetch-Site and Origin: safe methods
// pass, as do requests with neither header (not a browser's).
var crossOriginCheck = http.NewCrossOriginProtection()

// crossOrigin is the 403 of a request a browser sent from a page of another
// origin, naming the header that says so; nil for any other.
func crossOrigin(r *http.Request) *problem {
	if crossOriginCheck.Check(r) == nil {
		return nil
	}
	var detail string
	// Check looks at Origin only when Sec-Fetch-Site is absent.
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" {
		detail = fmt.Sprintf("Sec-Fetch-Site %s: the browser says a page of another origin sent this %s; %s",
			quote(site), clip(r.Method), noTokenRule)
	} else {
		detail = fmt.Sprintf("Origin %s is not this server's (Host %s): a page of another origin sent this %s; %s",
			quote(r.Header.Get("Origin")), quote(r.Host), clip(r.Method), noTokenRule)
	}
	return newProblem(http.StatusForbidden, wire.ProblemCrossOrigin, detail)
}

// jsonMediaType reports whether a Content-Type is JSON: application/json or
// application/*+json (merge-patch+json, problem+json), with any parameters.
func jsonMediaType(ct string) bool {
	if ct == echo.MIMEApplicationJSON {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && (mt == "application/json" || strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))
}

// notJSON is the 415 of a body whose Content-Type (ct, maybe "") is not JSON.
func notJSON(ct string) *problem {
	what := "Content-Type " + quote(ct) + " is not JSON"
	if ct == "" {
		what = "a request body needs a Content-Type"
	}
	return newProblem(http.StatusUnsupportedMediaType, wire.ProblemUnsupportedMediaType,
		what+"; send Content-Type: application/json")
}
