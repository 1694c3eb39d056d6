// Package certtest makes small certificate hierarchies for tests: a root CA, an
// intermediate, leaves with chosen names and key types, and self-signed leaves.
package certtest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Issuer is a CA that can sign certificates.
type Issuer struct {
	Cert *x509.Certificate
	Key  crypto.Signer
}

var serial int64 = 1000

func next() *big.Int { serial++; return big.NewInt(serial) }

// KeyKind selects the leaf key algorithm.
type KeyKind int

const (
	ECDSA KeyKind = iota
	RSA
	Ed25519
)

func newKey(t testing.TB, k KeyKind) crypto.Signer {
	t.Helper()
	var (
		key crypto.Signer
		err error
	)
	switch k {
	case RSA:
		key, err = rsa.GenerateKey(rand.Reader, 2048)
	case Ed25519:
		_, key, err = ed25519.GenerateKey(rand.Reader)
	default:
		key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	}
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func sign(t testing.TB, tmpl *x509.Certificate, parent *x509.Certificate, pub any, key crypto.Signer) *x509.Certificate {
	t.Helper()
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// NewRoot makes a self-signed root CA.
func NewRoot(t testing.TB, cn string) *Issuer {
	key := newKey(t, ECDSA)
	tmpl := &x509.Certificate{SerialNumber: next(), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	return &Issuer{Cert: sign(t, tmpl, tmpl, key.Public(), key), Key: key}
}

// Intermediate makes a CA signed by i.
func (i *Issuer) Intermediate(t testing.TB, cn string) *Issuer {
	key := newKey(t, ECDSA)
	tmpl := &x509.Certificate{SerialNumber: next(), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	return &Issuer{Cert: sign(t, tmpl, i.Cert, key.Public(), i.Key), Key: key}
}

// Leaf issues a server certificate for names (DNS names or IP literals); the first
// name is also the CN.
func (i *Issuer) Leaf(t testing.TB, k KeyKind, names ...string) (*x509.Certificate, crypto.Signer) {
	key := newKey(t, k)
	tmpl := leafTemplate(names)
	return sign(t, tmpl, i.Cert, key.Public(), i.Key), key
}

func leafTemplate(names []string) *x509.Certificate {
	tmpl := &x509.Certificate{SerialNumber: next(),
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage:    x509.KeyUsageDigitalSignature}
	if len(names) > 0 {
		tmpl.Subject.CommonName = names[0]
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	return tmpl
}

// SelfSignedLeaf makes a self-signed server certificate for names.
func SelfSignedLeaf(t testing.TB, k KeyKind, names ...string) (*x509.Certificate, crypto.Signer) {
	key := newKey(t, k)
	tmpl := leafTemplate(names)
	return sign(t, tmpl, tmpl, key.Public(), key), key
}

// TLS builds a tls.Certificate from a leaf, its key and the intermediates.
func TLS(leaf *x509.Certificate, key crypto.Signer, inter ...*x509.Certificate) tls.Certificate {
	c := tls.Certificate{Certificate: [][]byte{leaf.Raw}, PrivateKey: key, Leaf: leaf}
	for _, i := range inter {
		c.Certificate = append(c.Certificate, i.Raw)
	}
	return c
}

// Pool returns a pool holding the given certificates.
func Pool(cs ...*x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	for _, c := range cs {
		p.AddCert(c)
	}
	return p
}

// WritePEM writes leaf and key as PEM files cert.pem and key.pem (PKCS #8) in dir, for
// servers that load their certificate from files, and returns the two paths.
func WritePEM(t testing.TB, dir string, leaf *x509.Certificate, key crypto.Signer) (certFile, keyFile string) {
	t.Helper()
	kd, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kd}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}
