// Package pki builds the testbed's certificates deterministically from the population's
// seed and [certs] section: two CAs (ca-a, ca-b), provider leaves with their intermediate
// chains, self-signed leaves and oversized chains that exceed QUIC's anti-amplification
// budget (RFC 9000 §8.1). Keys are Ed25519, derived from SHA-256(seed, name), and
// signatures are deterministic (RFC 8032), so every process (simserver, simdns, the
// third-party peers fed by WriteDir, the tests) builds byte-identical certificates and no
// private key needs to be stored in the repository. The X.509 work itself is
// internal/certs/certtest's, the one home of certificate making for tests and testbed.
package pki

import (
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/binary"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/doqscan/doqscan/internal/certs/certtest"
	"github.com/doqscan/doqscan/internal/testbed/population"
)

// CA names a [certs] issuer may use besides "self".
var CANames = []string{"ca-a", "ca-b"}

// Fixed validity, so certificates do not depend on the clock: valid from 2025 to 2045.
var (
	notBefore = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	notAfter  = time.Date(2045, 1, 1, 0, 0, 0, 0, time.UTC)
)

// oidPad is the filler extension sized by a cert's pad (non-critical, so every TLS stack
// ignores it), under PEN 32473, the enterprise number reserved for documentation (RFC 5612).
var oidPad = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 32473, 1, 1}

// PKI holds every certificate of a population.
type PKI struct {
	roots  map[string]*x509.Certificate
	certs  map[string]*tls.Certificate
	chains map[string]int // DER bytes of leaf + intermediates
	pool   *x509.CertPool
}

func key(seed uint64, name string) ed25519.PrivateKey {
	h := sha256.New()
	fmt.Fprintf(h, "doqscan-testbed-pki\x00%d\x00%s", seed, name)
	return ed25519.NewKeyFromSeed(h.Sum(nil))
}

func serial(seed uint64, name string) *big.Int {
	h := sha256.Sum256([]byte(fmt.Sprintf("serial\x00%d\x00%s", seed, name)))
	return new(big.Int).SetUint64(binary.BigEndian.Uint64(h[:8]) >> 1)
}

func padExtension(n int) []pkix.Extension {
	if n <= 0 {
		return nil
	}
	v, _ := asn1.Marshal([]byte(strings.Repeat("doqscan-testbed-padding.", n/24+1)[:n]))
	return []pkix.Extension{{Id: oidPad, Value: v}}
}

// create makes the certificate name of the population's seed from tmpl, signed by
// parent (nil: self-signed), with its deterministic key, serial and fixed validity.
func create(seed uint64, name string, tmpl *x509.Certificate, parent *certtest.Issuer) (*certtest.Issuer, error) {
	tmpl.SerialNumber = serial(seed, name)
	tmpl.NotBefore, tmpl.NotAfter = notBefore, notAfter
	c, err := certtest.Create(tmpl, parent, key(seed, name))
	if err != nil {
		return nil, fmt.Errorf("pki: %s: %w", name, err)
	}
	return c, nil
}

func caTemplate(cn string, pad int) *x509.Certificate {
	t := certtest.CATemplate(cn)
	t.Subject.Organization = []string{"doqscan testbed"}
	t.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign
	t.ExtraExtensions = padExtension(pad)
	return t
}

// New builds every certificate of the population's [certs] section.
func New(pop *population.Population) (*PKI, error) {
	p := &PKI{roots: map[string]*x509.Certificate{}, certs: map[string]*tls.Certificate{},
		chains: map[string]int{}, pool: x509.NewCertPool()}
	cas := map[string]*certtest.Issuer{}
	for _, name := range CANames {
		s, err := create(pop.Seed, name, caTemplate("doqscan testbed root "+strings.ToUpper(name), 0), nil)
		if err != nil {
			return nil, err
		}
		cas[name] = s
		p.roots[name] = s.Cert
		p.pool.AddCert(s.Cert)
	}
	names := make([]string, 0, len(pop.Certs))
	for n := range pop.Certs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		c := pop.Certs[name]
		leafTmpl := certtest.LeafTemplate(c.SANs...)
		leafTmpl.Subject = pkix.Name{CommonName: c.CN, Organization: []string{name}}
		leafTmpl.ExtraExtensions = padExtension(c.Pad)
		var chain [][]byte
		var parent *certtest.Issuer
		if !c.SelfSigned() {
			parent = cas[c.Issuer]
			if parent == nil {
				return nil, fmt.Errorf("pki: cert %s: unknown issuer %q (want self or one of %v)", name, c.Issuer, CANames)
			}
			for i := 1; i <= c.Intermediates; i++ {
				s, err := create(pop.Seed, fmt.Sprintf("%s/int-%d", name, i),
					caTemplate(fmt.Sprintf("doqscan testbed %s intermediate %d", name, i), c.Pad), parent)
				if err != nil {
					return nil, err
				}
				chain = append([][]byte{s.Cert.Raw}, chain...)
				parent = s
			}
		}
		leaf, err := create(pop.Seed, name+"/leaf", leafTmpl, parent)
		if err != nil {
			return nil, err
		}
		chain = append([][]byte{leaf.Cert.Raw}, chain...)
		total := 0
		for _, d := range chain {
			total += len(d)
		}
		p.certs[name] = &tls.Certificate{Certificate: chain, PrivateKey: leaf.Key, Leaf: leaf.Cert}
		p.chains[name] = total
	}
	return p, nil
}

// Certificate returns the named certificate with its chain (leaf first).
func (p *PKI) Certificate(name string) (*tls.Certificate, error) {
	c, ok := p.certs[name]
	if !ok {
		return nil, fmt.Errorf("pki: no certificate %q", name)
	}
	return c, nil
}

// ChainBytes returns the DER bytes the server sends for the named certificate (leaf and
// intermediates).
func (p *PKI) ChainBytes(name string) int { return p.chains[name] }

// Roots returns a pool of the testbed CAs (to validate CA-issued chains).
func (p *PKI) Roots() *x509.CertPool { return p.pool }

// Names returns every certificate name, sorted.
func (p *PKI) Names() []string {
	out := make([]string, 0, len(p.certs))
	for n := range p.certs {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// WriteDir writes PEM files for third-party servers and clients: <name>.crt (chain, leaf
// first), <name>.key (PKCS #8), ca-a.crt, ca-b.crt and roots.crt (both CAs). The keys are
// the deterministic testbed keys: never use them outside the testbed.
func (p *PKI) WriteDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var roots []byte
	for _, n := range CANames {
		b := certtest.PEM(p.roots[n].Raw)
		roots = append(roots, b...)
		if err := os.WriteFile(filepath.Join(dir, n+".crt"), b, 0o644); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "roots.crt"), roots, 0o644); err != nil {
		return err
	}
	for n, c := range p.certs {
		if err := certtest.WriteFiles(filepath.Join(dir, n+".crt"), filepath.Join(dir, n+".key"),
			c.Certificate, c.PrivateKey.(ed25519.PrivateKey)); err != nil {
			return err
		}
	}
	return nil
}
