package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/limitd/limitd/core"
)

// eventsPath is the route of the event stream (the request timeout does not
// apply to it).
const eventsPath = "/v1/events"

const (
	defaultEventInterval = time.Second
	minEventInterval     = 100 * time.Millisecond
	maxEventInterval     = time.Minute
	// maxEventLimiters bounds the limiters one stream samples (a sample is
	// one pipeline of their live states, core.Sampler).
	maxEventLimiters = 200
	// keepAlive is how often a quiet stream sends a comment, so that proxies
	// keep it open.
	keepAlive = 15 * time.Second
)

// events streams Server-Sent Events: every interval an "state" event per
// watched limiter (what GET /v1/limiters/{name} answers: config, version,
// live state or holders), read from Redis, and a "config" event for each
// config change as it is published ({"limiter","version"}, version 0:
// deleted; {"templates":true}). ?limiters=a,b watches those; without it,
// every limiter (the first maxEventLimiters in name order), the list read
// again after a change. ?interval= sets the sampling interval (100ms–1m,
// default 1s). A limiter that disappears is sent as a "config" event with
// version 0 and no longer sampled.
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
	var names []string
	all := !q.Has("limiters")
	if !all {
		for n := range strings.SplitSeq(q.Get("limiters"), ",") {
			if n = strings.TrimSpace(n); n == "" {
				continue
			}
			if err := core.CheckName("limiters", n); err != nil {
				return err
			}
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
		if len(names) == 0 || len(names) > maxEventLimiters {
			return invalid("limiters", fmt.Sprintf("limiters: must name from 1 to %d limiters, comma-separated (got %d)", maxEventLimiters, len(names)))
		}
	}
	ctx := c.Request().Context()
	changes := s.core.Changes(ctx) // subscribed before the first sample: no change falls between
	if all {
		var err error
		if names, err = s.allNames(ctx); err != nil {
			return err
		}
	}
	w := c.Response()
	// The server's read timeout, counted from the request's start, would
	// end the stream (net/http cancels a request whose connection's read
	// deadline passes): a stream reads nothing more, and lasts as long as
	// its client listens. Servers that cannot set deadlines skip it.
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	h := w.Header()
	h.Set(echo.HeaderContentType, "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	send := func(event string, v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b); err != nil {
			return err
		}
		w.Flush()
		return nil
	}
	sampler := s.core.Sampler() // configs kept, live states read in one pipeline
	sample := func() error {
		ls, errs := sampler.GetAll(ctx, names)
		kept := names[:0]
		for i, n := range names {
			l, err := ls[i], errs[i]
			switch {
			case ctx.Err() != nil:
				return ctx.Err()
			case errors.Is(err, core.ErrNotFound):
				if err := send("config", core.Change{Limiter: n}); err != nil {
					return err
				}
				if !all {
					kept = append(kept, n) // named: it may come back
				}
				continue
			case unknownLayout(err):
				// Its state only a newer limitd reads (its own API calls
				// answer 503 saying so): the others are still sampled.
				kept = append(kept, n)
				continue
			case err != nil:
				return send("error", s.problemOf(err, c).Problem) // Redis down: the client reconnects
			}
			kept = append(kept, n)
			if err := send("state", viewOf(l)); err != nil {
				return err
			}
		}
		names = kept
		return nil
	}
	if err := sample(); err != nil {
		return nil // the client went away, or the answer is written already
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	quiet := time.NewTimer(keepAlive)
	defer quiet.Stop()
	relist := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case ch, ok := <-changes:
			if !ok {
				return nil
			}
			if !all && !ch.Templates && !slices.Contains(names, ch.Limiter) {
				continue
			}
			sampler.Changed(ch.Limiter)
			relist = relist || all
			if err := send("config", ch); err != nil {
				return nil
			}
		case <-tick.C:
			if relist {
				if n, err := s.allNames(ctx); err == nil {
					names, relist = n, false
				}
			}
			if err := sample(); err != nil {
				return nil
			}
		case <-quiet.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return nil
			}
			w.Flush()
		}
		quiet.Reset(keepAlive)
	}
}

// allNames is every limiter's name, the first maxEventLimiters in name order.
func (s *server) allNames(ctx context.Context) ([]string, error) {
	page, err := s.core.List(ctx, "", maxEventLimiters)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(page.Limiters))
	for i, l := range page.Limiters {
		names[i] = l.Name
	}
	return names, nil
}
