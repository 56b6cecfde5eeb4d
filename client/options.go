package client

import "time"

// The options are typed by where they apply, so that an option a
// constructor does not honour is a compile error. An Option is a
// ClientOption, and a ClientOption an HTTPOption.
type (
	// Option configures one handle (Client.Limiter), or the defaults of a
	// client's handles (NewHTTP, NewWithTransport, redisclient.New).
	Option interface {
		ClientOption
		applyHandle(*options)
	}
	// ClientOption configures a client, however it reaches the schedules.
	ClientOption interface {
		HTTPOption
		applyClient(*options)
	}
	// HTTPOption configures a client over HTTP (NewHTTP).
	HTTPOption interface{ applyHTTP(*options) }
)

// handleOption is an Option; clientOption a ClientOption; httpOption an HTTPOption.
type (
	handleOption func(*options)
	clientOption func(*options)
	httpOption   func(*options)
)

func (f handleOption) applyHandle(o *options) { f(o) }
func (f handleOption) applyClient(o *options) { f(o) }
func (f handleOption) applyHTTP(o *options)   { f(o) }
func (f clientOption) applyClient(o *options) { f(o) }
func (f clientOption) applyHTTP(o *options)   { f(o) }
func (f httpOption) applyHTTP(o *options)     { f(o) }

type options struct {
	fallback Fallback
	safeRate float64       // 0: estimate from this process's share
	window   time.Duration // how much of its own demand a grant covers
	stale    time.Duration // permits later than this are handed back unused
	retry    time.Duration // how often to try Redis again while falling back
	clock    Clock
	http     httpOptions // NewHTTP only
	// refusals makes the tally a client adds its refusals to (nil: none).
	refusals func(now func() time.Time) RefusalTally
}

func defaults() options {
	return options{window: 20 * time.Millisecond,
		stale: 100 * time.Millisecond, retry: time.Second, clock: systemClock{}}
}

// WithoutRefusalCounts stops a client over Redis from adding its
// refusals to the Redis totals that limitd's dashboard, metrics and
// ctl watch read (see redisclient.New). Over HTTP there is nothing to turn
// off: the limitd server counts what it decides.
func WithoutRefusalCounts() ClientOption {
	return clientOption(func(o *options) { o.refusals = nil })
}

// WithRefusalCounts makes the client count what it refuses and add it
// once a second, and at Close, to the tally tally returns, called once
// with the client's clock. redisclient.New passes its own; over HTTP
// (NewHTTP) it is ignored, the server counting what it decides.
func WithRefusalCounts(tally func(now func() time.Time) RefusalTally) ClientOption {
	return clientOption(func(o *options) { o.refusals = tally })
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
// instead of used (default 100ms; never less than one grant window or two
// slices). It bounds the burst a process that stalled (GC, SIGSTOP) could
// add on waking.
func WithStaleAfter(d time.Duration) Option {
	return handleOption(func(o *options) { o.stale = max(d, time.Millisecond) })
}

// WithRetryInterval sets how often at most a handle that is falling back
// tries Redis again (default 1s; at least 1ms; see Fallback); the cool-down
// after an outage lasts two intervals, at least a second.
func WithRetryInterval(d time.Duration) Option {
	return handleOption(func(o *options) { o.retry = max(d, time.Millisecond) })
}
