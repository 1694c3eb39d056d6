// Package certtest is the one place that makes X.509 certificates for tests and the
// testbed: small hierarchies for tests (a root CA, an intermediate, leaves with chosen
// names and key types, self-signed leaves; the functions taking a testing.TB), and the
// error-returning building blocks (Create, LeafTemplate, SelfSigned, WriteFiles) that the
// testbed's deterministic PKI (internal/testbed/pki), measuretest's padded chains and the
// testbed tools build on. Product code never imports it.
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
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// Issuer is a CA that can sign certificates.
type Issuer struct {
	Cert *x509.Certificate
	Key  crypto.Signer
}

var serial atomic.Int64

func next() *big.Int { return big.NewInt(1000 + serial.Add(1)) }

// KeyKind selects the leaf key algorithm.
type KeyKind int

const (
	ECDSA KeyKind = iota
	RSA
	Ed25519
)

// NewKey generates a key of kind k.
func NewKey(k KeyKind) (crypto.Signer, error) {
	switch k {
	case RSA:
		return rsa.GenerateKey(rand.Reader, 2048)
	case Ed25519:
		_, key, err := ed25519.GenerateKey(rand.Reader)
		return key, err
	default:
		return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	}
}

func newKey(t testing.TB, k KeyKind) crypto.Signer {
	t.Helper()
	key, err := NewKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// Create makes the certificate tmpl for key, signed by parent (nil: self-signed). A
// template without a serial number gets the next of a counter; one without validity is
// valid from an hour ago for a day. Signatures are deterministic for Ed25519 keys, so a
// template and key fixed by the caller (as the testbed's PKI does) give the same bytes on
// every run.
func Create(tmpl *x509.Certificate, parent *Issuer, key crypto.Signer) (*Issuer, error) {
	if tmpl.SerialNumber == nil {
		tmpl.SerialNumber = next()
	}
	if tmpl.NotBefore.IsZero() && tmpl.NotAfter.IsZero() {
		tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	}
	if parent == nil {
		parent = &Issuer{Cert: tmpl, Key: key}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent.Cert, key.Public(), parent.Key)
	if err != nil {
		return nil, fmt.Errorf("certtest: %s: %w", tmpl.Subject.CommonName, err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("certtest: %s: %w", tmpl.Subject.CommonName, err)
	}
	return &Issuer{Cert: c, Key: key}, nil
}

func sign(t testing.TB, tmpl *x509.Certificate, parent *Issuer, key crypto.Signer) *x509.Certificate {
	t.Helper()
	c, err := Create(tmpl, parent, key)
	if err != nil {
		t.Fatal(err)
	}
	return c.Cert
}

// CATemplate is the template of a CA certificate named cn.
func CATemplate(cn string) *x509.Certificate {
	return &x509.Certificate{Subject: pkix.Name{CommonName: cn},
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature}
}

// NewRoot makes a self-signed root CA.
func NewRoot(t testing.TB, cn string) *Issuer {
	key := newKey(t, ECDSA)
	return &Issuer{Cert: sign(t, CATemplate(cn), nil, key), Key: key}
}

// Intermediate makes a CA signed by i.
func (i *Issuer) Intermediate(t testing.TB, cn string) *Issuer {
	key := newKey(t, ECDSA)
	return &Issuer{Cert: sign(t, CATemplate(cn), i, key), Key: key}
}

// Leaf issues a server certificate for names (DNS names or IP literals); the first
// name is also the CN.
func (i *Issuer) Leaf(t testing.TB, k KeyKind, names ...string) (*x509.Certificate, crypto.Signer) {
	key := newKey(t, k)
	return sign(t, LeafTemplate(names...), i, key), key
}

// LeafTemplate is the template of a server certificate for names (DNS names or IP
// literals); the first name is also the CN.
func LeafTemplate(names ...string) *x509.Certificate {
	tmpl := &x509.Certificate{
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

// SelfSigned makes a self-signed server certificate for names with a new key of kind k.
func SelfSigned(k KeyKind, names ...string) (*x509.Certificate, crypto.Signer, error) {
	key, err := NewKey(k)
	if err != nil {
		return nil, nil, err
	}
	c, err := Create(LeafTemplate(names...), nil, key)
	if err != nil {
		return nil, nil, err
	}
	return c.Cert, key, nil
}

// SelfSignedLeaf makes a self-signed server certificate for names.
func SelfSignedLeaf(t testing.TB, k KeyKind, names ...string) (*x509.Certificate, crypto.Signer) {
	t.Helper()
	c, key, err := SelfSigned(k, names...)
	if err != nil {
		t.Fatal(err)
	}
	return c, key
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

// PEM encodes DER certificates as one PEM file's contents (a chain: leaf first).
func PEM(ders ...[]byte) []byte {
	var out []byte
	for _, d := range ders {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: d})...)
	}
	return out
}

// WriteFiles writes chain (DER, leaf first) to certFile and key (PKCS #8) to keyFile, as
// PEM, for servers and clients that load their certificate from files.
func WriteFiles(certFile, keyFile string, chain [][]byte, key crypto.Signer) error {
	kd, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(certFile, PEM(chain...), 0o644); err != nil {
		return err
	}
	return os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kd}), 0o600)
}

// WritePEM writes leaf and key as PEM files cert.pem and key.pem (PKCS #8) in dir, for
// servers that load their certificate from files, and returns the two paths.
func WritePEM(t testing.TB, dir string, leaf *x509.Certificate, key crypto.Signer) (certFile, keyFile string) {
	t.Helper()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := WriteFiles(certFile, keyFile, [][]byte{leaf.Raw}, key); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}
