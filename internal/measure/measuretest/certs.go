// Package measuretest starts real DNS servers in-process on 127.0.0.0/8 for the
// measurement tests and benchmarks: DoUDP/DoTCP (miekg/dns), DoT (crypto/tls), DoH
// (net/http, HTTP/2), DoQ and DoH3 (quic-go), with configurable delay, certificate chain
// size, Retry and token behaviour, loss, and hostile behaviours (stall, garbage, endless
// stream, wrong length, reset).
package measuretest

import (
	"crypto/tls"
	"fmt"

	"github.com/doqscan/doqscan/internal/certs/certtest"
)

// Certificate returns a self-signed ECDSA certificate whose chain (leaf plus filler
// certificates standing in for intermediates) totals at least chainBytes of DER; 0 gives
// a single small certificate (~500 bytes). A server's first flight carries the chain,
// so chainBytes decides whether it exceeds the anti-amplification budget (RFC 9000 §8.1).
func Certificate(chainBytes int) (tls.Certificate, error) {
	leaf, key, err := certtest.SelfSigned(certtest.ECDSA, "dns.test")
	if err != nil {
		return tls.Certificate{}, err
	}
	var fillers [][]byte
	total := len(leaf.Raw)
	for i := 0; total < chainBytes; i++ {
		// Each filler carries ~2 KB of SANs, like a CA certificate with long policies.
		names := []string{fmt.Sprintf("intermediate-%d.dns.test", i)}
		for j := 0; j < 40; j++ {
			names = append(names, fmt.Sprintf("filler-%02d-%02d.intermediate.dns.test", i, j))
		}
		c, _, err := certtest.SelfSigned(certtest.ECDSA, names...)
		if err != nil {
			return tls.Certificate{}, err
		}
		fillers = append(fillers, c.Raw)
		total += len(c.Raw)
	}
	cert := tls.Certificate{Certificate: append([][]byte{leaf.Raw}, fillers...), PrivateKey: key, Leaf: leaf}
	return cert, nil
}
