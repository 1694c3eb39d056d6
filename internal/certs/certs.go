// Package certs turns a TLS peer's certificate chain into doqscan's certificate rows
// (deduplicated by the SHA-256 of the DER) and says whether the chain validates for a
// server name against a root pool.
package certs

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/netip"
	"time"

	"github.com/doqscan/doqscan/internal/listfile"
	"github.com/doqscan/doqscan/internal/store"
)

// Fingerprint is the SHA-256 of a certificate's DER (the key of table certificates).
func Fingerprint(der []byte) []byte {
	h := sha256.Sum256(der)
	return h[:]
}

// Row parses one certificate into its row. seen is the time it was first seen.
func Row(c *x509.Certificate, seen time.Time) store.Certificate {
	nb, na := c.NotBefore.UTC(), c.NotAfter.UTC()
	keyType, bits := KeyInfo(c)
	row := store.Certificate{
		SHA256:       Fingerprint(c.Raw),
		DER:          c.Raw,
		Subject:      c.Subject.String(),
		SubjectCN:    c.Subject.CommonName,
		SANs:         SANs(c),
		Issuer:       c.Issuer.String(),
		IssuerCN:     c.Issuer.CommonName,
		NotBefore:    &nb,
		NotAfter:     &na,
		KeyType:      keyType,
		SignatureAlg: c.SignatureAlgorithm.String(),
		IsCA:         c.IsCA,
		SelfSigned:   SelfSigned(c),
		FirstSeen:    seen,
	}
	if c.SerialNumber != nil {
		row.Serial = c.SerialNumber.Text(16)
	}
	if bits > 0 {
		b := int32(bits)
		row.KeyBits = &b
	}
	return row
}

// SANs lists a certificate's DNS names then IP addresses (as text).
func SANs(c *x509.Certificate) []string {
	out := make([]string, 0, len(c.DNSNames)+len(c.IPAddresses))
	out = append(out, c.DNSNames...)
	for _, ip := range c.IPAddresses {
		out = append(out, ip.String())
	}
	return out
}

// KeyInfo names the public key algorithm and its size in bits (0 if unknown).
func KeyInfo(c *x509.Certificate) (string, int) {
	switch k := c.PublicKey.(type) {
	case *rsa.PublicKey:
		return "rsa", k.N.BitLen()
	case *ecdsa.PublicKey:
		return "ecdsa", k.Curve.Params().BitSize
	case ed25519.PublicKey:
		return "ed25519", 256
	}
	switch c.PublicKeyAlgorithm {
	case x509.UnknownPublicKeyAlgorithm:
		return "unknown", 0
	default:
		return c.PublicKeyAlgorithm.String(), 0
	}
}

// SelfSigned reports whether the certificate's issuer is its subject and its signature
// verifies with its own key.
func SelfSigned(c *x509.Certificate) bool {
	if !bytes.Equal(c.RawIssuer, c.RawSubject) {
		return false
	}
	return c.CheckSignatureFrom(c) == nil || c.CheckSignature(c.SignatureAlgorithm, c.RawTBSCertificate, c.Signature) == nil
}

// Chain parses a chain (leaf first) into rows and the list of fingerprints, leaf first.
// A certificate that appears twice in the chain gets one row.
func Chain(chain []*x509.Certificate, seen time.Time) (rows []store.Certificate, fps [][]byte) {
	have := map[[32]byte]bool{}
	for _, c := range chain {
		h := sha256.Sum256(c.Raw)
		fps = append(fps, h[:])
		if have[h] {
			continue
		}
		have[h] = true
		rows = append(rows, Row(c, seen))
	}
	return rows, fps
}

// Dedup accumulates certificate rows across results, keeping the first of each
// fingerprint, so a batch written with store.Insert carries each certificate once.
type Dedup struct {
	seen map[[32]byte]bool
	rows []store.Certificate
}

// Add adds rows not seen before.
func (d *Dedup) Add(rows ...store.Certificate) {
	if d.seen == nil {
		d.seen = map[[32]byte]bool{}
	}
	for _, r := range rows {
		var k [32]byte
		copy(k[:], r.SHA256)
		if d.seen[k] {
			continue
		}
		d.seen[k] = true
		d.rows = append(d.rows, r)
	}
}

// Take returns the rows collected since the last Take (the seen set is kept).
func (d *Dedup) Take() []store.Certificate {
	r := d.rows
	d.rows = nil
	return r
}

// ValidFor reports whether chain (leaf first) verifies against roots (nil: the system
// pool) at time now and names serverName (a DNS name or an IP address literal). With
// no server name, only the chain is checked. The error says why not.
func ValidFor(chain []*x509.Certificate, serverName string, roots *x509.CertPool, now time.Time) (bool, error) {
	if len(chain) == 0 {
		return false, fmt.Errorf("no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	opts := x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	if serverName != "" {
		if a, err := netip.ParseAddr(serverName); err == nil {
			opts.DNSName = a.String()
		} else {
			opts.DNSName = serverName
		}
	}
	if _, err := chain[0].Verify(opts); err != nil {
		return false, err
	}
	return true, nil
}

// maxRootsFile bounds a PEM file of root certificates (Debian's bundle is about 200 KB).
const maxRootsFile = 64 << 20

// LoadPool reads PEM certificates from path into a pool; an empty path gives the
// system pool. The file is read with listfile.ReadAll (a FIFO or directory is an error).
func LoadPool(path string) (*x509.CertPool, error) {
	if path == "" {
		p, err := x509.SystemCertPool()
		if err != nil {
			return nil, fmt.Errorf("system root pool: %w", err)
		}
		return p, nil
	}
	b, err := listfile.ReadAll(path, maxRootsFile)
	if err != nil {
		return nil, fmt.Errorf("roots: %w", err)
	}
	p := x509.NewCertPool()
	n := 0
	for len(b) > 0 {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("roots %s: %w", path, err)
		}
		p.AddCert(c)
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("roots %s: no PEM certificate", path)
	}
	return p, nil
}
