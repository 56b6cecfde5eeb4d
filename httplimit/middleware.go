// Package httplimit limits HTTP requests per key (client IP, API key)
// through limitd limiter templates: Middleware for net/http, EchoMiddleware
// for echo. A refused request is answered 429 with Retry-After and an RFC
// 9457 problem body; every answer carries the RateLimit-Policy and RateLimit
// fields of the IETF draft.
//
// Layer: a front end over package client (httplimit → client), echo and
// net/http; nothing in limitd imports it.
//
//	c := redisclient.New(rdb)
//	h := httplimit.Middleware(c, httplimit.KeyByHeader("X-API-Key"), httplimit.WithLimiterPrefix("key:"))(mux)
//	// a template with pattern "key:*" decides each key's limit
package httplimit

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/client"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/wire"
)

// Middleware limits HTTP requests per key: each request's key (by default the
// client's IP address, from http.Request.RemoteAddr: X-Forwarded-For, which
// any client can set, is ignored; behind a proxy, use KeyFunc with the
// proxy's trusted header) names a limiter, usually a template instance ("ip:*"
// matching "ip:192.0.2.7"), and the request goes on only if that limiter's
// Allow lets it. Otherwise the answer is 429 Too Many Requests with a
// Retry-After header and an RFC 9457 application/problem+json body.
//
// Every answer carries the RateLimit-Policy and RateLimit fields of
// draft-ietf-httpapi-ratelimit-headers-09 ("default";q=10;w=1 and
// "default";r=0;t=1). limitd paces permits, so they describe the pace: q
// permits per w seconds is the limiter's rate (or what WithPolicy
// advertises); r is how many more requests would be allowed now (0 or 1),
// and t the seconds, rounded up, until the next one would be.
//
// A limiter that does not exist (no template matches the key) answers 500,
// an unreachable Redis or a closed client 503, both as problem+json: never
// "allow everything" (Redis outages follow the client's fallback mode).
//
// The middleware keeps one handle per recent key, at most WithMaxKeys; the
// least recently used is closed, handing its unused permits back.
func Middleware(c *client.Client, opts ...Option) func(http.Handler) http.Handler {
	m := newKeyedLimits(c, opts)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if m.serve(w, r) {
				next.ServeHTTP(w, r)
			}
		})
	}
}

// EchoMiddleware is Middleware for echo.
func EchoMiddleware(c *client.Client, opts ...Option) echo.MiddlewareFunc {
	m := newKeyedLimits(c, opts)
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(ec echo.Context) error {
			if !m.serve(ec.Response(), ec.Request()) {
				return nil // answered
			}
			return next(ec)
		}
	}
}

// serve decides one request and answers it unless it may go on.
func (m *keyedLimits) serve(w http.ResponseWriter, r *http.Request) bool {
	name := limiterName(m.cfg.prefix, m.cfg.key(r))
	var (
		l    *client.Limiter
		ok   bool
		next time.Duration
		err  error
	)
	// Eviction never closes a handle in use, but another user of the client
	// may close it (handles are shared by name): then a new one is made.
	for range 3 {
		var kh *keyedHandle
		if kh, err = m.acquire(name); err != nil {
			break
		}
		l = kh.l
		ok, next, err = l.AllowNext(r.Context())
		m.release(kh, errors.Is(err, client.ErrClosed))
		if !errors.Is(err, client.ErrClosed) {
			break
		}
	}
	h := w.Header()
	if err != nil {
		status, slug, title := http.StatusInternalServerError, wire.ProblemInternal, "Rate limiter misconfigured"
		detail := "the rate limit for this request cannot be decided: " + err.Error()
		if errors.Is(err, limiter.ErrUnavailable) || errors.Is(err, client.ErrClosed) || r.Context().Err() != nil {
			status, slug, title = http.StatusServiceUnavailable, wire.ProblemUnavailable, "Rate limiter unavailable"
		}
		writeProblem(w, status, slug, title, detail)
		return false
	}
	quota, window := m.policy(l)
	retry := int64(math.Ceil(next.Seconds()))
	remaining := 0
	if next == 0 {
		remaining = 1
	}
	pol := sfString(m.cfg.policy)
	h.Set("RateLimit-Policy", pol+";q="+strconv.FormatInt(quota, 10)+";w="+strconv.FormatInt(int64(window/time.Second), 10))
	h.Set("RateLimit", pol+";r="+strconv.Itoa(remaining)+";t="+strconv.FormatInt(retry, 10))
	if ok {
		return true
	}
	retry = max(retry, 1)
	h.Set("Retry-After", strconv.FormatInt(retry, 10))
	writeProblem(w, http.StatusTooManyRequests, wire.ProblemRateLimited, wire.Title(wire.ProblemRateLimited),
		"the rate limit for this client is exhausted; retry in "+strconv.FormatInt(retry, 10)+" s")
	return false
}

// policy returns the advertised quota and window.
func (m *keyedLimits) policy(l *client.Limiter) (int64, time.Duration) {
	if m.cfg.quota > 0 {
		return m.cfg.quota, m.cfg.window
	}
	rate := l.Rate()
	if rate <= 0 {
		return 1, time.Second // not known before the first grant
	}
	w := max(1, math.Ceil(1/rate)) // seconds holding at least one permit
	return int64(math.Max(1, math.Floor(rate*w+1e-9))), time.Duration(w) * time.Second
}

// maxName is the longest limiter name (limitd.CheckName).
const maxName = 128

// limiterName makes a valid limiter name of prefix+key, as WithLimiterPrefix
// tells; a name not starting with a letter or digit gets a leading 'k'.
func limiterName(prefix, key string) string {
	name := prefix + key
	if limitd.CheckName(name) == nil {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	hash := "-" + hex.EncodeToString(sum[:8])
	var b strings.Builder
	for i := 0; i < len(name) && b.Len() < maxName-len(hash)-1; i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case b.Len() > 0 && (c == '.' || c == '_' || c == ':' || c == '-'):
		default:
			if b.Len() == 0 {
				b.WriteByte('k')
			}
			c = '-'
		}
		b.WriteByte(c)
	}
	if b.Len() == 0 {
		b.WriteByte('k')
	}
	return b.String() + hash
}

// sfString writes s as a structured-field string (RFC 8941 §3.3.3): quoted,
// with '"' and '\' escaped and anything outside printable ASCII dropped.
func sfString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c >= 0x20 && c < 0x7f:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// writeProblem answers with an RFC 9457 problem of limitd's types
// (wire.ProblemType(slug)); the title says what the middleware, not limitd's
// server, could not do.
func writeProblem(w http.ResponseWriter, status int, slug, title, detail string) {
	body, _ := json.Marshal(wire.Problem{Type: wire.ProblemType(slug), Title: title, Status: status, Detail: detail})
	h := w.Header()
	h.Set("Content-Type", wire.ProblemMediaType)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// Option configures Middleware and EchoMiddleware.
type Option func(*middlewareConfig)

type middlewareConfig struct {
	key     func(*http.Request) string
	prefix  string
	policy  string
	quota   int64
	window  time.Duration
	maxKeys int
}

// KeyByHeader keys requests by a request header, such as "X-API-Key".
// Requests without it share the key "".
func KeyByHeader(name string) Option {
	return KeyFunc(func(r *http.Request) string { return r.Header.Get(name) })
}

// KeyFunc keys requests by any function of the request.
func KeyFunc(f func(*http.Request) string) Option {
	return func(c *middlewareConfig) { c.key = f }
}

// WithLimiterPrefix puts a prefix before each key to make the limiter's name:
// with "ip:", the key 192.0.2.7 is limited by "ip:192.0.2.7" (an instance of a
// template such as "ip:*"). A key that is no valid name (limitd.CheckName) has
// its other characters replaced by '-' and a hash of the key appended, so
// distinct keys keep distinct limiters; a name too long keeps its start.
func WithLimiterPrefix(p string) Option {
	return func(c *middlewareConfig) { c.prefix = p }
}

// WithPolicy sets the policy the RateLimit fields advertise: its name, and a
// quota of permits per window. By default it is "default" at the limiter's
// own rate, per second (per the shortest whole number of seconds holding one
// permit, for rates below 1/s). It changes what is advertised, not the limit.
func WithPolicy(name string, quota int64, window time.Duration) Option {
	return func(c *middlewareConfig) {
		c.policy, c.quota, c.window = name, max(quota, 1), max(window.Round(time.Second), time.Second)
	}
}

// WithMaxKeys bounds how many keys' handles the middleware keeps (default 10000).
func WithMaxKeys(n int) Option {
	return func(c *middlewareConfig) { c.maxKeys = max(n, 1) }
}

// remoteIP is the host part of the request's remote address.
func remoteIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
