package api

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/wire"
)

// eventsPath is the route of the event stream (no request timeout).
const eventsPath = "/v1/events"

const (
	defaultEventInterval = time.Second
	minEventInterval     = 100 * time.Millisecond
	maxEventInterval     = time.Minute
	// maxEventLimiters bounds the limiters a stream that watches every
	// limiter is sent (the first in name order).
	maxEventLimiters = 200
	// keepAlive is how often a quiet stream sends a comment, for proxies.
	keepAlive = 15 * time.Second
)

// events streams Server-Sent Events, as openapi.yaml's /v1/events says,
// from the handler's eventHub; past Options.MaxEventStreams open streams it
// is a 503.
func (s *server) events(c echo.Context) error {
	q := c.QueryParams()
	interval := defaultEventInterval
	if v := q.Get("interval"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < minEventInterval || d > maxEventInterval {
			return invalid("interval", fmt.Sprintf("interval: must be a duration from %v to %v (got %s)", minEventInterval, maxEventInterval, quote(v)))
		}
		interval = d
	}
	var names []string // nil: every limiter
	if q.Has("limiters") {
		var err error
		if names, err = limiterNames(q.Get("limiters")); err != nil {
			return err
		}
	}
	st := newStream(names, interval)
	hasStatus, err := s.hub.join(st)
	if err != nil {
		return err
	}
	defer s.hub.leave(st)
	ctx := c.Request().Context()

	w := c.Response()
	rc := http.NewResponseController(w)
	// The server's read timeout would end the stream (net/http cancels a
	// request whose connection's read deadline passes).
	_ = rc.SetReadDeadline(time.Time{})
	// Each write sets its own deadline; none outlasts the request, since
	// the connection may serve another after it.
	defer func() {
		st.writing(nil)
		_ = rc.SetWriteDeadline(time.Time{})
	}()
	h := w.Header()
	h.Set(echo.HeaderContentType, "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)

	var buf []byte
	slow := false // the client did not read: dropped
	defer func() {
		if slow {
			s.m.eventStreamsDropped.Inc()
			s.log.Info("event stream dropped: its client does not read", "request_id", requestID(c))
		}
	}()
	// write sends b whole within streamWriteTimeout, and reports whether it did.
	stop := func() { _ = rc.SetWriteDeadline(time.Now()) }
	write := func(b []byte) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
		if !st.writing(stop) {
			slow = true // dropped since the last write
			return false
		}
		_, err := w.Write(b)
		if err == nil {
			err = rc.Flush()
		}
		slow = errors.Is(err, os.ErrDeadlineExceeded)
		return err == nil
	}
	take := func(it streamItem) {
		switch {
		case it.err != nil: // its first sample failed: the hub ends it
			buf = append(buf, encodeEvent("error", s.problemOf(it.err, nil).Problem)...)
		case it.round != nil:
			buf = st.appendRound(buf, it.round)
		default:
			buf = append(buf, it.change...)
		}
	}
	// The headers go out at once, then the status: the sampler's last, or
	// one worked out now.
	if !write(nil) {
		return nil
	}
	if !hasStatus {
		if !write(encodeEvent("status", s.sig.probe(ctx))) {
			return nil
		}
	}
	quiet := time.NewTimer(keepAlive)
	defer quiet.Stop()
	for {
		ended := false
	drain: // whatever else is waiting goes out in the same write
		for {
			select {
			case it, ok := <-st.out:
				if !ok {
					ended = true
					break drain
				}
				take(it)
			default:
				break drain
			}
		}
		if ended && st.dropped { // the hub's buffer for it is full
			slow = true
			return nil
		}
		if len(buf) > 0 {
			if !write(buf) {
				return nil
			}
			buf = buf[:0]
			quiet.Reset(keepAlive)
		}
		if ended {
			return nil // the server shuts down
		}
		select {
		case <-ctx.Done():
			return nil
		case it, ok := <-st.out:
			if !ok {
				slow = st.dropped
				return nil
			}
			take(it)
		case <-quiet.C:
			if !write([]byte(": keep-alive\n\n")) {
				return nil
			}
			quiet.Reset(keepAlive)
		}
	}
}

// limiterNames reads a limiters parameter: 1 to maxEventLimiters names,
// comma-separated, each once.
func limiterNames(v string) ([]string, error) {
	names := []string{}
	for n := range strings.SplitSeq(v, ",") {
		if n = strings.TrimSpace(n); n == "" {
			continue
		}
		if err := limitd.CheckNameAs("limiters", n); err != nil {
			return nil, err
		}
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	if len(names) == 0 || len(names) > maxEventLimiters {
		return nil, invalid("limiters", fmt.Sprintf("limiters: must name from 1 to %d limiters, comma-separated (got %d)", maxEventLimiters, len(names)))
	}
	return names, nil
}

// history answers GET /v1/history?limiters=a,b: each limiter's signals,
// oldest first, as Handler.Run sampled them, from this limitd's memory (no
// Redis call). A limiter not sampled has an empty list.
func (s *server) history(c echo.Context) error {
	names, err := limiterNames(c.QueryParam("limiters"))
	if err != nil {
		return err
	}
	h := s.sig.w.History(names)
	out := make(map[string][]wire.Signals, len(h))
	for n, ss := range h {
		out[n] = make([]wire.Signals, len(ss))
		for i, x := range ss {
			out[n][i] = historyOf(x)
		}
	}
	return c.JSON(http.StatusOK, wire.History{Step: int64(signalStep), Limiters: out})
}
