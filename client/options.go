package client

import (
	"time"

	"github.com/limitd/limitd/store"
)

// The options are typed by where they apply, so that an option a
// constructor does not honour is a compile error rather than silently
// ignored:
//
//	Option        a handle's behaviour (fallback, window, ...): Limiter, and every
//	              constructor, where it sets the default of the client's handles
//	ClientOption  the whole client (WithClock): every constructor
//	RedisOption   New only (WithPrefix)
//	HTTPOption    NewHTTP only (WithToken, WithHTTPClient)
//
// An Option is a ClientOption, and a ClientOption both a RedisOption and an
// HTTPOption.
type (
	// Option configures one handle (Client.Limiter), or the defaults of a
	// client's handles (New, NewHTTP, NewWithTransport).
	Option interface {
		ClientOption
		applyHandle(*options)
	}
	// ClientOption configures a client, however it reaches the schedules.
	ClientOption interface {
		RedisOption
		HTTPOption
		applyClient(*options)
	}
	// RedisOption configures a client over Redis (New).
	RedisOption interface{ applyRedis(*options) }
	// HTTPOption configures a client over HTTP (NewHTTP).
	HTTPOption interface{ applyHTTP(*options) }
)

// handleOption is an Option; clientOption a ClientOption; redisOption and
// httpOption are what their names say.
type (
	handleOption func(*options)
	clientOption func(*options)
	redisOption  func(*options)
	httpOption   func(*options)
)

func (f handleOption) applyHandle(o *options) { f(o) }
func (f handleOption) applyClient(o *options) { f(o) }
func (f handleOption) applyRedis(o *options)  { f(o) }
func (f handleOption) applyHTTP(o *options)   { f(o) }
func (f clientOption) applyClient(o *options) { f(o) }
func (f clientOption) applyRedis(o *options)  { f(o) }
func (f clientOption) applyHTTP(o *options)   { f(o) }
func (f redisOption) applyRedis(o *options)   { f(o) }
func (f httpOption) applyHTTP(o *options)     { f(o) }

type options struct {
	prefix   string
	fallback Fallback
	safeRate float64       // 0: estimate from this process's share
	window   time.Duration // how much of its own demand a grant covers
	stale    time.Duration // permits later than this are handed back unused
	retry    time.Duration // how often to try Redis again while falling back
	clock    Clock
	http     httpOptions // NewHTTP only
	// noRefusalCounts: New's client adds no refusal counts to Redis.
	noRefusalCounts bool
}

func defaults() options {
	return options{prefix: store.DefaultPrefix, window: 20 * time.Millisecond,
		stale: 100 * time.Millisecond, retry: time.Second, clock: systemClock{}}
}

// WithPrefix sets the Redis key prefix (default "limitd"). A client over
// HTTP has none: the server has its own.
func WithPrefix(p string) RedisOption { return redisOption(func(o *options) { o.prefix = p }) }

// WithoutRefusalCounts stops a client over Redis from adding its
// refusals to the Redis totals that limitd's dashboard, metrics and
// ctl watch read (see New): its refusals then show nowhere but in the
// caller's own code. Counting costs an atomic add per refusal and, once a
// second, one pipeline into Redis. Over HTTP there is nothing to turn off:
// the limitd server counts what it decides.
func WithoutRefusalCounts() RedisOption {
	return redisOption(func(o *options) { o.noRefusalCounts = true })
}

// WithFallback sets what handles do while Redis is unreachable.
func WithFallback(f Fallback) Option { return handleOption(func(o *options) { o.fallback = f }) }

// WithSafeRate sets the local rate of FallbackSafe, in permits per second
// (default: 95 % of this process's measured part of the shared rate). It
// also paces the handle's shared permits for the cool-down after an outage.
// Processes that share a limiter should have safe rates that add up to no
// more than its rate.
func WithSafeRate(r float64) Option { return handleOption(func(o *options) { o.safeRate = r }) }

// WithWindow sets how much of a handle's own recent demand one grant covers
// (default 20ms; between 1ms and 1s).
func WithWindow(d time.Duration) Option {
	return handleOption(func(o *options) { o.window = min(max(d, time.Millisecond), time.Second) })
}

// WithStaleAfter sets how late a held permit may be before it is handed back
// instead of used (default 100ms; never less than the lateness op bulking
// allows, one grant window or two slices). It bounds the burst a process that
// stalled (GC, SIGSTOP) could add on waking. The grant that replaces stale
// permits is asked for once they are handed back, so that it starts where
// the schedule has room now, not after permits nobody will use.
func WithStaleAfter(d time.Duration) Option {
	return handleOption(func(o *options) { o.stale = max(d, time.Millisecond) })
}

// WithRetryInterval sets how often a handle that is falling back tries Redis
// again (default 1s; at least 1ms). The first retry comes 50 ms after the
// fault (or after the interval if shorter), each later one at twice the
// delay, up to the interval; the cool-down after an outage lasts two
// intervals, at least a second.
func WithRetryInterval(d time.Duration) Option {
	return handleOption(func(o *options) { o.retry = max(d, time.Millisecond) })
}
