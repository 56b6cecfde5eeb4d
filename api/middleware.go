package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/limitd/limitd/wire"
)

// dropBadRequestID removes an incoming X-Request-Id that is not a short
// token, so that a client cannot forge or bloat log lines with it;
// middleware.RequestID then makes a fresh one.
func dropBadRequestID(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Request().Header
		if id := h.Get(echo.HeaderXRequestID); id != "" && !tokenLike(id) {
			h.Del(echo.HeaderXRequestID)
		}
		return next(c)
	}
}

func tokenLike(s string) bool {
	if len(s) > 128 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.:", r)) {
			return false
		}
	}
	return true
}

// observe writes every error as a problem at once (so the status is known
// here), then counts, times and logs the request.
func (s *server) observe(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		err := next(c)
		if err != nil {
			c.Error(err)
		}
		latency := time.Since(start)
		r := c.Request()
		route := s.routes[c.Path()]
		if route == "" || errors.Is(err, echo.ErrNotFound) { // echo's "no route" handler
			route = "unmatched"
		}
		method := methodLabel(r.Method)
		status := c.Response().Status
		s.m.requests.WithLabelValues(method, route, strconv.Itoa(status)).Inc()
		s.m.duration.WithLabelValues(method, route).Observe(latency.Seconds())

		if !s.log.Enabled(r.Context(), slog.LevelInfo) {
			return nil
		}
		attrs := []slog.Attr{
			slog.String("method", r.Method), slog.String("route", route), slog.String("path", r.URL.Path),
			slog.Int("status", status), slog.Duration("latency", latency), slog.String("request_id", requestID(c)),
		}
		if p, ok := c.Get(ctxProblem).(*problem); ok {
			attrs = append(attrs, slog.String("problem", p.slug), slog.String("detail", p.Detail))
			if p.Field != "" {
				attrs = append(attrs, slog.String("field", p.Field))
			}
		}
		// The request's own context may be cancelled by now; the log line is
		// still wanted.
		s.log.LogAttrs(context.WithoutCancel(r.Context()), slog.LevelInfo, "http request", attrs...)
		return nil
	}
}

// methodLabel keeps made-up methods from adding metric series.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions:
		return m
	}
	return "other"
}

// limits gives the request its deadline and caps its body: a declared
// Content-Length over the limit is refused before reading, any other body
// fails with http.MaxBytesError when it grows past it.
func (s *server) limits(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		if r.ContentLength > s.bodyLimit {
			return tooLarge(s.bodyLimit)
		}
		ctx, cancel := context.WithTimeout(r.Context(), s.timeout)
		defer cancel()
		r = r.WithContext(ctx)
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = http.MaxBytesReader(c.Response(), r.Body, s.bodyLimit)
		}
		if hasBody(r) {
			// Only while the body is read: readBody lifts it, because once a
			// request is read net/http watches the connection, and a read
			// deadline passing then would cancel a request still running.
			// Servers that cannot set deadlines (a test recorder) skip it.
			_ = http.NewResponseController(c.Response()).SetReadDeadline(time.Now().Add(s.bodyTimeout))
			c.Set(ctxBodyTimeout, s.bodyTimeout)
		}
		c.SetRequest(r)
		if err := next(c); err != nil {
			// Classify now: once cancel runs, every error would look like a
			// client that went away.
			return s.problemOf(err, c)
		}
		return nil
	}
}

// hasBody reports whether a request came with a body (a Content-Length
// other than 0, or chunked).
func hasBody(r *http.Request) bool {
	return r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody
}

// ctxBodyRead is set once a handler started reading the request body;
// ctxBodyTimeout holds the time it has for that.
const (
	ctxBodyRead    = "limitd.body-read"
	ctxBodyTimeout = "limitd.body-timeout"
)

// dropUnreadBody is called before an error response: if the request's body
// was never read (a refused token, a body over the limit, no route), the
// connection is closed after the answer instead of net/http reading up to
// 256 KiB of a body nobody wants first, at whatever pace the client sends it.
func dropUnreadBody(c echo.Context) {
	if !hasBody(c.Request()) || c.Get(ctxBodyRead) != nil {
		return
	}
	closeAfter(c)
}

// closeAfter ends the connection after this response, reading nothing more
// from it.
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
// leaves writes open while reads are closed.
func newAuth(adminToken, token string) auth {
	a := auth{read: open, admin: open}
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

func open(next echo.HandlerFunc) echo.HandlerFunc { return next }

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
