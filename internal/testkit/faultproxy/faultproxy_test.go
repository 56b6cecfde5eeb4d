package faultproxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"
)

// echo serves an echo on a free loopback port until t ends.
func echo(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			})
		}
	})
	t.Cleanup(func() { _ = l.Close(); wg.Wait() })
	return l.Addr().String()
}

// roundTrip sends line through c and reads it back.
func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, line string) {
	t.Helper()
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		t.Fatal(err)
	}
	got, err := r.ReadString('\n')
	if err != nil || got != line+"\n" {
		t.Fatalf("read %q, %v; want %q", got, err, line)
	}
}

// TestProxy: bytes pass through in order; with latency a round trip takes
// at least that much longer (a lower bound: load only makes it later); a
// stall holds every byte, the connection open, until Resume delivers them.
func TestProxy(t *testing.T) {
	p := Start(t, echo(t))
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	roundTrip(t, c, r, "one")

	p.SetLatency(40 * time.Millisecond)
	start := time.Now()
	roundTrip(t, c, r, "two")
	if took := time.Since(start); took < 40*time.Millisecond {
		t.Errorf("a round trip with 40ms of latency took %v", took)
	}
	p.SetLatency(0)

	p.Stall()
	p.Stall() // twice is once
	if _, err := io.WriteString(c, "three\n"); err != nil {
		t.Fatal(err)
	}
	// Nothing comes back while stalled: the read ends at its deadline.
	_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if b, err := r.ReadByte(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read during a stall: %q, %v", b, err)
	}
	_ = c.SetReadDeadline(time.Time{})
	p.Resume()
	got, err := r.ReadString('\n')
	if err != nil || got != "three\n" {
		t.Fatalf("after Resume: %q, %v", got, err)
	}
	roundTrip(t, c, r, "four")

	// Close ends every connection.
	p.Close()
	if _, err := r.ReadString('\n'); err == nil {
		t.Error("a connection outlived Close")
	}
	p.Close() // twice is fine
}

// TestCut: a cut resets the connections open and each new one until Mend;
// then new connections pass again.
func TestCut(t *testing.T) {
	p := Start(t, echo(t))
	dial := func() (net.Conn, *bufio.Reader) {
		t.Helper()
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second)) // a hang fails, not blocks
		return c, bufio.NewReader(c)
	}
	c, r := dial()
	roundTrip(t, c, r, "before")
	p.Cut()
	if line, err := r.ReadString('\n'); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("a connection open at the cut read %q, %v; want it reset", line, err)
	}
	// A connection made during the cut is reset: on its first read, or
	// already in the dial when the reset comes first.
	if c2, err := net.Dial("tcp", p.Addr()); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("dial during the cut: %v; want it reset", err)
	} else if err == nil {
		t.Cleanup(func() { _ = c2.Close() })
		_ = c2.SetReadDeadline(time.Now().Add(10 * time.Second))
		if line, err := bufio.NewReader(c2).ReadString('\n'); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("a connection made during the cut read %q, %v; want it reset", line, err)
		}
	}
	p.Mend()
	c3, r3 := dial()
	roundTrip(t, c3, r3, "after")
}
