package conncheck

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math/big"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/measure/measuretest"
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

func d(v time.Duration) *time.Duration { return &v }

// TestTokenAgeBounds: the longest age honoured and the shortest refused; unknown ages
// count for neither, and nothing known stays nil (NULL).
func TestTokenAgeBounds(t *testing.T) {
	s := time.Second
	try := func(age time.Duration, h *bool) tokenTry { return tokenTry{age: age, honoured: h} }
	cases := []struct {
		name           string
		tries          []tokenTry
		wantFor, after *time.Duration
	}{
		{"none tried", nil, nil, nil},
		{"all unknown", []tokenTry{try(0, nil), try(10*s, nil)}, nil, nil},
		{"honoured at every age", []tokenTry{try(0, b(true)), try(40*s, b(true)), try(10*s, b(true))}, d(40 * s), nil},
		{"an age limit", []tokenTry{try(40*s, b(false)), try(0, b(true)), try(10*s, b(true))}, d(10 * s), d(40 * s)},
		{"refused at every age", []tokenTry{try(10*s, b(false)), try(0, b(false))}, nil, d(0)},
		{"unknown in between", []tokenTry{try(0, b(true)), try(10*s, nil), try(40*s, b(false))}, d(0), d(40 * s)},
		{"refused younger than honoured: kept as found", []tokenTry{try(10*s, b(false)), try(40*s, b(true))}, d(40 * s), d(10 * s)},
	}
	for _, c := range cases {
		gotFor, gotAfter := tokenAgeBounds(c.tries)
		if fmt.Sprint(deref(gotFor)) != fmt.Sprint(deref(c.wantFor)) || fmt.Sprint(deref(gotAfter)) != fmt.Sprint(deref(c.after)) {
			t.Errorf("%s: honoured for %v, refused after %v; want %v, %v", c.name, deref(gotFor), deref(gotAfter), deref(c.wantFor), deref(c.after))
		}
	}
}

func deref(p *time.Duration) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestTokenAgesAgainstServers: a DoQ server that sends Retry without a valid token,
// honouring its tokens for 3 s, is honoured at once and refused after 4 s; one whose
// tokens expire at once is refused at every age; where no tokenless connection meets a
// Retry or stall nothing is tried (NULL, no detail). Real quic-go servers on loopback.
func TestTokenAgesAgainstServers(t *testing.T) {
	st := Settings{MaxQueries: 2, IdleWaits: []time.Duration{}, TokenAges: []time.Duration{0, 4 * time.Second},
		NoAmplification: true, Timeout: 5 * time.Second}
	aged := measuretest.Start(t, measuretest.Config{Host: "127.0.0.71", Retry: true, TokenAge: 3 * time.Second})
	ignoring := measuretest.Start(t, measuretest.Config{Host: "127.0.0.72", Retry: true, IgnoreTokens: true})
	plain := measuretest.Start(t, measuretest.Config{Host: "127.0.0.73"})
	cases := []struct {
		name           string
		addr           netip.AddrPort
		wantFor, after *time.Duration
		tried          bool
	}{
		{"tokens honoured for 3 s", aged.DoQ, d(0), d(4 * time.Second), true},
		{"tokens never honoured", ignoring.DoQ, nil, d(0), true},
		{"no Retry, no stall", plain.DoQ, nil, nil, false},
	}
	results := make([]Policy, len(cases))
	var wg sync.WaitGroup
	for i, c := range cases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = Check(context.Background(), Endpoint{Addr: c.addr, Protocol: measure.DoQ, ALPN: "doq"}, st)
		}()
	}
	wg.Wait()
	for i, c := range cases {
		p := results[i]
		if p.TokenIssued == nil || !*p.TokenIssued {
			t.Errorf("%s: token issued %v (%v)", c.name, p.TokenIssued, p.Detail)
			continue
		}
		if fmt.Sprint(deref(p.TokenHonouredFor)) != fmt.Sprint(deref(c.wantFor)) || fmt.Sprint(deref(p.TokenRefusedAfter)) != fmt.Sprint(deref(c.after)) {
			t.Errorf("%s: honoured for %v, refused after %v (%v); want %v, %v", c.name, deref(p.TokenHonouredFor),
				deref(p.TokenRefusedAfter), p.Detail["token_ages"], deref(c.wantFor), deref(c.after))
		}
		if _, ok := p.Detail["token_ages"]; ok != c.tried {
			t.Errorf("%s: token ages tried %v, want %v (%v)", c.name, ok, c.tried, p.Detail)
		}
	}
}
