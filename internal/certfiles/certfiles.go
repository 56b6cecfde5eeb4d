// Package certfiles serves TLS certificates and CAs read from PEM files
// that change while the process runs: a Kubernetes Secret mounted as a
// volume, which the kubelet updates by writing a new directory and swapping
// the `..data` link to it, or cert-manager rotating a certificate.
//
// The files are looked at when they are used (a TLS handshake asks for the
// certificate or the CA), at most once every Options.Every: a stat of each
// file, which follows links, so that a new file behind a swapped link, a
// file renamed over another or one written in place is seen alike, with no
// goroutine and no watch to keep. When a file changed, the set is read
// again; when it does not load (a pair caught half written, a file gone),
// the one loaded before keeps serving and the next look tries again. Each
// reload and each failure is told once to Options.Loaded.
//
// An open connection keeps the certificate of its handshake: a new one is
// served on the next connection.
package certfiles

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"
)

// DefaultEvery is how often the files are looked at by default.
const DefaultEvery = time.Second

// Options configure how files are watched.
type Options struct {
	Every time.Duration    // the least time between two looks at the files (0: DefaultEvery)
	Now   func() time.Time // the clock (nil: time.Now)
	// Loaded is told of each reload after the first load, once per change:
	// the file (the certificate's, or the CA's) and nil, or why the files
	// were not taken (the ones loaded before still serve).
	Loaded func(file string, err error)
}

// watched is a value loaded from files, loaded again when they change.
type watched[T any] struct {
	mu     sync.Mutex
	o      Options
	files  []string
	parse  func(pem [][]byte) (T, error)
	cur    T
	pem    [][]byte      // what cur was loaded from
	seen   []os.FileInfo // the files when last read (loaded or not)
	nextAt time.Time     // the next look
}

func newWatched[T any](o Options, parse func([][]byte) (T, error), files ...string) (*watched[T], error) {
	w := &watched[T]{o: o, files: files, parse: parse}
	if w.o.Every <= 0 {
		w.o.Every = DefaultEvery
	}
	if w.o.Now == nil {
		w.o.Now = time.Now
	}
	seen, pem, err := w.read()
	if err != nil {
		return nil, err
	}
	if w.cur, err = parse(pem); err != nil {
		return nil, err
	}
	w.pem, w.seen, w.nextAt = pem, seen, w.o.Now().Add(w.o.Every)
	return w, nil
}

func (w *watched[T]) read() ([]os.FileInfo, [][]byte, error) {
	seen := make([]os.FileInfo, len(w.files))
	pem := make([][]byte, len(w.files))
	for i, f := range w.files {
		fi, err := os.Stat(f)
		if err != nil {
			return nil, nil, err
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, nil, err
		}
		seen[i], pem[i] = fi, b
	}
	return seen, pem, nil
}

// get is the value, the files looked at first when it is time.
func (w *watched[T]) get() T {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.o.Now()
	if now.Before(w.nextAt) {
		return w.cur
	}
	w.nextAt = now.Add(w.o.Every)
	if w.unchanged() {
		return w.cur
	}
	seen, pem, err := w.read()
	if err == nil && slices.EqualFunc(pem, w.pem, bytes.Equal) {
		w.seen = seen // touched, not changed
		return w.cur
	}
	var v T
	if err == nil {
		v, err = w.parse(pem)
	}
	if err != nil {
		if seen == nil {
			seen = w.stat() // told once: until the files change again
		}
		w.seen = seen
		w.tell(err)
		return w.cur
	}
	w.cur, w.pem, w.seen = v, pem, seen
	w.tell(nil)
	return w.cur
}

// unchanged reports whether every file is the one seen last: the same
// file (device and inode, behind any link), size and modification time.
func (w *watched[T]) unchanged() bool {
	now := w.stat()
	for i := range w.files {
		a, b := now[i], w.seen[i]
		if (a == nil) != (b == nil) || a != nil && (!os.SameFile(a, b) || a.Size() != b.Size() || !a.ModTime().Equal(b.ModTime())) {
			return false
		}
	}
	return true
}

// stat is each file's info (nil where it cannot be read).
func (w *watched[T]) stat() []os.FileInfo {
	out := make([]os.FileInfo, len(w.files))
	for i, f := range w.files {
		out[i], _ = os.Stat(f)
	}
	return out
}

func (w *watched[T]) tell(err error) {
	if w.o.Loaded != nil {
		w.o.Loaded(w.files[0], err)
	}
}

// KeyPair is a certificate and its key, from two PEM files.
type KeyPair struct{ w *watched[*tls.Certificate] }

// LoadKeyPair loads a certificate chain and its private key; an error
// names the file at fault.
func LoadKeyPair(certFile, keyFile string, o Options) (*KeyPair, error) {
	w, err := newWatched(o, func(pem [][]byte) (*tls.Certificate, error) {
		c, err := tls.X509KeyPair(pem[0], pem[1])
		if err != nil {
			return nil, fmt.Errorf("%s, %s: %w", certFile, keyFile, err)
		}
		return &c, nil
	}, certFile, keyFile)
	if err != nil {
		return nil, err
	}
	return &KeyPair{w}, nil
}

// Certificate is the certificate to show now.
func (k *KeyPair) Certificate() *tls.Certificate { return k.w.get() }

// Pool is a set of CA certificates, from one PEM file.
type Pool struct{ w *watched[*x509.CertPool] }

// LoadPool loads CA certificates.
func LoadPool(file string, o Options) (*Pool, error) {
	w, err := newWatched(o, func(pem [][]byte) (*x509.CertPool, error) {
		p := x509.NewCertPool()
		if !p.AppendCertsFromPEM(pem[0]) {
			return nil, fmt.Errorf("%s holds no PEM certificate", file)
		}
		return p, nil
	}, file)
	if err != nil {
		return nil, err
	}
	return &Pool{w}, nil
}

// CertPool is the CAs to trust now.
func (p *Pool) CertPool() *x509.CertPool { return p.w.get() }

// Server makes base a server's config that serves cert and, when clientCAs
// is not nil, checks client certificates against it: each handshake gets
// base with the current ones (GetConfigForClient, whose config is used
// whole: base's NextProtos must hold what the server speaks, "h2" for gRPC).
func Server(base *tls.Config, cert *KeyPair, clientCAs *Pool) *tls.Config {
	var mu sync.Mutex
	var last *tls.Config // for lastCert and base.ClientCAs or the pool
	var lastCert *tls.Certificate
	c := base.Clone()
	c.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		crt := cert.Certificate()
		pool := base.ClientCAs
		if clientCAs != nil {
			pool = clientCAs.CertPool()
		}
		mu.Lock()
		defer mu.Unlock()
		if last == nil || lastCert != crt || last.ClientCAs != pool {
			last, lastCert = base.Clone(), crt
			last.Certificates, last.ClientCAs = []tls.Certificate{*crt}, pool
		}
		return last, nil
	}
	return c
}

// Client is a client's config: cert shown when the server asks for one
// (nil: none), and the server's certificate checked against roots for
// serverName (nil: the system's). With roots, VerifyConnection checks the
// chain against the CAs of the moment in place of crypto/tls's own check,
// which reads a fixed RootCAs.
func Client(serverName string, cert *KeyPair, roots *Pool) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if cert != nil {
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert.Certificate(), nil }
	}
	if roots == nil {
		return c, nil
	}
	if serverName == "" {
		return nil, errors.New("certfiles: a client with its own CAs needs the server's name")
	}
	c.InsecureSkipVerify = true // replaced by VerifyConnection, below
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("tls: the server showed no certificate")
		}
		inter := x509.NewCertPool()
		for _, ic := range cs.PeerCertificates[1:] {
			inter.AddCert(ic)
		}
		_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots.CertPool(), Intermediates: inter, DNSName: serverName})
		return err
	}
	return c, nil
}
