package fleet

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"testing"
)

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := pem.Decode(b)
	if p == nil {
		t.Fatalf("%s: not PEM", path)
	}
	c, err := x509.ParseCertificate(p.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The server certificate verifies for its names under the CA, a client certificate for
// client auth with its role as common name; keys are private to their owner; a second
// init does not replace the CA; the URL asks for verify-full with the client's files.
func TestInitAndClient(t *testing.T) {
	dir := t.TempDir()
	if err := Init(dir, []string{"db.example.net", "198.18.254.2"}); err != nil {
		t.Fatal(err)
	}
	if err := Init(dir, []string{"other"}); !errors.Is(err, ErrExists) {
		t.Fatalf("second init: %v, want ErrExists", err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(readCert(t, filepath.Join(dir, CACert)))
	srv := readCert(t, filepath.Join(dir, ServerCert))
	for _, name := range []string{"db.example.net", "198.18.254.2"} {
		if _, err := srv.Verify(x509.VerifyOptions{DNSName: name, Roots: roots}); err != nil {
			t.Errorf("server certificate for %s: %v", name, err)
		}
	}
	if _, err := srv.Verify(x509.VerifyOptions{DNSName: "evil.example", Roots: roots}); err == nil {
		t.Error("server certificate verifies for a name it was not issued for")
	}
	c, err := IssueClient(dir, "vp-1", "vp_vp-1")
	if err != nil {
		t.Fatal(err)
	}
	cl := readCert(t, c.Cert())
	if cl.Subject.CommonName != "vp_vp-1" {
		t.Errorf("client CN %q, want the role", cl.Subject.CommonName)
	}
	if _, err := cl.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate: %v", err)
	}
	for _, k := range []string{filepath.Join(dir, CAKey), filepath.Join(dir, ServerKey), c.Key()} {
		st, err := os.Stat(k)
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v (%v), want 0600", k, st.Mode().Perm(), err)
		}
	}
	u, err := url.Parse(c.URL("db.example.net", 5432, "doqscan"))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	if u.User.Username() != "vp_vp-1" || u.Host != "db.example.net:5432" || q.Get("sslmode") != "verify-full" ||
		q.Get("sslcert") != c.Cert() || q.Get("sslkey") != c.Key() || q.Get("sslrootcert") != c.CA() {
		t.Errorf("URL %s", u)
	}
}
