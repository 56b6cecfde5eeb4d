package client

import (
	"container/list"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/limitd/limitd/store"
)

// Middleware limits HTTP requests per key: each request's key (by default the
// client's IP address) names a limiter, usually a template instance ("ip:*"
// matching "ip:192.0.2.7"), and the request goes on only if that limiter's
// Allow lets it. Otherwise the answer is 429 Too Many Requests with a
// Retry-After header and an RFC 9457 application/problem+json body.
//
// Every answer carries the RateLimit-Policy and RateLimit fields of
// draft-ietf-httpapi-ratelimit-headers-09, for example
//
//	RateLimit-Policy: "default";q=10;w=1
//	RateLimit: "default";r=0;t=1
//
// limitd paces permits rather than counting them in windows, so the fields
// describe the pace: q permits per w seconds is the limiter's rate (or what
// WithPolicy advertises); r is how many more requests would be allowed right
// now (0 or 1: permits are spaced), and t the seconds, rounded up, until the
// next one would be. A client that waits t seconds whenever r is 0 is not
// refused (unless other clients share its key).
//
// A limiter that does not exist (no template matches the key) answers 500,
// an unreachable Redis or a closed client 503, both as problem+json: a
// misconfigured limit is not the caller's fault, and it is never "allow
// everything" (Redis outages follow the client's fallback mode instead).
//
// The middleware keeps one handle per recent key, at most WithMaxKeys (10000
// by default); the least recently used is closed, handing its unused permits
// back, when a new key needs room.
func Middleware(c *Client, opts ...MiddlewareOption) func(http.Handler) http.Handler {
	m := newKeyedLimits(c, opts)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if m.serve(w, r) {
				next.ServeHTTP(w, r)
			}
		})
	}
}

// EchoMiddleware is Middleware for echo. The key functions see the
// *http.Request of the echo.Context.
func EchoMiddleware(c *Client, opts ...MiddlewareOption) echo.MiddlewareFunc {
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

// MiddlewareOption configures Middleware and EchoMiddleware.
type MiddlewareOption func(*middlewareConfig)

type middlewareConfig struct {
	key     func(*http.Request) string
	prefix  string
	policy  string
	quota   int64
	window  time.Duration
	maxKeys int
}

// KeyByIP keys requests by the client's IP address, from the connection
// (http.Request.RemoteAddr). It is the default. It ignores X-Forwarded-For,
// which any client can set: behind a proxy, use KeyFunc with the proxy's
// trusted header.
func KeyByIP() MiddlewareOption { return KeyFunc(remoteIP) }

// KeyByHeader keys requests by a request header, such as "X-API-Key".
// Requests without it share the key "".
func KeyByHeader(name string) MiddlewareOption {
	return KeyFunc(func(r *http.Request) string { return r.Header.Get(name) })
}

// KeyFunc keys requests by any function of the request.
func KeyFunc(f func(*http.Request) string) MiddlewareOption {
	return func(c *middlewareConfig) { c.key = f }
}

// WithLimiterPrefix puts a prefix before each key to make the limiter's name:
// with "ip:", the key 192.0.2.7 is limited by the limiter (or the instance of
// a template such as "ip:*") named "ip:192.0.2.7". A key that is no valid name
// as it stands (see store.CheckName) has its other characters replaced by '-'
// and a hash of the key appended, so distinct keys keep distinct limiters;
// a name that would be too long keeps its start and the hash.
func WithLimiterPrefix(p string) MiddlewareOption {
	return func(c *middlewareConfig) { c.prefix = p }
}

// WithPolicy sets the policy the RateLimit fields advertise: its name, and a
// quota of permits per window. By default it is "default" at the limiter's
// own rate, per second (per the shortest whole number of seconds holding one
// permit, for rates below 1/s). It changes what is advertised, not the limit.
func WithPolicy(name string, quota int64, window time.Duration) MiddlewareOption {
	return func(c *middlewareConfig) {
		c.policy, c.quota, c.window = name, max(quota, 1), max(window.Round(time.Second), time.Second)
	}
}

// WithMaxKeys bounds how many keys' handles the middleware keeps (default
// 10000, at least 1).
func WithMaxKeys(n int) MiddlewareOption {
	return func(c *middlewareConfig) { c.maxKeys = max(n, 1) }
}

// keyedLimits is the middleware's state: the handles of recent keys, most
// recently used first.
type keyedLimits struct {
	c   *Client
	cfg middlewareConfig

	mu       sync.Mutex
	byKey    map[string]*list.Element // of *keyedHandle
	lru      list.List
	draining map[string]*keyedHandle // evicted but in use: closed by the last user
}

type keyedHandle struct {
	name    string
	l       *Limiter
	refs    int  // requests using l now
	evicted bool // out of the LRU: the last request using l closes it
}

func newKeyedLimits(c *Client, opts []MiddlewareOption) *keyedLimits {
	cfg := middlewareConfig{key: remoteIP, policy: "default", maxKeys: 10000}
	for _, o := range opts {
		o(&cfg)
	}
	return &keyedLimits{c: c, cfg: cfg, byKey: map[string]*list.Element{}, draining: map[string]*keyedHandle{}}
}

// serve decides one request and answers it unless it may go on.
func (m *keyedLimits) serve(w http.ResponseWriter, r *http.Request) bool {
	name := limiterName(m.cfg.prefix, m.cfg.key(r))
	var (
		l    *Limiter
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
		ok, next, err = l.allow(r.Context())
		m.release(kh, errors.Is(err, ErrClosed))
		if !errors.Is(err, ErrClosed) {
			break
		}
	}
	h := w.Header()
	if err != nil {
		status, slug, title := http.StatusInternalServerError, "internal", "Rate limiter misconfigured"
		detail := "the rate limit for this request cannot be decided: " + err.Error()
		if errors.Is(err, store.ErrUnavailable) || errors.Is(err, ErrClosed) || r.Context().Err() != nil {
			status, slug, title = http.StatusServiceUnavailable, "unavailable", "Rate limiter unavailable"
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
	writeProblem(w, http.StatusTooManyRequests, "rate-limited", "Too many requests",
		"the rate limit for this client is exhausted; retry in "+strconv.FormatInt(retry, 10)+" s")
	return false
}

// acquire returns the key's handle for one request, making room for it if
// needed; release gives it back.
func (m *keyedLimits) acquire(name string) (*keyedHandle, error) {
	m.mu.Lock()
	kh, idle := m.lookup(name)
	m.mu.Unlock()
	if kh == nil {
		l, err := m.c.Limiter(name)
		if err != nil {
			return nil, err
		}
		m.mu.Lock()
		// Another request may have come first, or the handle may have been
		// evicted meanwhile: c.Limiter then returned that one's handle.
		if kh, idle = m.lookup(name); kh == nil {
			kh = &keyedHandle{name: name, l: l, refs: 1}
			m.byKey[name] = m.lru.PushFront(kh)
			idle = m.evict()
		}
		m.mu.Unlock()
	}
	for _, old := range idle {
		_ = old.Close() // hands its permits back; failures only lose them
	}
	return kh, nil
}

// lookup finds the key's handle in the LRU or among the evicted ones still
// in use (bringing it back), and counts one more user; nil if there is none.
// It returns the handles to close that bringing one back evicted.
func (m *keyedLimits) lookup(name string) (*keyedHandle, []*Limiter) {
	if e, ok := m.byKey[name]; ok {
		m.lru.MoveToFront(e)
		kh := e.Value.(*keyedHandle)
		kh.refs++
		return kh, nil
	}
	kh, ok := m.draining[name]
	if !ok {
		return nil, nil
	}
	delete(m.draining, name)
	kh.evicted = false
	kh.refs++
	m.byKey[name] = m.lru.PushFront(kh)
	return kh, m.evict()
}

// evict removes the least recently used handles beyond the bound and returns
// those nobody uses, to be closed; the others are closed by their last user.
func (m *keyedLimits) evict() []*Limiter {
	var idle []*Limiter
	for m.lru.Len() > m.cfg.maxKeys {
		old := m.lru.Remove(m.lru.Back()).(*keyedHandle)
		delete(m.byKey, old.name)
		old.evicted = true
		if old.refs == 0 {
			idle = append(idle, old.l)
		} else {
			m.draining[old.name] = old
		}
	}
	return idle
}

// release ends a request's use of a handle. The last user of an evicted one
// closes it; a handle found closed (by another user of the client: handles are
// shared by name) is forgotten.
func (m *keyedLimits) release(kh *keyedHandle, closed bool) {
	m.mu.Lock()
	kh.refs--
	if closed && !kh.evicted {
		kh.evicted = true
		if e, ok := m.byKey[kh.name]; ok && e.Value.(*keyedHandle) == kh {
			m.lru.Remove(e)
			delete(m.byKey, kh.name)
		}
	}
	last := kh.evicted && kh.refs == 0
	if last && m.draining[kh.name] == kh {
		delete(m.draining, kh.name)
	}
	m.mu.Unlock()
	if last && !closed {
		_ = kh.l.Close()
	}
}

// policy returns the advertised quota and window.
func (m *keyedLimits) policy(l *Limiter) (int64, time.Duration) {
	if m.cfg.quota > 0 {
		return m.cfg.quota, m.cfg.window
	}
	l.mu.Lock()
	rate := l.rate
	l.mu.Unlock()
	if rate <= 0 {
		return 1, time.Second // not known before the first grant
	}
	w := max(1, math.Ceil(1/rate)) // seconds holding at least one permit
	return int64(math.Max(1, math.Floor(rate*w+1e-9))), time.Duration(w) * time.Second
}

// remoteIP is the host part of the request's remote address.
func remoteIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// maxName is the longest limiter name (store.CheckName).
const maxName = 128

// limiterName makes a valid limiter name of prefix+key: a valid one is kept
// as it is; otherwise characters outside [A-Za-z0-9._:-] become '-', a name
// not starting with a letter or digit gets a leading 'k', and a hash of the
// original follows, so that two keys differing only in replaced characters
// do not share a limiter. Names too long keep their start before the hash.
func limiterName(prefix, key string) string {
	name := prefix + key
	if store.CheckName(name) == nil {
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

// problem is an RFC 9457 problem detail, as limitd's HTTP API writes them.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
}

func writeProblem(w http.ResponseWriter, status int, slug, title, detail string) {
	body, _ := json.Marshal(problem{Type: "urn:limitd:problem:" + slug, Title: title, Status: status, Detail: detail})
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
