package certfiles

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// authority is a test CA.
type authority struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newAuthority(t *testing.T, name string) *authority {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return &authority{c, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// leaf is a certificate for localhost and 127.0.0.1 with serial, and its key.
func (a *authority) leaf(t *testing.T, serial int64) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "limitd"}, DNSNames: []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tpl, a.cert, &key.PublicKey, a.key)
	if err != nil {
		t.Fatal(err)
	}
	k, _ := x509.MarshalECPrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: k})
}

// volume is a Secret's volume as the kubelet writes it: the files in a
// timestamped directory, `..data` a link to it, each name a link through
// `..data`. put swaps in new files the kubelet's way: a new directory, a
// new link renamed over `..data`, the old directory removed.
type volume struct {
	t   *testing.T
	dir string
	n   int
}

func newVolume(t *testing.T, files map[string][]byte) *volume {
	v := &volume{t: t, dir: t.TempDir()}
	v.put(files)
	for name := range files {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(v.dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return v
}

func (v *volume) put(files map[string][]byte) {
	v.t.Helper()
	v.n++
	ts := fmt.Sprintf("..2026_11_29_04_00_%02d.%d", v.n, v.n)
	if err := os.Mkdir(filepath.Join(v.dir, ts), 0o755); err != nil {
		v.t.Fatal(err)
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(v.dir, ts, name), b, 0o644); err != nil {
			v.t.Fatal(err)
		}
	}
	old, _ := os.Readlink(filepath.Join(v.dir, "..data"))
	if err := os.Symlink(ts, filepath.Join(v.dir, "..data_tmp")); err != nil {
		v.t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(v.dir, "..data_tmp"), filepath.Join(v.dir, "..data")); err != nil {
		v.t.Fatal(err)
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(v.dir, old)); err != nil {
			v.t.Fatal(err)
		}
	}
}

func (v *volume) path(name string) string { return filepath.Join(v.dir, name) }

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
	ca := newAuthority(t, "ca")
	c1, k1 := ca.leaf(t, 1)
	v := newVolume(t, map[string][]byte{"tls.crt": c1, "tls.key": k1})
	clk := &clock{at: time.Unix(1e9, 0)}
	ev := &events{}
	kp, err := LoadKeyPair(v.path("tls.crt"), v.path("tls.key"), Options{Every: 5 * time.Second, Now: clk.now, Loaded: ev.loaded})
	if err != nil {
		t.Fatal(err)
	}
	if s := serialOf(kp.Certificate()); s != 1 {
		t.Fatalf("serial %d, want 1", s)
	}
	c2, k2 := ca.leaf(t, 2)
	v.put(map[string][]byte{"tls.crt": c2, "tls.key": k2})
	clk.add(4 * time.Second)
	if s := serialOf(kp.Certificate()); s != 1 {
		t.Errorf("serial %d before Every passed, want 1 (not looked at yet)", s)
	}
	clk.add(time.Second)
	if s, e := serialOf(kp.Certificate()), ev.take(); s != 2 || e != "[ok tls.crt]" {
		t.Errorf("after the swap: serial %d, told %s; want 2, [ok tls.crt]", s, e)
	}

	c3, _ := ca.leaf(t, 3)
	v.put(map[string][]byte{"tls.crt": c3, "tls.key": k2}) // another's key
	for range 3 {
		clk.add(5 * time.Second)
		if s := serialOf(kp.Certificate()); s != 2 {
			t.Errorf("with a mismatched pair: serial %d, want 2 (the one before)", s)
		}
	}
	if e := ev.take(); e != "[error tls.crt]" {
		t.Errorf("told %s, want one error", e)
	}
	v.put(map[string][]byte{"tls.crt": c2, "tls.key": k2}) // the same files again: no reload
	clk.add(5 * time.Second)
	if s, e := serialOf(kp.Certificate()), ev.take(); s != 2 || e != "[]" {
		t.Errorf("the same files swapped in: serial %d, told %s; want 2, nothing", s, e)
	}
	if _, err := LoadKeyPair(v.path("tls.crt"), v.path("none.key"), Options{}); err == nil {
		t.Error("a missing key loads")
	}
}

// A server's certificate and client CA, and a client's certificate and
// CA, each swapped the kubelet's way, serve from the next handshake on: the
// new serial is shown, a client of the new CA is taken once the server's
// client CA file has it, and the client checks the server against its CA
// file of the moment, by name.
func TestHandshakes(t *testing.T) {
	ca1, ca2 := newAuthority(t, "ca1"), newAuthority(t, "ca2")
	sc, sk := ca1.leaf(t, 10)
	cc, ck := ca1.leaf(t, 20)
	sv := newVolume(t, map[string][]byte{"tls.crt": sc, "tls.key": sk, "ca.crt": ca1.pem})
	cv := newVolume(t, map[string][]byte{"tls.crt": cc, "tls.key": ck, "ca.crt": ca1.pem})
	clk := &clock{at: time.Unix(1e9, 0)}
	o := Options{Now: clk.now}
	load := func(v *volume) (*KeyPair, *Pool) {
		kp, err := LoadKeyPair(v.path("tls.crt"), v.path("tls.key"), o)
		if err != nil {
			t.Fatal(err)
		}
		p, err := LoadPool(v.path("ca.crt"), o)
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
	sc2, sk2 := ca2.leaf(t, 11)
	sv.put(map[string][]byte{"tls.crt": sc2, "tls.key": sk2, "ca.crt": append(append([]byte{}, ca1.pem...), ca2.pem...)})
	clk.add(DefaultEvery)
	if _, _, err := shake(); err == nil {
		t.Error("the client took a server certificate of a CA its file does not hold")
	}
	cc2, ck2 := ca2.leaf(t, 21)
	cv.put(map[string][]byte{"tls.crt": cc2, "tls.key": ck2, "ca.crt": ca2.pem})
	clk.add(DefaultEvery)
	if s, c, err := shake(); err != nil || s != 11 || c != 21 {
		t.Errorf("after both swaps: server %d, client %d, %v; want 11, 21", s, c, err)
	}
	sv.put(map[string][]byte{"tls.crt": sc2, "tls.key": sk2, "ca.crt": ca1.pem})
	clk.add(DefaultEvery)
	if _, _, err := shake(); err == nil {
		t.Error("the server took a client certificate of a CA its file no longer holds")
	}
	if _, err := Client("", ckp, cpool); err == nil {
		t.Error("a client with its own CAs and no server name")
	}
}
