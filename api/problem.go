package api

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/wire"
)

// problem is an RFC 9457 problem detail (wire.Problem). Handlers return one
// as their error when they have classified a failure themselves; handleError
// turns every other error into one.
type problem struct {
	wire.Problem
	slug  string // the type without its prefix: the metrics label
	cause error  // logged for a 5xx, never shown
	// retryAfter is a 503's Retry-After in seconds ("": 1).
	retryAfter string
}

func (p *problem) Error() string { return p.Detail }

// internalDetail is what a 500 says: the cause is logged, never shown.
const internalDetail = "limitd failed to answer this request; the failure is logged with its request id"

// statusClientClosed is logged and counted when the client went away before
// the answer (nginx's 499); nobody receives it.
const statusClientClosed = 499

func newProblem(status int, slug, detail string) *problem {
	return &problem{Problem: wire.NewProblem(status, slug, detail), slug: slug}
}

// invalid is a 400 naming the field at fault ("" when no one field is).
func invalid(field, detail string) *problem {
	p := newProblem(http.StatusBadRequest, wire.ProblemInvalid, detail)
	p.Field = field
	return p
}

// panicError marks an error recovered from a panic.
type panicError struct{ err error }

func (e *panicError) Error() string { return "panic: " + e.err.Error() }
func (e *panicError) Unwrap() error { return e.err }

// problemOf classifies any error a handler, a middleware or echo itself
// returned; c is nil for an error of no request.
func (s *server) problemOf(err error, c echo.Context) *problem {
	var (
		p   *problem
		he  *echo.HTTPError
		fe  *limiter.FieldError
		mbe *http.MaxBytesError
		pe  *panicError
		nh  *core.NotHeldError
	)
	var ctxErr error
	if c != nil {
		ctxErr = c.Request().Context().Err()
	}
	switch {
	case errors.As(err, &p):
		return p
	case errors.As(err, &pe):
		p = newProblem(http.StatusInternalServerError, wire.ProblemInternal, internalDetail)
	case errors.As(err, &mbe):
		p = tooLarge(mbe.Limit)
	case c != nil && errors.As(err, &he):
		p = s.echoProblem(he, c)
	case errors.As(err, &nh):
		p = newProblem(http.StatusNotFound, wire.ProblemNotFound, nh.Detail)
		p.Field = nh.Field
	case errors.As(err, &fe):
		p = invalid(fe.Field, fe.Error())
		if fe.Value != nil { // the offending value clipped
			p.Detail = fmt.Sprintf("%s: %s (got %s)", fe.Field, fe.Rule, clip(fmt.Sprint(fe.Value)))
		}
	case errors.Is(err, limiter.ErrInvalid):
		p = invalid("", err.Error())
	case errors.Is(err, core.ErrNotFound):
		p = newProblem(http.StatusNotFound, wire.ProblemNotFound, err.Error())
	case errors.Is(err, core.ErrConflict):
		p = newProblem(http.StatusConflict, wire.ProblemConflict, err.Error())
	// The store reports a request that ran out of time as ErrUnavailable;
	// the request's own context tells the two apart.
	case errors.Is(ctxErr, context.DeadlineExceeded):
		p = s.timeoutProblem()
	case errors.Is(ctxErr, context.Canceled):
		p = newProblem(statusClientClosed, wire.ProblemClientClosed, "the client closed the request")
	case errors.Is(err, core.ErrUnavailable):
		if c != nil {
			err = s.core.Explain(c.Request().Context(), err)
		}
		p = unavailableProblem(s.core, err)
	default:
		p = newProblem(http.StatusInternalServerError, wire.ProblemInternal, internalDetail)
	}
	p.cause = err
	return p
}

// timeoutProblem is the 503 of a request that ran out of time.
func (s *server) timeoutProblem() *problem {
	return newProblem(http.StatusServiceUnavailable, wire.ProblemTimeout,
		fmt.Sprintf("the request did not finish within %s (Redis too slow or unreachable); retry later", s.timeout))
}

// timedOut is err, or the timeout problem when err is Redis failing to
// answer in time for deadline (a request whose context has no timer).
func (s *server) timedOut(err error, deadline time.Time) error {
	if err == nil || time.Now().Before(deadline) || !errors.Is(err, core.ErrUnavailable) {
		return err
	}
	p := s.timeoutProblem()
	p.cause = err
	return p
}

// unknownLayout reports whether err is one limiter's state in a layout this
// limitd does not read: that limiter's condition alone, where every other
// condition is Redis's.
func unknownLayout(err error) bool {
	u, ok := core.UnavailabilityOf(err)
	return ok && u.OneLimiter
}

// maxEcho is how much of a client's input a problem repeats.
const maxEcho = 64

// maxDetail bounds a whole detail, whatever error it came from.
const maxDetail = 512

// clip cuts s to maxEcho characters, marking a cut with an ellipsis, so that
// a problem never repeats a long input back (nor bloats a log line with it).
func clip(s string) string { return clipN(s, maxEcho) }

func clipN(s string, max int) string {
	n := 0
	for i := range s {
		if n == max {
			return s[:i] + "…"
		}
		n++
	}
	return s
}

// quote is %q of s clipped: the quoted prefix, then an ellipsis and the
// whole length when s was cut.
func quote(s string) string {
	if c := clip(s); c != s {
		return fmt.Sprintf("%q… (%d bytes)", strings.TrimSuffix(c, "…"), len(s))
	}
	return fmt.Sprintf("%q", s)
}

// echoProblem turns echo's own errors (no route, wrong method, ...) into problems.
func (s *server) echoProblem(he *echo.HTTPError, c echo.Context) *problem {
	r := c.Request()
	switch he.Code {
	case http.StatusNotFound:
		return newProblem(http.StatusNotFound, wire.ProblemNotFound, fmt.Sprintf("no route for %s %s; see /openapi.yaml", clip(r.Method), clip(r.URL.Path)))
	case http.StatusMethodNotAllowed:
		return newProblem(http.StatusMethodNotAllowed, wire.ProblemMethodNotAllowed,
			fmt.Sprintf("%s is not allowed on %s; allowed: %s", clip(r.Method), clip(r.URL.Path), c.Response().Header().Get(echo.HeaderAllow)))
	case http.StatusRequestEntityTooLarge:
		return tooLarge(s.bodyLimit)
	case http.StatusUnauthorized:
		return newProblem(http.StatusUnauthorized, wire.ProblemUnauthorized, fmt.Sprint(he.Message))
	}
	if he.Code >= 400 && he.Code < 500 {
		p := newProblem(he.Code, wire.ProblemInvalid, fmt.Sprint(he.Message))
		p.Title = http.StatusText(he.Code)
		return p
	}
	return newProblem(http.StatusInternalServerError, wire.ProblemInternal, internalDetail)
}

func tooLarge(limit int64) *problem {
	return newProblem(http.StatusRequestEntityTooLarge, wire.ProblemTooLarge, fmt.Sprintf("the request body is over the limit of %d bytes", limit))
}

// ctxProblem is the echo context key of the problem answered, for the access log.
const ctxProblem = "limitd.problem"

// handleError is echo's HTTPErrorHandler: every error, echo's own 404 and 405
// included, becomes an application/problem+json answer.
func (s *server) handleError(err error, c echo.Context) {
	p := s.problemOf(err, c)
	c.Set(ctxProblem, p)
	s.m.errors.WithLabelValues(p.slug).Inc()
	var pe *panicError
	switch {
	case p.Status == http.StatusInternalServerError && !errors.As(p.cause, &pe): // Recover logged a panic with its stack
		s.log.Error("request failed", "err", p.cause, "request_id", requestID(c))
	case p.Status == http.StatusServiceUnavailable: // an outage: see failureWindow
		if ok, leftOut := s.failures.log(p.slug, time.Now()); ok {
			s.log.Warn("request failed", "problem", p.slug, "err", p.cause, "request_id", requestID(c),
				"more_since_last_logged", leftOut)
		}
	}
	res := c.Response()
	if res.Committed {
		return
	}
	dropUnreadBody(c)
	switch p.Status {
	case http.StatusUnauthorized:
		res.Header().Set("WWW-Authenticate", `Bearer realm="limitd"`)
	case http.StatusServiceUnavailable:
		res.Header().Set("Retry-After", cmp.Or(p.retryAfter, "1"))
	}
	p.Detail = clipN(p.Detail, maxDetail)
	b, _ := json.Marshal(p.Problem) // a problem always encodes
	// HEAD too: net/http drops the body.
	if err := c.Blob(p.Status, wire.ProblemMediaType, b); err != nil {
		s.log.Debug("writing a problem response", "err", err, "request_id", requestID(c))
	}
}

func requestID(c echo.Context) string {
	return c.Response().Header().Get(echo.HeaderXRequestID)
}

// redisCauses words each cause of unavailability core knows (core.RedisCause)
// on the wire, once for every reader: the problem type of its 503s, and the
// "redis" of the event status, of /readyz and of those problems.
var redisCauses = map[core.RedisCause]struct{ slug, redis string }{
	core.RedisCauseOther:        {wire.ProblemUnavailable, wire.RedisUnavailable},
	core.RedisCauseUnauthorized: {wire.ProblemRedisUnauthorized, wire.RedisUnauthorized},
	core.RedisCauseLoading:      {wire.ProblemRedisLoading, wire.RedisLoading},
	core.RedisCauseReadOnly:     {wire.ProblemRedisReadOnly, wire.RedisReadOnly},
}

// unavailableProblem is the 503 of err, which matches core.ErrUnavailable:
// its type and "redis" say the cause, its detail the condition and its fix.
func unavailableProblem(svc *core.Service, err error) *problem {
	w := redisCauses[core.RedisCauseOf(err)]
	p := newProblem(http.StatusServiceUnavailable, w.slug, unavailableDetail(svc, err))
	if !errors.Is(err, core.ErrDataLost) && !unknownLayout(err) {
		p.Redis = w.redis // a data loss or one limiter's layout is not Redis failing
	}
	return p
}

// unavailableDetail names the condition that keeps Redis from serving
// (READONLY, WRONGPASS, timeout, ...) and, for a known cause, the setting to
// fix, without echoing Redis' own text, which may hold addresses.
func unavailableDetail(svc *core.Service, err error) string {
	const rest = "so limitd can neither decide nor change limiters"
	if errors.Is(err, core.ErrDataLost) {
		return "Redis lost limitd's data (its marker is gone: a restart without persistence?); limitd is applying its boot configuration again"
	}
	u, ok := svc.Unavailability(err)
	if !ok {
		return "Redis is unavailable, " + rest + "; retry later"
	}
	if u.OneLimiter {
		return "this limiter cannot be served by this limitd (" + u.Description + ")"
	}
	if u.Fix != "" {
		return "Redis cannot serve (" + u.Description + "), " + rest + ": " + u.Fix
	}
	return "Redis is unavailable (" + u.Description + "), " + rest + "; retry later"
}

// redisUp is the status's "redis" while Redis serves: embedded for serve's
// own in-memory Redis, which no other process shares.
func redisUp(embedded bool) string {
	if embedded {
		return wire.RedisEmbedded
	}
	return wire.RedisOK
}
