package httplimit

import (
	"net"
	"net/http"
	"time"
)

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
