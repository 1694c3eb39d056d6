package simdns

import (
	"crypto/tls"
	"net/netip"
	"strings"
	"testing"

	"github.com/doqscan/doqscan/internal/testbed/population"
)

// fakeProfiles stands in for internal/testbed/pki: one test certificate for every profile
// name (the PKI has its own tests; here the name lookup and SNI rule are under test).
type fakeProfiles struct{ c *testCerts }

func (f *fakeProfiles) Certificate(name string) (*tls.Certificate, error) { return f.c.cert, nil }

// loopback19 maps 127.19.x.y (local on any Linux host) to the population's 198.19.x.y.
func loopback19(a netip.Addr) netip.Addr {
	b := a.As4()
	if b[0] == 127 {
		b[0] = 198
	}
	return netip.AddrFrom4(b)
}

func population19(a netip.Addr) netip.Addr {
	b := a.As4()
	if b[0] == 198 {
		b[0] = 127
	}
	return netip.AddrFrom4(b)
}

// TestPopulation serves the committed population on 127.19.0.0/16 and checks the first
// address of every record with DNS services against the class the record implies, on
// every protocol the record offers; protocols it does not offer get no answer; peers and
// unlisted addresses are left alone.
func TestPopulation(t *testing.T) {
	pop, err := population.LoadDefault()
	if err != nil {
		t.Fatal(err)
	}
	certs := newTestCerts(t)
	prof := &fakeProfiles{c: certs}
	dir := NewPopulationDirectory(pop, prof)
	srv, err := Start(t.Context(), Config{Directory: dir, Certs: dir,
		Ports:   Ports{UDP: -1, TCP: -1, DoT: -1, DoH: -1},
		MapAddr: loopback19, LocalAddr: population19})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	s := &testServer{Server: srv, table: dir, certs: certs, local: population19}
	seen := map[string]bool{}
	checked := 0
	for i := range pop.Records {
		r := &pop.Records[i]
		if seen[r.Class] {
			continue
		}
		seen[r.Class] = true
		a := r.Prefix.Addr()
		for _, p := range allProtocols {
			b, offered := dir.Behaviour(a, p)
			t.Run(r.Class+"/"+p.String(), func(t *testing.T) {
				t.Parallel()
				if r.SNI != "" && (p == DoT || p == DoH) {
					checkSNI(t, s, p, a, r.SNI)
					return
				}
				if !offered {
					_, err := s.ask(p, a, silentTimeout)
					if err == nil {
						t.Fatalf("%s (%s) answered %s, which its record does not offer", a, r.Class, p)
					}
					return
				}
				want := ClassOf(r)
				if b.Class != want {
					t.Fatalf("behaviour class %s, want %s", b.Class, want)
				}
				res, err := s.ask(p, a, timeoutFor(want, p))
				s.checkOutcome(t, want, p, a, res, err)
			})
			if offered {
				checked++
			}
		}
	}
	if checked == 0 {
		t.Fatal("the population offers no DNS service")
	}
	t.Logf("%d classes, %d (class, protocol) pairs with a service checked", len(seen), checked)
}

// checkSNI checks an SNI-requiring host refuses a handshake with another name
// (unrecognized_name) and completes one with its name.
func checkSNI(t *testing.T, s *testServer, p Protocol, a netip.Addr, sni string) {
	cfg := s.certs.client()
	c, err := tls.Dial("tcp", s.target(p, a), cfg)
	if err == nil {
		c.Close()
		t.Fatalf("handshake with SNI %q succeeded, want unrecognized_name", cfg.ServerName)
	}
	// crypto/tls reports a received alert as "remote error: tls: <alert text>" (its alert
	// type is unexported); RFC 8446 §6.2 alert 112 reads "unrecognized name".
	if !strings.Contains(err.Error(), "remote error: tls: unrecognized name") {
		t.Fatalf("err %v, want alert unrecognized_name (112)", err)
	}
	cfg = s.certs.client()
	cfg.ServerName = sni
	cfg.InsecureSkipVerify = true // the fake profile's certificate does not carry sni
	c, err = tls.Dial("tcp", s.target(p, a), cfg)
	if err != nil {
		t.Fatalf("handshake with SNI %q: %v", sni, err)
	}
	c.Close()
}
