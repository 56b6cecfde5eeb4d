// Package tlstest makes what TLS tests need: a certificate authority, leaf
// certificates for the loopback address, and a directory of files mounted
// as the kubelet mounts a Secret, whose files can be swapped the kubelet's
// way to test a reload.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority for a test, valid for an hour either side
// of its making.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	PEM  []byte // Cert, PEM-encoded
}

// NewCA makes a CA named name.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	check(t, err)
	c, err := x509.ParseCertificate(der)
	check(t, err)
	return &CA{c, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Leaf is a certificate signed by ca for localhost and 127.0.0.1, good for
// a server and a client (as Envoy Gateway's certgen makes one for both),
// with serial and common name cn, and its key, both PEM-encoded.
func (ca *CA) Leaf(t testing.TB, cn string, serial int64) (certPEM, keyPEM []byte) {
	t.Helper()
	key := newKey(t)
	tpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn}, DNSNames: []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tpl, ca.Cert, &key.PublicKey, ca.Key)
	check(t, err)
	k, err := x509.MarshalECPrivateKey(key)
	check(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: k})
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	check(t, err)
	return key
}

// check fails t if err is not nil.
func check(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Volume is a Secret's volume as the kubelet writes it: the files in a
// timestamped directory, `..data` a link to it, each name a link through
// `..data`.
type Volume struct {
	t   testing.TB
	Dir string
	n   int
}

// NewVolume mounts files in a new temporary directory.
func NewVolume(t testing.TB, files map[string][]byte) *Volume {
	t.Helper()
	v := &Volume{t: t, Dir: t.TempDir()}
	v.Put(files)
	for name := range files {
		check(t, os.Symlink(filepath.Join("..data", name), filepath.Join(v.Dir, name)))
	}
	return v
}

// Put swaps files in the kubelet's way: a new directory, a new link renamed
// over `..data`, the old directory removed. files names the same files as
// NewVolume did.
func (v *Volume) Put(files map[string][]byte) {
	v.t.Helper()
	v.n++
	ts := fmt.Sprintf("..2026_11_29_04_00_%02d.%d", v.n, v.n)
	check(v.t, os.Mkdir(filepath.Join(v.Dir, ts), 0o755))
	for name, b := range files {
		check(v.t, os.WriteFile(filepath.Join(v.Dir, ts, name), b, 0o600))
	}
	old, _ := os.Readlink(filepath.Join(v.Dir, "..data"))
	check(v.t, os.Symlink(ts, filepath.Join(v.Dir, "..data_tmp")))
	check(v.t, os.Rename(filepath.Join(v.Dir, "..data_tmp"), filepath.Join(v.Dir, "..data")))
	if old != "" {
		check(v.t, os.RemoveAll(filepath.Join(v.Dir, old)))
	}
}

// Path is the path of the mounted file name.
func (v *Volume) Path(name string) string { return filepath.Join(v.Dir, name) }
