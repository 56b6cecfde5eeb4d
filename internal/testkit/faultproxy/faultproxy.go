// Package faultproxy is a TCP proxy for tests that puts between a client
// and a server the faults a network or a slow server makes: added latency,
// a stall, in which the connections stay open and nothing passes either
// way until it is resumed (a server that hangs, a link that drops every
// packet; bytes sent meanwhile are kept, in order, and delivered once it
// resumes), and a cut, in which every connection is reset and new ones are
// refused (a server gone). It starts passing everything through untouched.
//
//	p := faultproxy.Start(t, srv.Addr())
//	// point the client at p.Addr()
//	p.SetLatency(50 * time.Millisecond) // every round trip 50 ms longer
//	p.Stall()                           // nothing passes
//	p.Resume()
//	p.Cut()                             // connections reset, new ones refused
//	p.Mend()
package faultproxy

import (
	"maps"
	"net"
	"slices"
	"sync"
	"testing"
	"time"
)

// Proxy forwards every connection made to Addr to its upstream.
type Proxy struct {
	l        net.Listener
	upstream string

	mu      sync.Mutex
	latency time.Duration
	resumed chan struct{} // closed while nothing stalls
	conns   map[net.Conn]struct{}
	cut     bool // Cut: new connections are reset
	closed  bool
	quit    chan struct{} // closed by Close

	wg sync.WaitGroup
}

// Start listens on a free loopback port, forwarding to upstream
// (host:port), and closes the proxy when t ends.
func Start(t testing.TB, upstream string) *Proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{l: l, upstream: upstream, resumed: make(chan struct{}), conns: map[net.Conn]struct{}{}, quit: make(chan struct{})}
	close(p.resumed)
	p.wg.Go(p.accept)
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.l.Addr().String() }

// SetLatency makes every round trip d longer from now on: each chunk of
// bytes, either way, is delivered d/2 after it arrived (0: at once).
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	p.latency = d
	p.mu.Unlock()
}

// Stall stops every byte, either way, until Resume; connections stay open
// and new ones are accepted.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.resumed:
		p.resumed = make(chan struct{})
	default: // stalled already
	}
}

// Resume lets bytes pass again, those kept during the stall first.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.resumed:
	default:
		close(p.resumed)
	}
}

// Cut resets every connection, as a server that is gone does, and resets
// each new one as it is accepted, until Mend.
func (p *Proxy) Cut() {
	p.mu.Lock()
	p.cut = true
	conns := slices.Collect(maps.Keys(p.conns))
	p.mu.Unlock()
	for _, c := range conns {
		reset(c)
	}
}

// Mend ends a Cut: new connections pass again.
func (p *Proxy) Mend() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// reset closes c with a TCP reset.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// Close closes the listener and every connection, and waits until all the
// proxy's goroutines are done.
func (p *Proxy) Close() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.quit)
		for c := range p.conns {
			_ = c.Close()
		}
	}
	p.mu.Unlock()
	_ = p.l.Close()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		cut := p.cut
		p.mu.Unlock()
		if cut {
			reset(c)
			continue
		}
		u, err := net.Dial("tcp", p.upstream)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = c.Close()
			_ = u.Close()
			return
		}
		p.conns[c], p.conns[u] = struct{}{}, struct{}{} // for Close
		p.mu.Unlock()
		p.wg.Go(func() { p.pipe(u, c) })
		p.wg.Go(func() { p.pipe(c, u) })
	}
}

// chunk is bytes read, due at a time.
type chunk struct {
	b   []byte
	due time.Time
}

// pipe copies src to dst as the faults allow, until either ends; then it
// closes both.
func (p *Proxy) pipe(dst, src net.Conn) {
	chunks := make(chan chunk, 256) // then the reader waits: TCP's own backpressure
	done := make(chan struct{})
	go func() { // the reader, ended by closing src
		defer close(chunks)
		for {
			b := make([]byte, 32<<10)
			n, err := src.Read(b)
			if n > 0 {
				p.mu.Lock()
				due := time.Now().Add(p.latency / 2)
				p.mu.Unlock()
				select {
				case chunks <- chunk{b[:n], due}:
				case <-done:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	defer func() {
		close(done)
		p.mu.Lock()
		delete(p.conns, dst)
		delete(p.conns, src)
		p.mu.Unlock()
		_ = dst.Close()
		_ = src.Close()
		for range chunks { // until the reader has seen src closed
		}
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for c := range chunks {
		if d := time.Until(c.due); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-p.quit:
				return
			}
		}
		p.mu.Lock()
		resumed := p.resumed
		p.mu.Unlock()
		select {
		case <-resumed:
		case <-p.quit:
			return
		}
		if _, err := dst.Write(c.b); err != nil {
			return
		}
	}
}
