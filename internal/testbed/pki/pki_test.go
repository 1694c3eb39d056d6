package pki

import (
	"bytes"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"

	"github.com/doqscan/doqscan/internal/testbed/population"
)

// defaultPKI builds the PKI of the committed population.
func defaultPKI(t *testing.T) (*population.Population, *PKI) {
	t.Helper()
	pop, err := population.LoadDefault()
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(pop)
	if err != nil {
		t.Fatal(err)
	}
	return pop, p
}

func TestDeterministicChainsAndSizes(t *testing.T) {
	pop, a := defaultPKI(t)
	_, b := defaultPKI(t)
	for _, name := range a.Names() {
		ca, _ := a.Certificate(name)
		cb, _ := b.Certificate(name)
		for i := range ca.Certificate {
			if !bytes.Equal(ca.Certificate[i], cb.Certificate[i]) {
				t.Fatalf("%s: certificate %d differs between two builds", name, i)
			}
		}
		spec := pop.Certs[name]
		if len(ca.Certificate) != 1+spec.Intermediates {
			t.Errorf("%s: chain of %d, want %d", name, len(ca.Certificate), 1+spec.Intermediates)
		}
		// Validation: CA-issued chains verify against the roots for their CN, self-signed ones do not.
		inter := x509.NewCertPool()
		for _, d := range ca.Certificate[1:] {
			c, _ := x509.ParseCertificate(d)
			inter.AddCert(c)
		}
		_, verr := ca.Leaf.Verify(x509.VerifyOptions{DNSName: spec.CN, Roots: a.Roots(), Intermediates: inter})
		if spec.SelfSigned() != (verr != nil) {
			t.Errorf("%s: self-signed %v, verify error %v", name, spec.SelfSigned(), verr)
		}
		got, approx := a.ChainBytes(name), spec.ApproxChainBytes()
		t.Logf("%-12s chain %d certs, %6d bytes (population estimate %6d)", name, len(ca.Certificate), got, approx)
		if d := float64(got-approx) / float64(approx); d > 0.2 || d < -0.2 {
			t.Errorf("%s: chain %d bytes, population estimate %d (off by %.0f%%): fix the estimate constants", name, got, approx, d*100)
		}
	}
}

func TestWriteDir(t *testing.T) {
	_, p := defaultPKI(t)
	dir := t.TempDir()
	if err := p.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"roots.crt", "ca-a.crt", "chain-big.crt", "chain-big.key", "self-signed.key"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
}
