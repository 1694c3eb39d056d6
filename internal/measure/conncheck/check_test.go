package conncheck

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"math/big"
	"net/netip"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/measure"
)

func b(v bool) *bool { return &v }

func TestRetryPolicy(t *testing.T) {
	cases := []struct {
		verify, first, second *bool
		want                  string
	}{
		{nil, b(true), b(true), "always"},
		{nil, b(true), b(false), "first"},
		{b(true), b(false), b(false), "first"}, // verify was the first contact
		{b(false), b(false), b(false), "never"},
		{nil, b(false), b(false), "never"},
		{nil, b(false), b(true), ""}, // fits no policy
		{nil, nil, b(false), ""},
	}
	for _, c := range cases {
		if got := retryPolicy(c.verify, c.first, c.second); got != c.want {
			t.Errorf("retryPolicy(%v, %v, %v) = %q, want %q", c.verify, c.first, c.second, got, c.want)
		}
	}
}

func TestHonoured(t *testing.T) {
	cases := []struct {
		retryWithout, stallWithout, retryWith, stallWith *bool
		want                                             *bool
	}{
		{b(true), b(false), b(false), b(false), b(true)}, // the token skipped the Retry
		{b(true), b(false), b(true), b(false), b(false)}, // Retry all the same
		{b(false), b(true), b(false), b(false), b(true)}, // skipped the stall
		{b(false), b(true), b(false), b(true), b(false)}, // stalled all the same
		{b(false), b(false), b(false), b(false), nil},    // nothing to skip
		{nil, nil, nil, nil, nil},
	}
	for _, c := range cases {
		got := honoured(c.retryWithout, c.stallWithout, c.retryWith, c.stallWith)
		if (got == nil) != (c.want == nil) || (got != nil && *got != *c.want) {
			t.Errorf("honoured(%+v) = %v, want %v", c, got, c.want)
		}
	}
}

func TestSample(t *testing.T) {
	var eps []Endpoint
	for i := range 10 {
		a := netip.AddrFrom4([4]byte{198, 19, 0, byte(i)})
		eps = append(eps, Endpoint{Addr: netip.AddrPortFrom(a, 853), Protocol: measure.DoQ},
			Endpoint{Addr: netip.AddrPortFrom(a, 853), Protocol: measure.DoT})
	}
	got := sample(append([]Endpoint(nil), eps...), 3)
	addrs := map[netip.Addr]int{}
	for _, e := range got {
		addrs[e.Addr.Addr()]++
	}
	if len(addrs) != 3 || len(got) != 6 {
		t.Errorf("sample of 3: %d addresses, %d endpoints", len(addrs), len(got))
	}
	if got := sample(append([]Endpoint(nil), eps...), 0); len(got) != len(eps) {
		t.Errorf("sample 0 kept %d of %d", len(got), len(eps))
	}
}

// TestTicketLifetime: the lifetime a Go server gives its tickets (7 days) read back from
// a real session (a crypto/tls handshake in memory), so a Go release that changes the
// session encoding fails here rather than storing a wrong figure.
func TestTicketLifetime(t *testing.T) {
	cert := selfSigned(t)
	rec := &recordingSessions{ClientSessionCache: tls.NewLRUClientSessionCache(1)}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = c.Write([]byte("x")); c.Close() }()
		}
	}()
	for range 2 {
		cl, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{InsecureSkipVerify: true, ClientSessionCache: rec, ServerName: "x"}) //nolint:gosec // test
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 1)
		if _, err := cl.Read(buf); err != nil {
			t.Fatal(err)
		}
		cl.Close()
	}
	got := rec.got()
	if got == nil || *got != 7*24*time.Hour {
		t.Fatalf("ticket lifetime %v, want 168h (crypto/tls's)", got)
	}
}

func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: []string{"x"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, priv)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: priv}
}
