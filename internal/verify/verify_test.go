package verify

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/quic-go/quic-go"

	"github.com/doqscan/doqscan/internal/doq"
	"github.com/doqscan/doqscan/internal/hostile"
	"github.com/doqscan/doqscan/internal/testbed"
	"github.com/doqscan/doqscan/internal/testbed/netns"
)

func testConfig(pki *testPKI) Config {
	return Config{HandshakeTimeout: time.Second, QueryTimeout: time.Second, TargetTimeout: 5 * time.Second,
		QueryName: "verify.doq.test", SNINames: sniList, Roots: pki.pool}
}

func TestEveryOutcomeClass(t *testing.T) {
	pki := newPKI(t)
	bs := behaviours()
	servers := make([]*testServer, len(bs))
	for i, b := range bs {
		servers[i] = startServer(t, pki, b)
	}
	v, err := New(testConfig(pki))
	if err != nil {
		t.Fatal(err)
	}
	cfg := v.Config()
	results := make([]Result, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			results[i] = v.Verify(context.Background(), Target{Addr: s.addr, ScanVersions: []int64{1}})
			// No target may take longer than its deadline (small margin for teardown).
			if d := time.Since(t0); d > cfg.TargetTimeout+500*time.Millisecond {
				t.Errorf("%s: took %v, deadline %v", s.b.name, d, cfg.TargetTimeout)
			}
		}()
	}
	wg.Wait()
	covered := map[Outcome]bool{}
	for i, s := range servers {
		r, b := results[i], s.b
		covered[r.Outcome] = true
		t.Logf("%-22s %-16s alpn=%-8s v=%#x sni=%q/%s attempts=%d %s", b.name, r.Outcome, r.ALPN, r.QUICVersion, r.SNI, r.SNISource, r.Attempts, r.Detail)
		if r.Outcome != b.want {
			t.Errorf("%s: outcome %s (%s), want %s", b.name, r.Outcome, r.Detail, b.want)
			continue
		}
		if r.Detail == "" {
			t.Errorf("%s: empty detail", b.name)
		}
		if r.Addr != s.addr || len(r.ScanVersions) != 1 {
			t.Errorf("%s: target not carried through", b.name)
		}
		if !strings.HasPrefix(string(r.Outcome), "doq-") {
			continue
		}
		// A DoQ outcome: the negotiated ALPN is the server's highest DoQ version, the
		// QUIC version one the server speaks, a chain that validates for the name used.
		// crypto/tls servers pick by their own preference order among what we offer.
		wantALPN := ""
		for _, sa := range orDefault(b.alpns, []string{"doq"}) {
			if _, ok := doq.Lookup(sa); ok && wantALPN == "" && !b.noALPN {
				wantALPN = sa
			}
		}
		if r.ALPN != wantALPN {
			t.Errorf("%s: ALPN %q, want %q", b.name, r.ALPN, wantALPN)
		}
		wantV := quic.Version1
		if len(b.versions) > 0 {
			wantV = b.versions[0]
		}
		if r.QUICVersion != uint32(wantV) {
			t.Errorf("%s: QUIC version %#x, want %#x", b.name, r.QUICVersion, uint32(wantV))
		}
		if r.TLSVersion != 0x0304 || r.TLSCipher == "" || r.Handshake <= 0 || len(r.Chain) != 2 {
			t.Errorf("%s: tls %#x %q hs %v chain %d", b.name, r.TLSVersion, r.TLSCipher, r.Handshake, len(r.Chain))
		}
		if r.CertValid == nil || !*r.CertValid {
			t.Errorf("%s: certificate should validate for %q", b.name, r.SNI)
		}
		if b.hostile == hostile.None && (r.Rcode == nil || *r.Rcode != b.rcode) {
			t.Errorf("%s: rcode %v, want %d", b.name, r.Rcode, b.rcode)
		}
		if b.rcode == dns.RcodeSuccess && b.hostile == hostile.None && r.Answers != 1 {
			t.Errorf("%s: %d answers", b.name, r.Answers)
		}
		switch b.tlsMode {
		case "sni-list":
			if r.SNI != b.sniName || r.SNISource != SNIList || r.Attempts < 2 {
				t.Errorf("%s: sni %q/%s after %d attempts", b.name, r.SNI, r.SNISource, r.Attempts)
			}
		case "sni-san":
			if r.SNI != b.sniName || r.SNISource != SNISAN || r.Attempts != 2 {
				t.Errorf("%s: sni %q/%s after %d attempts", b.name, r.SNI, r.SNISource, r.Attempts)
			}
		default:
			// A no-ALPN server: the attempt with every DoQ ALPN, then one without.
			attempts := map[bool]int{false: 1, true: 2}[b.noALPN]
			if r.SNI != "" || r.SNISource != SNINone || r.Attempts != attempts {
				t.Errorf("%s: sni %q/%s after %d attempts, want %d", b.name, r.SNI, r.SNISource, r.Attempts, attempts)
			}
		}
		if b.noALPN && !strings.Contains(r.Detail, "no ALPN, length-prefixed framing (RFC 9250)") {
			t.Errorf("%s: detail %q does not say what worked", b.name, r.Detail)
		}
	}
	for _, o := range Outcomes.Values() {
		// error is the verifier's own failure, no server's doing: a recovered panic
		// (TestPanickingTargetRecordedAsError).
		if !covered[o] && o != OutcomeError {
			t.Errorf("outcome %s not covered by the test servers", o)
		}
	}
}

func orDefault(a, d []string) []string {
	if len(a) == 0 {
		return d
	}
	return a
}

func TestUntrustedRootIsRecordedNotRejected(t *testing.T) {
	pki := newPKI(t)
	s := startServer(t, pki, behaviour{name: "rfc9250"})
	cfg := testConfig(newPKI(t)) // a different root: the chain does not validate
	v, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := v.Verify(context.Background(), Target{Addr: s.addr})
	if r.Outcome != OutcomeVerified || r.CertValid == nil || *r.CertValid {
		t.Fatalf("%s %v", r.Outcome, r.CertValid)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []Config{
		{ALPNs: []string{"h3"}},
		{SNINames: []string{"198.19.0.1"}},
		{SNINames: []string{"bad..name"}},
		{QueryName: "bad..name"},
	} {
		if _, err := New(c); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

func TestCancelledContextStillClassifies(t *testing.T) {
	pki := newPKI(t)
	s := startServer(t, pki, behaviour{name: "stall", raw: true})
	v, _ := New(testConfig(pki))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := v.Verify(ctx, Target{Addr: s.addr})
	if r.Outcome == "" || r.Detail == "" {
		t.Fatalf("no outcome: %+v", r)
	}
}

func TestIPv6Target(t *testing.T) {
	pki := newPKI(t)
	var r Result
	run := func() error {
		s := startServer(t, pki, behaviour{name: "rfc9250-v6", ipv6: true})
		v, _ := New(testConfig(pki))
		r = v.Verify(context.Background(), Target{Addr: s.addr})
		return nil
	}
	if ns := ipv6Namespace(t); ns != "" {
		// Sockets opened inside netns.Do stay in that namespace.
		if err := netns.Do(ns, run); err != nil {
			t.Fatal(err)
		}
	} else {
		_ = run()
	}
	if r.Outcome != OutcomeVerified || !r.Addr.Addr().Is6() || r.CertValid == nil || !*r.CertValid {
		t.Fatalf("%s %s %v", r.Outcome, r.Detail, r.CertValid)
	}
}

// ipv6Namespace returns "" when ::1 is usable here, else (inside a testbed vantage,
// whose namespaces are IPv4 only: netns disables IPv6) the name of a throwaway network
// namespace with only lo, IPv6 on, named after the instance so that testnet down
// removes it should the cleanup not run.
func ipv6Namespace(t *testing.T) string {
	t.Helper()
	if c, err := net.ListenPacket("udp6", "[::1]:0"); err == nil {
		c.Close()
		return ""
	}
	inst := os.Getenv(netns.EnvInstance)
	if os.Getenv(testbed.EnvInVantage) == "" || inst == "" {
		t.Skip("SKIP: no IPv6 loopback (::1) on this host")
	}
	ns := fmt.Sprintf("%s-v6t%d", inst, os.Getpid()%100000)
	for _, argv := range [][]string{{"netns", "add", ns}, {"-n", ns, "link", "set", "lo", "up"}} {
		if out, err := exec.Command("ip", argv...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", argv, err, out)
		}
		if argv[0] == "netns" {
			t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
		}
	}
	return ns
}
