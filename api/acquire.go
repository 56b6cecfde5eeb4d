package api

import (
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/wire"
)

// Acquire is the API's hot path: a client may call it once per operation it
// paces, so its small bodies are decoded and encoded by hand (same
// strictness, same answers) rather than by reflection.

// acquirePath is the acquire's route. Its requests' contexts carry no
// deadline timer: the core gets the deadline (core.AcquireRequest.Deadline).
const acquirePath = "/v1/limiters/:name/acquire"

// acquire takes permits, or a concurrency limiter's slot (core.Acquire
// dispatches on the kind): 200, or 429 with Retry-After when not granted.
func (s *server) acquire(c echo.Context) error {
	deadline := time.Now().Add(s.timeout) // its context has none: see limits
	b, err := readBody(c)
	if err != nil {
		return err
	}
	var req acquireBody
	if len(b) > 0 {
		if req, err = decodeAcquire(b); err != nil {
			return err
		}
	}
	r := core.AcquireRequest{Name: c.Param("name"), Permits: 1, MaxWait: limitd.Forever, Block: req.block, Deadline: deadline,
		Given: core.Given{Permits: req.hasPermits, MaxWait: req.hasMaxWait, Block: req.hasBlock}}
	if req.hasPermits {
		r.Permits = req.permits
	}
	if req.hasMaxWait {
		r.MaxWait = req.maxWait
	}
	a, err := s.core.Acquire(c.Request().Context(), r)
	if err != nil {
		return s.timedOut(err, deadline)
	}
	if l := a.Slot; l != nil {
		if l.Shadow {
			return c.JSON(http.StatusOK, wire.SlotShadowed{Granted: true, Shadow: true, RetryAfter: l.RetryAfter, InUse: l.InUse, Limit: l.Limit})
		}
		if !l.Granted {
			setRetryAfter(c, l.RetryAfter)
			return c.JSON(http.StatusTooManyRequests, wire.SlotDenied{RetryAfter: l.RetryAfter, InUse: l.InUse, Limit: l.Limit})
		}
		return c.JSON(http.StatusOK, wire.SlotGranted{Granted: true, LeaseID: l.ID, Expires: l.Expires, InUse: l.InUse, Limit: l.Limit})
	}
	return answer(c, *a.Rate)
}

// answer answers a rate decision as an acquire does: 200 granted (or let
// through in shadow mode), else 429 with Retry-After.
func answer(c echo.Context, d limitd.Decision) error {
	status := http.StatusOK
	if !d.Granted {
		status = http.StatusTooManyRequests
		setRetryAfter(c, d.RetryAfter)
	}
	v, appendJSON := answerOf(d)
	if appendJSON == nil || pretty(c) {
		return c.JSON(status, v)
	}
	return writeJSON(c, status, appendJSON)
}

// answerOf is a rate decision's answer body: its value, and the encoding
// that writes it without reflection (nil: none).
func answerOf(d limitd.Decision) (any, func([]byte) []byte) {
	switch {
	case d.Shadow: // a refusal in shadow mode, let through
		return wire.Shadowed{Granted: grantedOf(d), Shadow: true, RetryAfter: d.RetryAfter}, nil
	case d.Granted && d.Window:
		g := grantedOf(d)
		g.Wait = 0
		w := wire.WindowGranted{Granted: g, Window: windowOf(d)}
		return w, w.AppendJSON
	case d.Granted:
		g := grantedOf(d)
		return g, g.AppendJSON
	case d.Window:
		v := deniedOf(d)
		v.Wait = 0
		w := wire.WindowDenied{Denied: v, Window: windowOf(d)}
		return w, w.AppendJSON
	}
	v := deniedOf(d)
	return v, v.AppendJSON
}

// windowOf is what a window limiter's decision adds: its wait is the
// permits left, its position the window's end.
func windowOf(d limitd.Decision) wire.Window {
	return wire.Window{Limit: d.Limit, Remaining: d.Wait, Reset: max(0, d.Position-d.Now), ResetAt: d.Position}
}

// setRetryAfter sets the Retry-After header: ns in whole seconds, rounded up.
func setRetryAfter(c echo.Context, ns int64) {
	c.Response().Header().Set("Retry-After", strconv.FormatInt((max(ns, 0)+1e9-1)/1e9, 10))
}

// pretty reports whether the answer is to be indented, as echo's c.JSON
// does when the query has pretty; only c.JSON indents.
func pretty(c echo.Context) bool {
	return c.Request().URL.RawQuery != "" && c.QueryParams().Has("pretty")
}

// jsonBuffers hold answers while they are written.
var jsonBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// writeJSON answers the JSON appendJSON writes, with a newline, as c.JSON would.
func writeJSON(c echo.Context, status int, appendJSON func([]byte) []byte) error {
	bp := jsonBuffers.Get().(*[]byte)
	b := append(appendJSON((*bp)[:0]), '\n')
	err := c.Blob(status, echo.MIMEApplicationJSON, b)
	*bp = b[:0]
	jsonBuffers.Put(bp)
	return err
}

// acquireBody is an acquire's body (wire.AcquireRequest) as read.
type acquireBody struct {
	permits                          int64
	maxWait                          time.Duration // negative is 0 (core)
	block                            bool
	hasPermits, hasMaxWait, hasBlock bool
}

// decodeAcquire reads a non-empty acquire body: the common ones by
// scanAcquire, any other by decodeAcquireStrict.
func decodeAcquire(b []byte) (acquireBody, error) {
	if a, ok := scanAcquire(b); ok {
		return a, nil
	}
	return decodeAcquireStrict(b)
}

// decodeAcquireStrict reads an acquire body through decodeStrict.
func decodeAcquireStrict(b []byte) (acquireBody, error) {
	var req wire.AcquireRequest
	if err := decodeStrict(b, &req, ""); err != nil {
		return acquireBody{}, err
	}
	var a acquireBody
	if req.Permits != nil {
		a.permits, a.hasPermits = *req.Permits, true
	}
	if req.MaxWait != nil {
		a.maxWait, a.hasMaxWait = time.Duration(*req.MaxWait), true
	}
	if req.Block != nil {
		a.block, a.hasBlock = *req.Block, true
	}
	return a, nil
}

// scanAcquire reads the common acquire bodies without reflection; ok is
// false for any body it does not read exactly as decodeStrict would (a
// fault, null, a number that is not an int64 literal, a string with
// escapes or beyond ASCII), which decodeStrict then reads.
func scanAcquire(b []byte) (a acquireBody, ok bool) {
	i := skipSpace(b, 0)
	if i == len(b) || b[i] != '{' {
		return a, false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return a, skipSpace(b, i+1) == len(b)
	}
	for {
		key, end, ok := scanString(b, i)
		if !ok {
			return a, false
		}
		i = skipSpace(b, end)
		if i == len(b) || b[i] != ':' {
			return a, false
		}
		i = skipSpace(b, i+1)
		switch string(key) {
		case "permits":
			if a.hasPermits {
				return a, false
			}
			if a.permits, i, ok = scanInt(b, i); !ok {
				return a, false
			}
			a.hasPermits = true
		case "max_wait":
			if a.hasMaxWait {
				return a, false
			}
			var s []byte
			if s, i, ok = scanString(b, i); !ok {
				return a, false
			}
			d, err := time.ParseDuration(string(s))
			if err != nil {
				return a, false
			}
			a.maxWait, a.hasMaxWait = d, true
		case "block":
			switch {
			case a.hasBlock:
				return a, false
			case hasLiteral(b, i, "true"):
				a.block, i = true, i+len("true")
			case hasLiteral(b, i, "false"):
				i += len("false")
			default:
				return a, false
			}
			a.hasBlock = true
		default:
			return a, false
		}
		i = skipSpace(b, i)
		switch {
		case i == len(b):
			return a, false
		case b[i] == ',':
			i = skipSpace(b, i+1)
		case b[i] == '}':
			return a, skipSpace(b, i+1) == len(b)
		default:
			return a, false
		}
	}
}

// skipSpace returns the index of the first byte at or after i that is not JSON space.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// scanString reads a JSON string at b[i] of printable ASCII without escapes,
// returning its content and the index after its closing quote.
func scanString(b []byte, i int) (s []byte, end int, ok bool) {
	if i == len(b) || b[i] != '"' {
		return nil, i, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return b[i+1 : j], j + 1, true
		case c == '\\' || c < 0x20 || c >= 0x7f:
			return nil, i, false
		}
	}
	return nil, i, false
}

// scanInt reads a JSON integer literal at b[i] (no fraction or exponent,
// no leading zeros) that fits an int64, returning the index after it.
func scanInt(b []byte, i int) (n int64, end int, ok bool) {
	neg := i < len(b) && b[i] == '-'
	if neg {
		i++
	}
	start := i
	var u uint64
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		if u > (1<<63)/10 {
			return 0, i, false
		}
		u = u*10 + uint64(b[i]-'0')
	}
	switch {
	case i == start, b[start] == '0' && i-start > 1: // no digits, or a leading zero
		return 0, i, false
	case neg && u > 1<<63, !neg && u > 1<<63-1:
		return 0, i, false
	case i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E'):
		return 0, i, false
	}
	if neg {
		return -int64(u), i, true // -(1<<63) wraps to itself
	}
	return int64(u), i, true
}

// hasLiteral reports whether b holds lit at i.
func hasLiteral(b []byte, i int, lit string) bool {
	return len(b)-i >= len(lit) && string(b[i:i+len(lit)]) == lit
}

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

// Grants: what a client pool over HTTP (client.NewHTTP) takes from a
// schedule in one call, its id a token that carries what the handback needs
// (core.Grant), so that any replica takes the handback.

// grant takes permits for a client pool: 200, or 429 (as acquire).
func (s *server) grant(c echo.Context) error {
	var req wire.GrantRequest
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	if req.Permits == nil {
		return required("permits", "how many permits the pool takes")
	}
	r := core.GrantRequest{Name: c.Param("name"), Permits: *req.Permits, MaxWait: limitd.Forever}
	if req.MaxWait != nil {
		r.MaxWait = time.Duration(*req.MaxWait)
	}
	g, err := s.core.Grant(c.Request().Context(), r)
	if err != nil {
		return err
	}
	if !g.Granted {
		return answer(c, g.Decision)
	}
	return c.JSON(http.StatusOK, wire.Grant{ID: g.Token, Granted: true, Permits: g.Permits, Scheduled: g.Scheduled,
		Start: g.Start, Delay: g.Delay, Lateness: g.Lateness, Wait: g.Wait, Version: g.Version, Now: g.Now, Kind: g.Kind,
		Slice: wire.Slice{Whole: g.Slice.Whole, Frac: g.Slice.Frac, Den: g.Slice.Den}, Burst: limiter.Burst(g.Burst),
		RemBefore: g.RemBefore, End: g.End})
}

// handback gives a grant's last permits back: the schedule is rewound when
// nothing was taken since (rewound: true), else their time counts as idle.
func (s *server) handback(c echo.Context) error {
	var req wire.HandbackRequest
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	if req.Grant == nil {
		return required("grant", "the grant as POST .../grant answered it")
	}
	if req.Permits == nil {
		return required("permits", "how many of the grant's last permits go back")
	}
	g := req.Grant
	rewound, err := s.core.Handback(c.Request().Context(), core.HandbackRequest{Name: c.Param("name"), Token: g.ID,
		Granted: g.Granted, GrantPermits: g.Permits, Version: g.Version, Permits: *req.Permits})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, wire.Handback{Rewound: rewound})
}

// charge takes permits whatever is left, or settles a grant: 200 with the
// limiter after it (a charge is never refused for lack of permits), 400
// naming permits, 404, 409 for a share or concurrency limiter.
func (s *server) charge(c echo.Context) error {
	var req wire.ChargeRequest
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	if req.Permits == nil {
		return required("permits", "how many permits the work used (0: a check, which takes nothing)")
	}
	ctx, name := c.Request().Context(), c.Param("name")
	if g := req.Grant; g != nil {
		st, err := s.core.Settle(ctx, core.SettleRequest{Name: name, Token: g.ID, GrantPermits: g.Permits,
			Version: g.Version, Actual: *req.Permits})
		if err != nil {
			return err
		}
		v := chargedOf(st.Decision)
		v.HandedBack, v.Rewound = new(st.HandedBack), new(st.Rewound)
		return c.JSON(http.StatusOK, windowed(v, st.Decision))
	}
	d, err := s.core.Charge(ctx, core.ChargeRequest{Name: name, Permits: *req.Permits})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, windowed(chargedOf(d), d))
}

// chargedOf is a charge's answer body (a window's: see windowed).
func chargedOf(d limitd.Decision) wire.Charged {
	return wire.Charged{Permits: d.Permits, Within: d.Granted, Delay: d.Delay, Wait: d.Wait, Version: d.Version, Now: d.Now}
}

// windowed is v, or for a window limiter v with its Window (and no backlog).
func windowed(v wire.Charged, d limitd.Decision) any {
	if !d.Window {
		return v
	}
	v.Wait = 0
	return wire.WindowCharged{Charged: v, Window: windowOf(d)}
}

// capacity asks a share limiter for capacity on behalf of one client.
func (s *server) capacity(c echo.Context) error {
	var req wire.CapacityRequest
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	if req.ClientID == nil {
		return required("client_id", "the id the client asks under, the same in every request")
	}
	if err := limitd.CheckNameAs("client_id", *req.ClientID); err != nil {
		return err
	}
	if req.Wants == nil {
		return required("wants", "the capacity the client would use")
	}
	r := core.CapacityRequest{Name: c.Param("name"), ClientID: *req.ClientID, Wants: *req.Wants}
	if req.Has != nil {
		r.Has = *req.Has
	}
	if req.Priority != nil {
		r.Priority = *req.Priority
	}
	l, err := s.core.Capacity(c.Request().Context(), r)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, wire.CapacityLease{Gets: l.Gets, Expires: l.Expires, Refresh: l.Refresh,
		SafeCapacity: l.SafeCapacity, Learning: l.Learning, Version: l.Version})
}

// returnCapacity ends a client's lease at once, freeing its capacity: 204,
// or 404 naming client_id when the client holds none.
func (s *server) returnCapacity(c echo.Context) error {
	if err := s.core.ReturnCapacity(c.Request().Context(), c.Param("name"), c.Param("client_id")); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// release frees a lease's slot: 204, or 404 naming lease_id when the
// limiter does not hold it (released already, or expired and reclaimed).
func (s *server) release(c echo.Context) error {
	id, err := leaseID(c)
	if err != nil {
		return err
	}
	if err := s.core.ReleaseSlot(c.Request().Context(), c.Param("name"), id); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// renew extends a held lease by the limiter's lease time: 200, or 404
// naming lease_id when the lease is lost (the holder must stop and acquire
// again).
func (s *server) renew(c echo.Context) error {
	id, err := leaseID(c)
	if err != nil {
		return err
	}
	l, err := s.core.RenewSlot(c.Request().Context(), c.Param("name"), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, wire.Renewed{LeaseID: l.ID, Expires: l.Expires})
}

// leaseID reads the body of release and renew; core checks the id.
func leaseID(c echo.Context) (string, error) {
	b, err := readBody(c)
	if err != nil {
		return "", err
	}
	if len(b) == 0 {
		return "", required("lease_id", `send {"lease_id":"<the lease_id the acquire answered>"}`)
	}
	var req wire.LeaseRequest
	if err := decodeStrict(b, &req, ""); err != nil {
		return "", err
	}
	if req.LeaseID == nil {
		return "", required("lease_id", "the lease_id the acquire answered")
	}
	return *req.LeaseID, nil
}
