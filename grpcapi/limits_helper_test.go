package grpcapi

import (
	"bytes"
	"errors"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/limitd/limitd/core"
	"github.com/limitd/limitd/internal/testkit/redistest"
	"github.com/limitd/limitd/store"
)

// newLimitedEnv is newEnv served as limitd serve serves it: on a TCP port,
// within l (ServerOptions, Listener). It returns the port's address too.
func newLimitedEnv(t *testing.T, domains string, l Limits, opts ...option) (*env, string) {
	t.Helper()
	mini, rdb := redistest.Mini(t, func(o *redis.Options) { o.MaxRetries = -1 })
	mini.SetTime(t0)
	e := &env{t: t, now: t0, reg: prometheus.NewRegistry(), mini: mini}
	e.st = store.New(rdb)
	rules := compile(t, domains)
	o := Options{Rules: rules, Registry: e.reg}
	var co core.Options
	for _, f := range opts {
		f(&o, &co)
	}
	e.svc = core.New(e.st, co)
	o.Service = e.svc
	e.apply(rules)
	e.srv = New(o)
	sopts, err := e.srv.ServerOptions(l)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(sopts...)
	e.srv.Register(g)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Serve(e.srv.Listener(ln, l)) }()
	t.Cleanup(func() { g.Stop(); <-done })
	addr := ln.Addr().String()
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	e.conn, e.client = conn, rlv3.NewRateLimitServiceClient(conn)
	return e, addr
}

// h2 is a raw HTTP/2 client connection: it opens streams and reads what the
// server answers, frame by frame, doing only what a test asks.
type h2 struct {
	t    *testing.T
	c    net.Conn
	fr   *http2.Framer
	hbuf bytes.Buffer
	enc  *hpack.Encoder
	next uint32 // the next stream's id
	ping uint64 // pings sent

	settings map[http2.SettingID]uint32 // the server's
	resets   map[uint32]http2.ErrCode   // RST_STREAM by stream
	headers  map[uint32][]hpack.HeaderField
	data     map[uint32][]byte
	goAway   *goAway
	eof      bool // the server closed the connection
}

// dialH2 connects to addr and sends the client preface and settings.
func dialH2(t *testing.T, addr string) *h2 {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	// A failsafe against a server that never answers, not a measure.
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	h := &h2{t: t, c: c, fr: http2.NewFramer(c, c), next: 1, settings: map[http2.SettingID]uint32{},
		resets: map[uint32]http2.ErrCode{}, headers: map[uint32][]hpack.HeaderField{}, data: map[uint32][]byte{}}
	h.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	h.fr.MaxHeaderListSize = 1 << 20
	h.enc = hpack.NewEncoder(&h.hbuf)
	// A connection the server closed at once fails its writes: its reads
	// say so.
	if _, err := io.WriteString(c, http2.ClientPreface); err == nil {
		_ = h.fr.WriteSettings()
	}
	return h
}

// open starts a call of method with the metadata md (key, value pairs) and
// sends no message: the stream stays open. It returns the stream's id.
func (h *h2) open(method string, md ...string) uint32 {
	h.t.Helper()
	h.hbuf.Reset()
	for _, f := range callHeaders(method) {
		_ = h.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	for i := 0; i+1 < len(md); i += 2 {
		_ = h.enc.WriteField(hpack.HeaderField{Name: md[i], Value: md[i+1]})
	}
	id := h.next
	h.next += 2
	if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.hbuf.Bytes(), EndHeaders: true}); err != nil {
		h.t.Fatal(err)
	}
	return id
}

// callHeaders are the headers of a gRPC call of method, before its metadata.
func callHeaders(method string) [][2]string {
	return [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", method}, {":authority", "limitd"},
		{"content-type", "application/grpc"}, {"te", "trailers"}}
}

// headerListSize is the HTTP/2 size of a header list: its names' and
// values' bytes and 32 for each field.
func headerListSize(fields [][2]string) int {
	n := 0
	for _, f := range fields {
		n += len(f[0]) + len(f[1]) + 32
	}
	return n
}

// done says whether stream id was answered or reset.
func (h *h2) done(id uint32) bool {
	_, reset := h.resets[id]
	return reset || h.status(id) != ""
}

// send sends a message on stream id, its gRPC length prefix saying size
// (len(msg) when size is 0), ending the stream with end.
func (h *h2) send(id uint32, msg []byte, size uint32, end bool) {
	h.t.Helper()
	if size == 0 {
		size = uint32(len(msg))
	}
	b := append([]byte{0, byte(size >> 24), byte(size >> 16), byte(size >> 8), byte(size)}, msg...)
	if err := h.fr.WriteData(id, end, b); err != nil {
		h.t.Fatal(err)
	}
}

// sync sends a PING and reads until its ACK: the server read every frame
// sent before it, and wrote what it answered them with before the ACK. It
// reports false if the server sends GOAWAY or closes first.
func (h *h2) sync() bool {
	h.t.Helper()
	h.ping++
	var p [8]byte
	p[7] = byte(h.ping)
	if err := h.fr.WritePing(false, p); err != nil {
		h.eof = true
		return false
	}
	for {
		f := h.read()
		if f == nil || h.goAway != nil {
			return false
		}
		if pf, ok := f.(*http2.PingFrame); ok && pf.IsAck() && pf.Data == p {
			return true
		}
	}
}

// read reads one frame and records it; nil once the connection is closed.
func (h *h2) read() http2.Frame {
	h.t.Helper()
	f, err := h.fr.ReadFrame()
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || isReset(err) {
			h.eof = true
			return nil
		}
		h.t.Fatalf("reading a frame: %v", err)
	}
	switch f := f.(type) {
	case *http2.SettingsFrame:
		if !f.IsAck() {
			_ = f.ForeachSetting(func(s http2.Setting) error { h.settings[s.ID] = s.Val; return nil })
			_ = h.fr.WriteSettingsAck()
		}
	case *http2.PingFrame:
		if !f.IsAck() {
			_ = h.fr.WritePing(true, f.Data)
		}
	case *http2.RSTStreamFrame:
		h.resets[f.StreamID] = f.ErrCode
	case *http2.MetaHeadersFrame:
		h.headers[f.StreamID] = append(h.headers[f.StreamID], f.Fields...)
	case *http2.DataFrame:
		h.data[f.StreamID] = append(h.data[f.StreamID], f.Data()...)
	case *http2.GoAwayFrame:
		h.goAway = &goAway{f.LastStreamID, f.ErrCode, string(f.DebugData())}
	}
	return f
}

// until reads frames until done says so; false if the connection closed.
func (h *h2) until(done func() bool) bool {
	h.t.Helper()
	for !done() {
		if h.read() == nil {
			return done()
		}
	}
	return true
}

// goAway is a GOAWAY frame the server sent.
type goAway struct {
	lastStream uint32
	code       http2.ErrCode
	debug      string
}

// status is the grpc-status a stream was answered with ("" for none yet).
func (h *h2) status(id uint32) string {
	for _, f := range h.headers[id] {
		if f.Name == "grpc-status" {
			return f.Value
		}
	}
	return ""
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && !op.Timeout()
}

// shouldRateLimit is the rate limit method's path.
const shouldRateLimit = "/" + ServiceName + "/ShouldRateLimit"

// live is what the process holds: the heap's live objects after a
// collection, and the goroutines' stacks.
func live() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc + m.StackInuse
}
