package client

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/limitd/limitd"
	"github.com/limitd/limitd/limiter"
	"github.com/limitd/limitd/wire"
)

// ErrUnauthorized is returned by a client over HTTP (NewHTTP) whose token the
// server refused (401): it is missing or wrong; see WithToken.
var ErrUnauthorized = errors.New("client: the limitd server refused the token (401); see WithToken")

type httpOptions struct {
	token  string
	client *http.Client
}

// WithToken sets the bearer token a client over HTTP (NewHTTP) sends: the
// server's LIMITD_TOKEN (or its admin token).
func WithToken(token string) HTTPOption { return httpOption(func(o *options) { o.http.token = token }) }

// WithHTTPClient sets the http.Client a client over HTTP (NewHTTP) sends its
// requests with (default: http.DefaultClient).
func WithHTTPClient(c *http.Client) HTTPOption {
	return httpOption(func(o *options) { o.http.client = c })
}

// NewHTTP returns a client that reaches the shared schedules through a limitd
// server at baseURL ("http://limitd:8080") instead of Redis.
//
// Pools work as over Redis, but with no change events: a config change is
// picked up at a handle's next grant, not at once. The server clock, which
// leases expire on, is the Redis time of the latest grant answered,
// advanced by the local clock since. Unused permits are handed back with the
// grant's id, which any replica behind a load balancer takes.
func NewHTTP(baseURL string, opts ...HTTPOption) *Client {
	o := defaults()
	for _, f := range opts {
		f.applyHTTP(&o)
	}
	t := &httpTransport{base: strings.TrimRight(baseURL, "/"), token: o.http.token,
		hc: cmp.Or(o.http.client, http.DefaultClient), clock: o.clock, ids: map[grantKey]grantRef{}}
	o.refusals = nil // the server counts what it decides
	return newClient(t, o)
}

// httpTransport is a Transport over the limitd HTTP API.
type httpTransport struct {
	base  string
	token string
	hc    *http.Client
	clock Clock

	mu      sync.Mutex
	ids     map[grantKey]grantRef // grants answered, for their handback
	adds    int
	now     int64     // Redis ns of the latest grant answer
	nowSeen time.Time // local time it was seen; zero: none yet
}

// grantKey identifies a grant the pool holds: limitd.Grant has no room for
// the id the server answers it with.
type grantKey struct {
	name              string
	start, end, count int64
}

type grantRef struct {
	id    string
	until time.Time
}

// grantKeep is how long after its end a grant's id is kept for its
// handback: a pool hands its grants back soon after their end, or never.
const grantKeep = 2 * time.Minute

func keyOf(g limitd.Grant) grantKey {
	return grantKey{name: g.Name, start: g.Start, end: g.End, count: g.Permits}
}

func limiterPath(name, op string) string {
	p := "/v1/limiters/" + url.PathEscape(name)
	if op != "" {
		p += "/" + op
	}
	return p
}

// do sends one request: body (nil: none) as JSON. It returns the status and
// body of a 2xx or 429 answer, decoded into out unless out is nil, and every
// other answer as a typed error.
func (t *httpTransport) do(ctx context.Context, method, path string, body, out any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, t.base+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if t.token != "" {
		req.Header.Set("Authorization", "Bearer "+t.token)
	}
	res, err := t.hc.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%w: %w", limiter.ErrUnavailable, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return 0, nil, fmt.Errorf("%w: reading the answer to %s %s: %w", limiter.ErrUnavailable, method, path, err)
	}
	if res.StatusCode/100 != 2 && res.StatusCode != http.StatusTooManyRequests {
		return res.StatusCode, nil, problemErr(method, path, res.StatusCode, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return 0, nil, fmt.Errorf("client: undecodable answer from the limitd server: %w", err)
		}
	}
	return res.StatusCode, b, nil
}

// problemErr maps an error answer to the errors the Redis transport returns.
func problemErr(method, path string, status int, b []byte) error {
	var p wire.Problem
	_ = json.Unmarshal(b, &p)
	detail := cmp.Or(p.Detail, fmt.Sprintf("%s %s: %d %s", method, path, status, http.StatusText(status)))
	switch {
	case status == http.StatusUnauthorized:
		return fmt.Errorf("%w: %s", ErrUnauthorized, detail)
	case status == http.StatusBadRequest && p.Field != "":
		return &limiter.FieldError{Field: p.Field, Rule: strings.TrimPrefix(detail, p.Field+": ")}
	case status == http.StatusBadRequest:
		return fmt.Errorf("%w: %s", limiter.ErrInvalid, detail)
	case status == http.StatusNotFound:
		return fmt.Errorf("%w: %s", limiter.ErrNotFound, detail)
	case status == http.StatusConflict:
		return fmt.Errorf("%w: %s", limiter.ErrConflict, detail)
	case status >= 500:
		return fmt.Errorf("%w: %s", limiter.ErrUnavailable, detail)
	}
	return fmt.Errorf("client: %s %s: %d: %s", method, path, status, detail)
}

// maxWaitField is a request's max_wait: left out for limitd.Forever (the
// server's default), else at least 0.
func maxWaitField(maxWait time.Duration) *limiter.Duration {
	if maxWait == limitd.Forever {
		return nil
	}
	return new(limiter.Duration(max(0, maxWait)))
}

// sawNow records the server's Redis time of an answer.
func (t *httpTransport) sawNow(now int64) {
	if now == 0 {
		return
	}
	t.mu.Lock()
	t.now, t.nowSeen = now, t.clock.Now()
	t.mu.Unlock()
}

func (t *httpTransport) Grant(ctx context.Context, name string, k int64, maxWait time.Duration) (limitd.Grant, error) {
	req := wire.GrantRequest{Permits: &k, MaxWait: maxWaitField(maxWait)}
	var j struct { // a wire.Grant, or a 429's wire.Denied
		wire.Grant
		RetryAfter int64 `json:"retry_after_ns"`
	}
	status, _, err := t.do(ctx, http.MethodPost, limiterPath(name, "grant"), req, &j)
	if err != nil {
		return limitd.Grant{}, err
	}
	t.sawNow(j.Now)
	if status == http.StatusTooManyRequests {
		return limitd.Grant{Name: name, Decision: limitd.Decision{RetryAfter: j.RetryAfter, Delay: j.Delay,
			Wait: j.Wait, Version: j.Version, Now: j.Now}}, nil
	}
	g := limitd.Grant{
		Decision: limitd.Decision{Granted: j.Granted, Permits: j.Permits, Scheduled: j.Scheduled, Start: j.Start,
			Delay: j.Delay, Lateness: j.Lateness, Wait: j.Wait, Version: j.Version, Now: j.Now},
		Name: name, Kind: j.Kind, Slice: limiter.Slice{Whole: j.Slice.Whole, Frac: j.Slice.Frac, Den: j.Slice.Den},
		Burst: float64(j.Burst), RemBefore: j.RemBefore, End: j.End,
	}
	t.remember(g, j.ID)
	return g, nil
}

// remember keeps the id of g for its handback, forgetting those past use.
func (t *httpTransport) remember(g limitd.Grant, id string) {
	now := t.clock.Now()
	until := now.Add(time.Duration(max(0, g.End-g.Now)) + grantKeep)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.adds++
	if t.adds%256 == 0 {
		for k, r := range t.ids {
			if !r.until.After(now) {
				delete(t.ids, k)
			}
		}
	}
	t.ids[keyOf(g)] = grantRef{id: id, until: until}
}

func (t *httpTransport) Release(ctx context.Context, g limitd.Grant, m int64) error {
	if !g.Granted || m <= 0 {
		return nil
	}
	t.mu.Lock()
	ref, ok := t.ids[keyOf(g)]
	t.mu.Unlock()
	if !ok {
		return nil // forgotten: the server has forgotten it too
	}
	j := t.wireGrant(g, ref.id)
	req := wire.HandbackRequest{Grant: &j, Permits: &m}
	_, _, err := t.do(ctx, http.MethodPost, limiterPath(g.Name, "handback"), req, nil)
	return err
}

// wireGrant is g as POST .../grant answered it, with its id.
func (t *httpTransport) wireGrant(g limitd.Grant, id string) wire.Grant {
	return wire.Grant{ID: id, Granted: g.Granted, Permits: g.Permits, Scheduled: g.Scheduled, Start: g.Start,
		Delay: g.Delay, Lateness: g.Lateness, Wait: g.Wait, Version: g.Version, Now: g.Now, Kind: g.Kind,
		Slice: wire.Slice{Whole: g.Slice.Whole, Frac: g.Slice.Frac, Den: g.Slice.Den}, Burst: limiter.Burst(g.Burst),
		RemBefore: g.RemBefore, End: g.End}
}

// Changes: the HTTP API has no change events.
func (t *httpTransport) Changes(context.Context) <-chan string { return nil }

func (t *httpTransport) Capacity(ctx context.Context, name string, r limitd.CapacityRequest) (limitd.CapacityLease, error) {
	var l wire.CapacityLease
	_, _, err := t.do(ctx, http.MethodPost, limiterPath(name, "capacity"),
		wire.CapacityRequest{ClientID: &r.ClientID, Wants: &r.Wants, Has: &r.Has, Priority: &r.Priority}, &l)
	if err != nil {
		return limitd.CapacityLease{}, err
	}
	return limitd.CapacityLease{Gets: l.Gets, Expires: l.Expires, Refresh: l.Refresh, SafeCapacity: l.SafeCapacity,
		Learning: l.Learning, Version: l.Version}, nil
}

func (t *httpTransport) ReturnCapacity(ctx context.Context, name, clientID string) error {
	_, _, err := t.do(ctx, http.MethodDelete, limiterPath(name, "capacity/"+url.PathEscape(clientID)), nil, nil)
	return err
}

// AcquireSlot takes a slot through POST .../acquire, which dispatches on the
// limiter's kind. Asked of a schedule limiter it takes a permit, answered as
// ErrConflict (as the store does, though the store takes nothing).
func (t *httpTransport) AcquireSlot(ctx context.Context, name string) (limitd.SlotLease, error) {
	var l wire.SlotAnswer
	status, b, err := t.do(ctx, http.MethodPost, limiterPath(name, "acquire"), nil, &l)
	if err != nil {
		return limitd.SlotLease{}, err
	}
	if l.InUse == nil { // a schedule's answer
		return limitd.SlotLease{}, fmt.Errorf("limiter %q: %w: not a concurrency limiter", name, limiter.ErrConflict)
	}
	if status == http.StatusTooManyRequests {
		return limitd.SlotLease{RetryAfter: l.RetryAfter, InUse: *l.InUse, Limit: l.Limit}, nil
	}
	if l.Shadow { // a refusal in shadow mode, let through: no lease
		return limitd.SlotLease{Granted: true, Shadow: true, RetryAfter: l.RetryAfter, InUse: *l.InUse, Limit: l.Limit}, nil
	}
	if l.LeaseID == nil {
		return limitd.SlotLease{}, fmt.Errorf("client: the limitd server answered a slot without a lease_id: %s", b)
	}
	return limitd.SlotLease{Granted: true, ID: *l.LeaseID, Expires: l.Expires, InUse: *l.InUse, Limit: l.Limit}, nil
}

func (t *httpTransport) RenewSlot(ctx context.Context, name, id string) (limitd.SlotLease, error) {
	var l wire.Renewed
	_, _, err := t.do(ctx, http.MethodPost, limiterPath(name, "renew"), wire.LeaseRequest{LeaseID: &id}, &l)
	if err != nil {
		return limitd.SlotLease{}, err
	}
	return limitd.SlotLease{Granted: true, ID: l.LeaseID, Expires: l.Expires}, nil
}

func (t *httpTransport) ReleaseSlot(ctx context.Context, name, id string) error {
	_, _, err := t.do(ctx, http.MethodPost, limiterPath(name, "release"), wire.LeaseRequest{LeaseID: &id}, nil)
	return err
}

// Time is the server's Redis time of the latest grant answer, advanced by
// the local clock since; ErrUnavailable until a grant has answered.
func (t *httpTransport) Time(context.Context) (int64, error) {
	t.mu.Lock()
	now, seen := t.now, t.nowSeen
	t.mu.Unlock()
	if seen.IsZero() {
		return 0, fmt.Errorf("%w: no server time yet (no grant answered over HTTP)", limiter.ErrUnavailable)
	}
	return now + int64(t.clock.Now().Sub(seen)), nil
}
