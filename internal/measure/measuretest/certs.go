// Package measuretest starts real DNS servers in-process on 127.0.0.0/8 for the
// measurement tests and benchmarks: DoUDP/DoTCP (miekg/dns), DoT (crypto/tls), DoH
// (net/http, HTTP/2), DoQ and DoH3 (quic-go), with configurable delay, certificate chain
// size, Retry and token behaviour, loss, and hostile behaviours (stall, garbage, endless
// stream, wrong length, reset).
package measuretest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"time"
)

// Certificate returns a self-signed ECDSA certificate whose chain (leaf plus filler
// certificates standing in for intermediates) totals at least chainBytes of DER; 0 gives
// a single small certificate (~500 bytes). A server's first flight carries the chain,
// so chainBytes decides whether it exceeds the anti-amplification budget (RFC 9000 §8.1).
func Certificate(chainBytes int) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	leaf, err := selfSigned(key, "dns.test", nil)
	if err != nil {
		return tls.Certificate{}, err
	}
	cert := tls.Certificate{Certificate: [][]byte{leaf}, PrivateKey: key}
	total := len(leaf)
	for i := 0; total < chainBytes; i++ {
		// Each filler carries ~2 KB of SANs, like a CA certificate with long policies.
		var sans []string
		for j := 0; j < 40; j++ {
			sans = append(sans, fmt.Sprintf("filler-%02d-%02d.intermediate.dns.test", i, j))
		}
		der, err := selfSigned(key, fmt.Sprintf("Intermediate %d", i), sans)
		if err != nil {
			return tls.Certificate{}, err
		}
		cert.Certificate = append(cert.Certificate, der)
		total += len(der)
	}
	return cert, nil
}

func selfSigned(key *ecdsa.PrivateKey, cn string, sans []string) ([]byte, error) {
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		DNSNames:     append([]string{"dns.test"}, sans...),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	return x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
}
