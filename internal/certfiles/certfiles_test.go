package certfiles

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"github.com/limitd/limitd/internal/testkit/tlstest"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// clock is a driven clock.
type clock struct {
	mu sync.Mutex
	at time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.at }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.at = c.at.Add(d)
	c.mu.Unlock()
}

// events records what Loaded was told.
type events struct {
	mu  sync.Mutex
	got []string
}

func (e *events) loaded(file string, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err != nil {
		e.got = append(e.got, "error "+filepath.Base(file))
	} else {
		e.got = append(e.got, "ok "+filepath.Base(file))
	}
}

func (e *events) take() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := fmt.Sprint(e.got)
	e.got = nil
	return s
}

func serialOf(c *tls.Certificate) int64 {
	leaf, _ := x509.ParseCertificate(c.Certificate[0])
	return leaf.SerialNumber.Int64()
}

// The kubelet's swap of `..data` is seen at the first look after it (no
// sooner than Every after the last), and told once; a pair that does not
// load (a certificate with another's key) keeps the one before serving and
// is told once, however often it is looked at; files touched but equal are
// no reload.
func TestKeyPairKubeletSwap(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	c1, k1 := ca.Leaf(t, "limitd", 1)
	v := tlstest.NewVolume(t, map[string][]byte{"tls.crt": c1, "tls.key": k1})
	clk := &clock{at: time.Unix(1e9, 0)}
	ev := &events{}
	kp, err := LoadKeyPair(v.Path("tls.crt"), v.Path("tls.key"), Options{Every: 5 * time.Second, Now: clk.now, Loaded: ev.loaded})
	if err != nil {
		t.Fatal(err)
	}
	if s := serialOf(kp.Certificate()); s != 1 {
		t.Fatalf("serial %d, want 1", s)
	}
	c2, k2 := ca.Leaf(t, "limitd", 2)
	v.Put(map[string][]byte{"tls.crt": c2, "tls.key": k2})
	clk.add(4 * time.Second)
	if s := serialOf(kp.Certificate()); s != 1 {
		t.Errorf("serial %d before Every passed, want 1 (not looked at yet)", s)
	}
	clk.add(time.Second)
	if s, e := serialOf(kp.Certificate()), ev.take(); s != 2 || e != "[ok tls.crt]" {
		t.Errorf("after the swap: serial %d, told %s; want 2, [ok tls.crt]", s, e)
	}

	c3, _ := ca.Leaf(t, "limitd", 3)
	v.Put(map[string][]byte{"tls.crt": c3, "tls.key": k2}) // another's key
	for range 3 {
		clk.add(5 * time.Second)
		if s := serialOf(kp.Certificate()); s != 2 {
			t.Errorf("with a mismatched pair: serial %d, want 2 (the one before)", s)
		}
	}
	if e := ev.take(); e != "[error tls.crt]" {
		t.Errorf("told %s, want one error", e)
	}
	v.Put(map[string][]byte{"tls.crt": c2, "tls.key": k2}) // the same files again: no reload
	clk.add(5 * time.Second)
	if s, e := serialOf(kp.Certificate()), ev.take(); s != 2 || e != "[]" {
		t.Errorf("the same files swapped in: serial %d, told %s; want 2, nothing", s, e)
	}
	if _, err := LoadKeyPair(v.Path("tls.crt"), v.Path("none.key"), Options{}); err == nil {
		t.Error("a missing key loads")
	}
}

// A server's certificate and client CA, and a client's certificate and
// CA, each swapped the kubelet's way, serve from the next handshake on: the
// new serial is shown, a client of the new CA is taken once the server's
// client CA file has it, and the client checks the server against its CA
// file of the moment, by name.
func TestHandshakes(t *testing.T) {
	ca1, ca2 := tlstest.NewCA(t, "ca1"), tlstest.NewCA(t, "ca2")
	sc, sk := ca1.Leaf(t, "limitd", 10)
	cc, ck := ca1.Leaf(t, "limitd", 20)
	sv := tlstest.NewVolume(t, map[string][]byte{"tls.crt": sc, "tls.key": sk, "ca.crt": ca1.PEM})
	cv := tlstest.NewVolume(t, map[string][]byte{"tls.crt": cc, "tls.key": ck, "ca.crt": ca1.PEM})
	clk := &clock{at: time.Unix(1e9, 0)}
	o := Options{Now: clk.now}
	load := func(v *tlstest.Volume) (*KeyPair, *Pool) {
		kp, err := LoadKeyPair(v.Path("tls.crt"), v.Path("tls.key"), o)
		if err != nil {
			t.Fatal(err)
		}
		p, err := LoadPool(v.Path("ca.crt"), o)
		if err != nil {
			t.Fatal(err)
		}
		return kp, p
	}
	skp, spool := load(sv)
	ckp, cpool := load(cv)
	server := Server(&tls.Config{MinVersion: tls.VersionTLS12, ClientAuth: tls.RequireAndVerifyClientCert}, skp, spool)
	client, err := Client("localhost", ckp, cpool)
	if err != nil {
		t.Fatal(err)
	}
	shake := func() (serverSerial, clientSerial int64, err error) {
		// Over TCP, not a pipe: in TLS 1.3 the server may refuse the
		// client's certificate after the client is done, its alert
		// written to a socket's buffer that nobody reads.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		type result struct {
			serial int64
			err    error
		}
		done := make(chan result, 1)
		go func() {
			conn, err := ln.Accept()
			if err != nil {
				done <- result{err: err}
				return
			}
			defer conn.Close()
			srv := tls.Server(conn, server)
			if err := srv.Handshake(); err != nil {
				done <- result{err: err}
				return
			}
			done <- result{serial: srv.ConnectionState().PeerCertificates[0].SerialNumber.Int64()}
		}()
		cl, err := tls.Dial("tcp", ln.Addr().String(), client)
		if err == nil {
			serverSerial = cl.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
			cl.Close()
		}
		r := <-done
		if err == nil {
			err = r.err
		}
		return serverSerial, r.serial, err
	}
	if s, c, err := shake(); err != nil || s != 10 || c != 20 {
		t.Fatalf("first handshake: server %d, client %d, %v; want 10, 20", s, c, err)
	}

	// Both sides move to ca2: the server's certificate and CA first.
	sc2, sk2 := ca2.Leaf(t, "limitd", 11)
	sv.Put(map[string][]byte{"tls.crt": sc2, "tls.key": sk2, "ca.crt": append(append([]byte{}, ca1.PEM...), ca2.PEM...)})
	clk.add(DefaultEvery)
	if _, _, err := shake(); err == nil {
		t.Error("the client took a server certificate of a CA its file does not hold")
	}
	cc2, ck2 := ca2.Leaf(t, "limitd", 21)
	cv.Put(map[string][]byte{"tls.crt": cc2, "tls.key": ck2, "ca.crt": ca2.PEM})
	clk.add(DefaultEvery)
	if s, c, err := shake(); err != nil || s != 11 || c != 21 {
		t.Errorf("after both swaps: server %d, client %d, %v; want 11, 21", s, c, err)
	}
	sv.Put(map[string][]byte{"tls.crt": sc2, "tls.key": sk2, "ca.crt": ca1.PEM})
	clk.add(DefaultEvery)
	if _, _, err := shake(); err == nil {
		t.Error("the server took a client certificate of a CA its file no longer holds")
	}
	if _, err := Client("", ckp, cpool); err == nil {
		t.Error("a client with its own CAs and no server name")
	}
}
