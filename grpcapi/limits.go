package grpcapi

import (
	"context"
	"fmt"
	"math"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/tap"

	"github.com/limitd/limitd/limiter"
)

// Limits bound what the clients of the gRPC port can make the server hold:
// calls per connection, connections, the bytes of one call, and how long a
// connection lives. A field's zero turns its bound off (MaxHeaderListSize's
// falls back to gRPC's 16 MiB; KeepaliveTimeout must be set while
// KeepaliveTime pings); DefaultLimits are the ones for an Envoy fleet in
// front, which keeps a few long-lived HTTP/2 connections per worker and
// multiplexes its calls on them.
//
// A call held open costs the server a goroutine and its state, metadata and
// request bytes received (about 12 KiB, 24 KiB with 4 KiB of many-field
// metadata, plus at most the 64 KiB stream window and MaxRecvMsgSize); a
// connection about 50 KiB more. So what a flood of calls can hold is bounded
// by MaxConcurrentStreams × MaxConnections × that (README, Reliability, has
// the figures measured, and TestStreamFlood checks them).
type Limits struct {
	// MaxConcurrentStreams is how many calls one connection may have open
	// at once (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS). A stream past it is
	// refused (RST_STREAM REFUSED_STREAM) before anything is kept for it;
	// Envoy queues its calls or opens another connection.
	MaxConcurrentStreams uint32
	// MaxConnections is how many connections may be open at once. One past
	// it is closed as soon as it is accepted, so that its client learns at
	// once (Envoy fails the call over to failure_mode_deny, or another
	// host), rather than waiting in the listen queue.
	MaxConnections uint32
	// MaxRecvMsgSize and MaxSendMsgSize bound one message, in bytes; a
	// larger request is answered ResourceExhausted before it is read.
	MaxRecvMsgSize, MaxSendMsgSize uint32
	// MaxHeaderListSize bounds one call's metadata (its HTTP/2 header list,
	// decoded), in bytes; a larger one resets the stream.
	MaxHeaderListSize uint32
	// KeepaliveMinTime is how often a client may ping. A client that pings
	// more often three times in a row is sent GOAWAY (ENHANCE_YOUR_CALM,
	// "too_many_pings") and its connection closed. Pings are allowed on a
	// connection without calls too (Envoy's connection_keepalive sends them).
	KeepaliveMinTime time.Duration
	// KeepaliveTime and KeepaliveTimeout: a connection the server has read
	// nothing from for KeepaliveTime is pinged, and closed when nothing
	// comes back within KeepaliveTimeout, so that a peer that vanished
	// (a host gone without closing its connections) frees its connection.
	KeepaliveTime, KeepaliveTimeout time.Duration
	// MaxConnectionIdle: a connection without calls for this long is sent
	// GOAWAY and closed; its client opens a new one when it calls again.
	MaxConnectionIdle time.Duration
	// MaxConnectionAge and MaxConnectionAgeGrace: a connection older than
	// MaxConnectionAge (±10 %, gRPC's jitter, so that a fleet's connections
	// do not all turn over at once) is sent GOAWAY: its client opens a new
	// one for new calls, and the calls in flight on the old one have
	// MaxConnectionAgeGrace to finish before it is closed. Nothing is cut
	// while it is busy, and connections spread again over the hosts behind
	// a name after one restarts.
	MaxConnectionAge, MaxConnectionAgeGrace time.Duration
}

// DefaultLimits returns the limits limitd serve uses unless told otherwise.
//
// 100 calls per connection is the smallest SETTINGS_MAX_CONCURRENT_STREAMS
// HTTP/2 recommends, and a connection carrying 100 calls at once at the
// millisecond a decision takes is 100,000 calls a second, more than one
// process decides; past it Envoy opens another connection or waits. 512
// connections are 32 Envoys of 8 workers with two connections each; 100
// calls on each that never send their message hold about 600 MiB with
// Envoy's metadata, 1200 MiB at most. A RateLimitRequest is tens to
// hundreds of bytes and Envoy's metadata well under one KiB: 64 KiB (the
// stream window) and 4 KiB leave room for long descriptor values and
// added metadata; a response of 64 statuses is a few KiB, 1 MiB bounds a
// runaway. gRPC clients ping at most every 10 s (gRFC A8), so 5 s tells
// only a misbehaving one to go away. A vanished peer is found within 80 s;
// an idle connection goes after 5 minutes; a connection turns over every
// 30 minutes, with 30 s for its calls in flight, 20 times the longest a
// decision waits for Redis (core's 1.5 s).
func DefaultLimits() Limits {
	return Limits{
		MaxConcurrentStreams:  100,
		MaxConnections:        512,
		MaxRecvMsgSize:        64 << 10,
		MaxSendMsgSize:        1 << 20,
		MaxHeaderListSize:     4 << 10,
		KeepaliveMinTime:      5 * time.Second,
		KeepaliveTime:         time.Minute,
		KeepaliveTimeout:      20 * time.Second,
		MaxConnectionIdle:     5 * time.Minute,
		MaxConnectionAge:      30 * time.Minute,
		MaxConnectionAgeGrace: 30 * time.Second,
	}
}

// streamWorkers are the goroutines that run calls, each one call at a time
// (a call past them gets a goroutine of its own, as every call would
// without them): a call's goroutine grows its stack as the call goes down
// through gRPC, the service and the store, and a worker keeps what it grew,
// where a new goroutine per call grows it again (runtime.copystack: 6 % of
// the CPU of a process serving and sending 16 calls in flight over 10,000
// counters, 2 % with workers). 128 idle workers hold about 4 MiB of stack.
const streamWorkers = 128

// handshakeTimeout bounds how long a new connection may take to send its
// HTTP/2 preface and settings (gRPC's default is 120 s): Envoy sends them at
// once, and a connection that does not holds a place under MaxConnections.
const handshakeTimeout = 10 * time.Second

// Check reports a limit the server cannot use: a negative duration, or
// pings without a timeout. Errors are *limiter.FieldError naming the field.
func (l Limits) Check() error {
	for _, d := range []struct {
		name string
		val  time.Duration
	}{{"KeepaliveMinTime", l.KeepaliveMinTime}, {"KeepaliveTime", l.KeepaliveTime}, {"KeepaliveTimeout", l.KeepaliveTimeout},
		{"MaxConnectionIdle", l.MaxConnectionIdle}, {"MaxConnectionAge", l.MaxConnectionAge}, {"MaxConnectionAgeGrace", l.MaxConnectionAgeGrace}} {
		if d.val < 0 {
			return &limiter.FieldError{Field: d.name, Rule: "must not be negative", Value: d.val}
		}
	}
	if l.KeepaliveTime > 0 && l.KeepaliveTime < time.Second {
		return &limiter.FieldError{Field: "KeepaliveTime", Rule: "must be 0 (no pings) or at least 1s", Value: l.KeepaliveTime}
	}
	if l.KeepaliveTime > 0 && l.KeepaliveTimeout == 0 {
		return &limiter.FieldError{Field: "KeepaliveTimeout", Rule: "must be more than 0 while KeepaliveTime pings"}
	}
	for _, n := range []struct {
		name string
		val  uint32
	}{{"MaxRecvMsgSize", l.MaxRecvMsgSize}, {"MaxSendMsgSize", l.MaxSendMsgSize}} {
		if n.val > math.MaxInt32 {
			return &limiter.FieldError{Field: n.name, Rule: fmt.Sprintf("must be at most %d bytes", math.MaxInt32), Value: n.val}
		}
	}
	return nil
}

// ServerOptions returns the options of a grpc.Server that serves s within
// l: the bounds above, the codec that answers a request that does not
// decode InvalidArgument (see Register), and, with a token set, a check of
// the token before a rate limit call's stream is created, so that a caller
// without it costs no goroutine and no memory (ShouldRateLimit checks it
// again). Serve the server on s.Listener(ln, l) for MaxConnections.
func (s *Server) ServerOptions(l Limits) ([]grpc.ServerOption, error) {
	if err := l.Check(); err != nil {
		return nil, err
	}
	off := func(d time.Duration) time.Duration { // gRPC's "no bound"
		if d == 0 {
			return time.Duration(math.MaxInt64)
		}
		return d
	}
	streams := l.MaxConcurrentStreams
	if streams == 0 {
		streams = math.MaxUint32
	}
	size := func(n uint32) int {
		if n == 0 {
			return math.MaxInt32
		}
		return int(n)
	}
	opts := []grpc.ServerOption{
		grpc.MaxConcurrentStreams(streams),
		grpc.MaxRecvMsgSize(size(l.MaxRecvMsgSize)),
		grpc.MaxSendMsgSize(size(l.MaxSendMsgSize)),
		// Fixed windows: gRPC's dynamic ones follow what a client's pings
		// measure, up to 16 MiB a stream, and a stream may hold its window.
		grpc.StaticStreamWindowSize(streamWindow),
		grpc.StaticConnWindowSize(connWindow),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: l.KeepaliveMinTime, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle: off(l.MaxConnectionIdle), MaxConnectionAge: off(l.MaxConnectionAge),
			MaxConnectionAgeGrace: off(l.MaxConnectionAgeGrace), Time: off(l.KeepaliveTime), Timeout: l.KeepaliveTimeout,
		}),
		grpc.ConnectionTimeout(handshakeTimeout),
		grpc.ForceServerCodecV2(newCodec()),
		grpc.NumStreamWorkers(streamWorkers),
	}
	if l.MaxHeaderListSize > 0 {
		opts = append(opts, grpc.MaxHeaderListSize(l.MaxHeaderListSize))
	}
	if len(s.tokens) > 0 {
		opts = append(opts, grpc.InTapHandle(s.tap))
	}
	return opts, nil
}

// streamWindow and connWindow are the flow control windows: what one stream,
// and one connection, may have in flight towards the server before it reads.
// gRPC's smallest stream window is 64 KiB; a connection's is replenished as
// its bytes arrive, so it bounds bytes on the wire, not bytes kept.
const (
	streamWindow = 64 << 10
	connWindow   = 1 << 20
)

// tap refuses a rate limit call without the token before its stream exists
// (gRPC calls it with the call's metadata, on the connection's reader).
func (s *Server) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	if !strings.HasPrefix(info.FullMethodName, "/"+ServiceName+"/") {
		return ctx, nil // the health service is open
	}
	if err := s.authorize(metadata.NewIncomingContext(ctx, info.Header)); err != nil {
		s.finish(ctx, nil, err, noError, 0)
		return ctx, err
	}
	return ctx, nil
}

// Listener returns ln counting its connections in
// limitd_grpc_connections and, with l.MaxConnections, closing each one
// accepted past it (counted in limitd_grpc_connections_refused_total; the
// first of a run of them logged).
func (s *Server) Listener(ln net.Listener, l Limits) net.Listener {
	return &listener{Listener: ln, max: int64(l.MaxConnections), s: s}
}

type listener struct {
	net.Listener
	max      int64 // 0: no bound
	open     atomic.Int64
	refusing atomic.Bool // the last connection was refused: its run was logged
	s        *Server
}

func (l *listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if n := l.open.Add(1); l.max > 0 && n > l.max {
			l.open.Add(-1)
			l.s.m.connsRefused.Inc() // before the client can see the close
			if !l.refusing.Swap(true) {
				l.s.log.Warn("gRPC connections refused: the most that may be open are open", "max_connections", l.max)
			}
			_ = c.Close()
			continue
		}
		l.refusing.Store(false)
		l.s.m.conns.Inc()
		return &conn{Conn: c, l: l}, nil
	}
}

// conn gives its place back when gRPC closes it.
type conn struct {
	net.Conn
	l    *listener
	once sync.Once
}

func (c *conn) Close() error {
	c.once.Do(func() {
		c.l.open.Add(-1)
		c.l.s.m.conns.Dec()
	})
	return c.Conn.Close()
}
