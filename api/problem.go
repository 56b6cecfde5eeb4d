package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/store"
)

// problem is an RFC 9457 problem detail. Handlers return one as their error
// when they have classified a failure themselves; handleError turns every
// other error into one.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	// Field names the one input at fault: a JSON field (a dotted path inside
	// nested objects: "limiter.rate"), a path parameter or a query parameter.
	Field string `json:"field,omitempty"`

	slug  string // the type without its prefix: the metrics label
	cause error  // logged for a 5xx, never shown
}

func (p *problem) Error() string { return p.Detail }

// typePrefix makes problem types absolute URIs (RFC 9457 §3.1.1) without
// promising a page behind them.
const typePrefix = "urn:limitd:problem:"

// statusClientClosed is logged and counted when the client went away before
// the answer (nginx's 499); nobody receives it.
const statusClientClosed = 499

var titles = map[string]string{
	"invalid":                "Bad input",
	"unauthorized":           "Missing or wrong token",
	"not-found":              "Not found",
	"method-not-allowed":     "Method not allowed",
	"conflict":               "Conflict",
	"too-large":              "Request body too large",
	"unsupported-media-type": "Unsupported media type",
	"client-closed":          "Client closed the request",
	"internal":               "Internal error",
	"unavailable":            "Redis unavailable",
	"timeout":                "Request timed out",
}

func newProblem(status int, slug, detail string) *problem {
	return &problem{Type: typePrefix + slug, Title: titles[slug], Status: status, Detail: detail, slug: slug}
}

// invalid is a 400 naming the field at fault ("" when no one field is).
func invalid(field, detail string) *problem {
	p := newProblem(http.StatusBadRequest, "invalid", detail)
	p.Field = field
	return p
}

// panicError marks an error recovered from a panic.
type panicError struct{ err error }

func (e *panicError) Error() string { return "panic: " + e.err.Error() }
func (e *panicError) Unwrap() error { return e.err }

// problemOf classifies any error a handler, a middleware or echo itself
// returned.
func (s *server) problemOf(err error, c echo.Context) *problem {
	var (
		p   *problem
		he  *echo.HTTPError
		fe  *limiter.FieldError
		mbe *http.MaxBytesError
		pe  *panicError
	)
	ctxErr := c.Request().Context().Err()
	switch {
	case errors.As(err, &p):
		return p
	case errors.As(err, &pe):
		p = newProblem(http.StatusInternalServerError, "internal", "limitd failed to answer this request; the failure is logged with its request id")
	case errors.As(err, &mbe):
		p = tooLarge(mbe.Limit)
	case errors.As(err, &he):
		p = s.echoProblem(he, c)
	case errors.As(err, &fe):
		p = invalid(fe.Field, fe.Error())
	case errors.Is(err, limiter.ErrInvalid):
		p = invalid("", err.Error())
	case errors.Is(err, store.ErrNotFound):
		p = newProblem(http.StatusNotFound, "not-found", err.Error())
	case errors.Is(err, store.ErrConflict):
		p = newProblem(http.StatusConflict, "conflict", err.Error())
	// The store reports a request that ran out of time as ErrUnavailable;
	// the request's own context tells the two apart.
	case errors.Is(ctxErr, context.DeadlineExceeded):
		p = newProblem(http.StatusServiceUnavailable, "timeout",
			fmt.Sprintf("the request did not finish within %s (Redis too slow or unreachable); retry later", s.timeout))
	case errors.Is(ctxErr, context.Canceled):
		p = newProblem(statusClientClosed, "client-closed", "the client closed the request")
	case errors.Is(err, store.ErrUnavailable), errors.Is(err, store.ErrClosed):
		p = newProblem(http.StatusServiceUnavailable, "unavailable",
			"Redis is unavailable, so limitd can neither decide nor change limiters; retry later")
	default:
		p = newProblem(http.StatusInternalServerError, "internal", "limitd failed to answer this request; the failure is logged with its request id")
	}
	p.cause = err
	return p
}

// echoProblem turns echo's own errors (no route, wrong method, ...) into
// problems.
func (s *server) echoProblem(he *echo.HTTPError, c echo.Context) *problem {
	r := c.Request()
	switch he.Code {
	case http.StatusNotFound:
		return newProblem(http.StatusNotFound, "not-found", fmt.Sprintf("no route for %s %s; see /openapi.yaml", r.Method, r.URL.Path))
	case http.StatusMethodNotAllowed:
		return newProblem(http.StatusMethodNotAllowed, "method-not-allowed",
			fmt.Sprintf("%s is not allowed on %s; allowed: %s", r.Method, r.URL.Path, c.Response().Header().Get(echo.HeaderAllow)))
	case http.StatusRequestEntityTooLarge:
		return tooLarge(s.bodyLimit)
	case http.StatusUnauthorized:
		return newProblem(http.StatusUnauthorized, "unauthorized", fmt.Sprint(he.Message))
	}
	if he.Code >= 400 && he.Code < 500 {
		p := newProblem(he.Code, "invalid", fmt.Sprint(he.Message))
		p.Title = http.StatusText(he.Code)
		return p
	}
	return newProblem(http.StatusInternalServerError, "internal", "limitd failed to answer this request; the failure is logged with its request id")
}

func tooLarge(limit int64) *problem {
	return newProblem(http.StatusRequestEntityTooLarge, "too-large", fmt.Sprintf("the request body is over the limit of %d bytes", limit))
}

// ctxProblem is the echo context key under which handleError leaves the
// problem it answered, for the access log.
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
	case p.Status == http.StatusServiceUnavailable:
		s.log.Warn("request failed", "problem", p.slug, "err", p.cause, "request_id", requestID(c))
	}
	res := c.Response()
	if res.Committed {
		return
	}
	switch p.Status {
	case http.StatusUnauthorized:
		res.Header().Set("WWW-Authenticate", `Bearer realm="limitd"`)
	case http.StatusServiceUnavailable:
		res.Header().Set("Retry-After", "1")
	}
	b, _ := json.Marshal(p) // a problem always encodes
	if c.Request().Method == http.MethodHead {
		err = c.NoContent(p.Status)
	} else {
		err = c.Blob(p.Status, "application/problem+json", b)
	}
	if err != nil {
		s.log.Debug("writing a problem response", "err", err, "request_id", requestID(c))
	}
}

func requestID(c echo.Context) string {
	return c.Response().Header().Get(echo.HeaderXRequestID)
}
