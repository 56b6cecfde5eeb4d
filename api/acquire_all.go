package api

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/wire"
)

// acquireAllBody is POST /v1/acquire's body as read: each request is decoded
// on its own, so that a fault in one is named requests[i].<field>.
type acquireAllBody struct {
	Requests []json.RawMessage `json:"requests"`
	MaxWait  *limiter.Duration `json:"max_wait,omitempty"`
	Block    *bool             `json:"block,omitempty"`
}

// acquireAll takes permits from several limiters, all or nothing
// (core.AcquireAll): 200 when all granted, 429 with Retry-After (the
// longest refusal's) and every limiter's answer when one refused.
func (s *server) acquireAll(c echo.Context) error {
	var body acquireAllBody
	if err := decodeBody(c, &body); err != nil {
		return err
	}
	if len(body.Requests) == 0 {
		return required("requests", `a list of {"name","permits"}, one per limiter`)
	}
	if len(body.Requests) > core.MaxAcquireAll {
		return invalid("requests", "requests: at most "+strconv.Itoa(core.MaxAcquireAll)+" limiters in one call")
	}
	r := core.AcquireAllRequest{Requests: make([]core.LimiterPermits, len(body.Requests)), MaxWait: limitd.Forever}
	for i, raw := range body.Requests {
		prefix := "requests[" + strconv.Itoa(i) + "]"
		var q wire.LimiterPermits
		if err := decodeStrict(raw, &q, prefix); err != nil {
			return err
		}
		if q.Name == "" {
			return required(prefix+".name", "the limiter's name")
		}
		r.Requests[i] = core.LimiterPermits{Name: q.Name, Permits: 1}
		if q.Permits != nil {
			r.Requests[i].Permits = *q.Permits
		}
	}
	if body.MaxWait != nil {
		r.MaxWait = time.Duration(*body.MaxWait)
	}
	if body.Block != nil {
		r.Block = *body.Block
	}
	res, err := s.core.AcquireAll(c.Request().Context(), r)
	if err != nil {
		return err
	}
	out := wire.AcquireAll{Granted: res.Granted, Results: make([]json.RawMessage, len(res.Results))}
	var retry int64
	for i, d := range res.Results {
		out.Results[i] = answerJSON(d)
		if !d.Granted {
			retry = max(retry, d.RetryAfter)
		}
	}
	if !res.Granted {
		setRetryAfter(c, retry)
		return c.JSON(http.StatusTooManyRequests, out)
	}
	return c.JSON(http.StatusOK, out)
}

// answerJSON is a rate decision's answer, as its own acquire answers it.
func answerJSON(d limitd.Decision) json.RawMessage {
	v, appendJSON := answerOf(d)
	if appendJSON == nil {
		b, _ := json.Marshal(v) // plain integers and booleans: cannot fail
		return b
	}
	return appendJSON(nil)
}

func grantedOf(d limitd.Decision) wire.Granted {
	return wire.Granted{Granted: true, Permits: d.Permits, Delay: d.Delay, Scheduled: d.Scheduled,
		Start: d.Start, Lateness: d.Lateness, Wait: d.Wait, Version: d.Version, Now: d.Now}
}

func deniedOf(d limitd.Decision) wire.Denied {
	return wire.Denied{RetryAfter: d.RetryAfter, Delay: d.Delay, Wait: d.Wait, Version: d.Version, Now: d.Now}
}
