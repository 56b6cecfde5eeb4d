package grpcapi

import (
	"cmp"
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

// Limits bound what the clients of the gRPC port can make the server hold.
// A field's zero turns its bound off (MaxHeaderListSize's falls back to
// gRPC's 16 MiB; KeepaliveTimeout must be set while KeepaliveTime pings).
// What a flood of calls can hold is bounded by MaxConcurrentStreams ×
// MaxConnections × a call's cost (README, Reliability, has the figures;
// TestStreamFlood checks them).
type Limits struct {
	// MaxConcurrentStreams is how many calls one connection may have open
	// at once (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS); a stream past it is
	// refused before anything is kept for it.
	MaxConcurrentStreams uint32
	// MaxConnections is how many connections may be open at once. One past
	// it is closed as soon as it is accepted, so that its client learns at
	// once rather than waiting in the listen queue.
	MaxConnections uint32
	// MaxRecvMsgSize and MaxSendMsgSize bound one message, in bytes; a
	// larger request is answered ResourceExhausted before it is read.
	MaxRecvMsgSize, MaxSendMsgSize uint32
	// MaxHeaderListSize bounds one call's metadata, in bytes.
	MaxHeaderListSize uint32
	// KeepaliveMinTime is how often a client may ping (with or without
	// calls); one that pings more often is sent GOAWAY and closed.
	KeepaliveMinTime time.Duration
	// KeepaliveTime and KeepaliveTimeout: a connection silent for
	// KeepaliveTime is pinged, and closed when nothing comes back within
	// KeepaliveTimeout, so that a vanished peer frees its connection.
	KeepaliveTime, KeepaliveTimeout time.Duration
	// MaxConnectionIdle: a connection without calls for this long is closed.
	MaxConnectionIdle time.Duration
	// MaxConnectionAge and MaxConnectionAgeGrace: a connection older than
	// MaxConnectionAge (±10 %) is sent GOAWAY, and its calls in flight have
	// MaxConnectionAgeGrace to finish before it is closed, so that
	// connections spread again over the hosts behind a name.
	MaxConnectionAge, MaxConnectionAgeGrace time.Duration
}

// DefaultLimits returns the limits limitd serve uses unless told otherwise
// (the LIMITD_GRPC_* settings; docs/reliability.md has the arithmetic): 100
// calls per connection is the smallest stream limit HTTP/2 recommends, 512
// connections are 32 Envoys of 8 workers with two each, and gRPC clients
// ping at most every 10 s (gRFC A8).
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

// streamWorkers run calls one at a time each (a call past them gets a
// goroutine of its own): a worker keeps the stack a call grew, where a new
// goroutine per call grows it again (runtime.copystack).
const streamWorkers = 128

// handshakeTimeout bounds a new connection's HTTP/2 preface and settings
// (gRPC's default is 120 s): one that sends none holds a place under
// MaxConnections.
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
// l, with the codec of Register and, with a token set, a check of the token
// before a call's stream is created (a caller without it costs nothing).
// Serve the server on s.Listener(ln, l) for MaxConnections.
func (s *Server) ServerOptions(l Limits) ([]grpc.ServerOption, error) {
	if err := l.Check(); err != nil {
		return nil, err
	}
	off := func(d time.Duration) time.Duration { return cmp.Or(d, math.MaxInt64) } // gRPC's "no bound"
	opts := []grpc.ServerOption{
		grpc.MaxConcurrentStreams(cmp.Or(l.MaxConcurrentStreams, math.MaxUint32)),
		grpc.MaxRecvMsgSize(int(cmp.Or(l.MaxRecvMsgSize, math.MaxInt32))),
		grpc.MaxSendMsgSize(int(cmp.Or(l.MaxSendMsgSize, math.MaxInt32))),
		// gRPC's dynamic windows grow to 16 MiB a stream
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

// streamWindow and connWindow are the flow control windows of a stream (64
// KiB, gRPC's smallest) and of a connection (bytes on the wire, not kept).
const (
	streamWindow = 64 << 10
	connWindow   = 1 << 20
)

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

// Listener returns ln counting its connections and closing each one
// accepted past l.MaxConnections (the first of a run of them logged).
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
