package certs

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/certs/certtest"
)

func TestChainRowsAndDedup(t *testing.T) {
	root := certtest.NewRoot(t, "Test Root")
	inter := root.Intermediate(t, "Test Inter")
	now := time.Now()
	for _, k := range []struct {
		kind certtest.KeyKind
		typ  string
		bits int32
	}{{certtest.ECDSA, "ecdsa", 256}, {certtest.RSA, "rsa", 2048}, {certtest.Ed25519, "ed25519", 256}} {
		leaf, _ := inter.Leaf(t, k.kind, "dns.example.test", "198.19.0.7")
		rows, fps := Chain([]*x509.Certificate{leaf, inter.Cert, leaf}, now)
		if len(rows) != 2 || len(fps) != 3 {
			t.Fatalf("%s: %d rows %d fps", k.typ, len(rows), len(fps))
		}
		r := rows[0]
		if r.KeyType != k.typ || r.KeyBits == nil || *r.KeyBits != k.bits {
			t.Errorf("key %s/%v, want %s/%d", r.KeyType, r.KeyBits, k.typ, k.bits)
		}
		if r.SubjectCN != "dns.example.test" || r.IssuerCN != "Test Inter" || r.SelfSigned || r.IsCA {
			t.Errorf("row %+v", r)
		}
		if len(r.SANs) != 2 || r.SANs[0] != "dns.example.test" || r.SANs[1] != "198.19.0.7" {
			t.Errorf("sans %v", r.SANs)
		}
		if !bytes.Equal(fps[0], Fingerprint(leaf.Raw)) || !bytes.Equal(fps[1], rows[1].SHA256) {
			t.Error("fingerprints out of order")
		}
		if !rows[1].IsCA {
			t.Error("intermediate not CA")
		}
	}
	self, _ := certtest.SelfSignedLeaf(t, certtest.ECDSA, "self.test")
	if !Row(self, now).SelfSigned || Row(root.Cert, now).SelfSigned != true || Row(inter.Cert, now).SelfSigned {
		t.Error("self-signed detection")
	}
	var d Dedup
	a, _ := Chain([]*x509.Certificate{self, root.Cert}, now)
	b, _ := Chain([]*x509.Certificate{root.Cert}, now)
	d.Add(a...)
	d.Add(b...)
	if got := d.Take(); len(got) != 2 {
		t.Fatalf("dedup kept %d", len(got))
	}
	d.Add(b...)
	if got := d.Take(); len(got) != 0 {
		t.Fatalf("dedup across takes kept %d", len(got))
	}
}

func TestValidFor(t *testing.T) {
	root := certtest.NewRoot(t, "Root")
	inter := root.Intermediate(t, "Inter")
	leaf, _ := inter.Leaf(t, certtest.ECDSA, "dns.example.test", "198.19.0.7")
	pool := certtest.Pool(root.Cert)
	now := time.Now()
	chain := []*x509.Certificate{leaf, inter.Cert}
	cases := []struct {
		name  string
		chain []*x509.Certificate
		sni   string
		pool  *x509.CertPool
		when  time.Time
		want  bool
	}{
		{"name", chain, "dns.example.test", pool, now, true},
		{"ip", chain, "198.19.0.7", pool, now, true},
		{"no name: chain only", chain, "", pool, now, true},
		{"wrong name", chain, "other.test", pool, now, false},
		{"missing intermediate", chain[:1], "dns.example.test", pool, now, false},
		{"unknown root", chain, "dns.example.test", x509.NewCertPool(), now, false},
		{"expired", chain, "dns.example.test", pool, now.Add(48 * time.Hour), false},
		{"empty", nil, "x", pool, now, false},
	}
	for _, c := range cases {
		ok, err := ValidFor(c.chain, c.sni, c.pool, c.when)
		if ok != c.want {
			t.Errorf("%s: %v (%v), want %v", c.name, ok, err, c.want)
		}
	}
}

func TestLoadPool(t *testing.T) {
	root := certtest.NewRoot(t, "Root")
	dir := t.TempDir()
	p := filepath.Join(dir, "roots.pem")
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: root.Cert.Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadPool(p); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.pem")
	os.WriteFile(bad, []byte("not pem"), 0o600)
	if _, err := LoadPool(bad); err == nil {
		t.Fatal("non-PEM accepted")
	}
	if _, err := LoadPool(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("missing file accepted")
	}
}
