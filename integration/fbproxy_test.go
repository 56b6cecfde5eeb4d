//go:build linux

package integration

// fbProxy is a TCP proxy that the fault tests put between a Redis client and
// redis-server to give the path the faults a network has: pass-through,
// added latency, a stall (bytes held, nothing refused), a cut (connections
// reset, new ones refused). Every name here starts with fb.

import (
	"net"
	"sync"
	"testing"
	"time"
)

type fbProxy struct {
	ln       net.Listener
	upstream string

	mu      sync.Mutex
	latency time.Duration // added to every chunk towards the server
	stalled chan struct{} // non-nil while stalled: closed to resume
	cut     bool
	conns   map[net.Conn]struct{}
	closed  bool
	wg      sync.WaitGroup
}

// fbStartProxy listens on a free loopback port and forwards every
// connection to upstream until the test ends.
func fbStartProxy(t *testing.T, upstream string) *fbProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &fbProxy{ln: ln, upstream: upstream, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Addr is where clients connect.
func (p *fbProxy) Addr() string { return p.ln.Addr().String() }

func (p *fbProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse := p.cut || p.closed
		p.mu.Unlock()
		if refuse {
			fbReset(c)
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve forwards one connection both ways.
func (p *fbProxy) serve(c net.Conn) {
	defer p.wg.Done()
	s, err := net.DialTimeout("tcp", p.upstream, time.Second)
	if err != nil {
		fbReset(c)
		return
	}
	if !p.track(c, s) {
		fbReset(c)
		s.Close()
		return
	}
	var both sync.WaitGroup
	both.Add(2)
	go func() { defer both.Done(); p.pump(s, c, true) }()
	go func() { defer both.Done(); p.pump(c, s, false) }()
	both.Wait()
	p.untrack(c, s)
}

func (p *fbProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut || p.closed {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *fbProxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
	}
}

// fbChunk is bytes read from one side, with when they were read.
type fbChunk struct {
	b  []byte
	at time.Time
}

// pump copies src to dst. Towards the server (up) every chunk is held
// until the latency has passed since it was read, and while the proxy is
// stalled; the reader goes on reading meanwhile, so the bytes are held,
// not refused. Either side's error closes both.
func (p *fbProxy) pump(dst, src net.Conn, up bool) {
	defer dst.Close()
	defer src.Close()
	q := make(chan fbChunk, 4096)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ch := range q {
			p.mu.Lock()
			lat, stall := time.Duration(0), p.stalled
			if up {
				lat = p.latency
			}
			p.mu.Unlock()
			if stall != nil {
				<-stall
			}
			time.Sleep(time.Until(ch.at.Add(lat)))
			if _, err := dst.Write(ch.b); err != nil {
				src.Close()
				for range q { // drain until the reader stops
				}
				return
			}
		}
	}()
	for {
		b := make([]byte, 32<<10)
		n, err := src.Read(b)
		if n > 0 {
			q <- fbChunk{b: b[:n], at: time.Now()}
		}
		if err != nil {
			break
		}
	}
	close(q)
	<-done
}

// SetLatency adds d to every chunk towards the server from now on (0: none).
func (p *fbProxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	p.latency = d
	p.mu.Unlock()
}

// Stall holds every byte, both ways, until Resume.
func (p *fbProxy) Stall() {
	p.mu.Lock()
	if p.stalled == nil {
		p.stalled = make(chan struct{})
	}
	p.mu.Unlock()
}

// Resume delivers the bytes held by Stall, and the rest as they come.
func (p *fbProxy) Resume() {
	p.mu.Lock()
	if p.stalled != nil {
		close(p.stalled)
		p.stalled = nil
	}
	p.mu.Unlock()
}

// Cut resets every connection and refuses new ones (with a reset) until
// Mend.
func (p *fbProxy) Cut() {
	p.mu.Lock()
	p.cut = true
	conns := make([]net.Conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		fbReset(c)
	}
}

// Mend ends a Cut.
func (p *fbProxy) Mend() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

func (p *fbProxy) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.Resume()
	p.Cut()
	_ = p.ln.Close()
	p.wg.Wait()
}

// fbReset closes c with a TCP reset, as a peer that is gone does.
func fbReset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
