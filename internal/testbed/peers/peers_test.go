package peers

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/doqscan/doqscan/internal/testbed/population"
)

func TestSpecValidate(t *testing.T) {
	good := Spec{Kind: CoreDNS, Addr: netip.MustParseAddr("198.19.1.1"), DNSPort: 53}
	if err := good.validate(); err != nil {
		t.Fatalf("valid spec rejected: %v", err)
	}
	good6 := Spec{Kind: CoreDNS, Addr: netip.MustParseAddr("2001:2:0:8002::60"), DNSPort: 53}
	if err := good6.validate(); err != nil {
		t.Fatalf("valid IPv6 spec rejected: %v", err)
	}
	bad := map[string]Spec{
		"unspecified6":  {Kind: CoreDNS, Addr: netip.IPv6Unspecified(), DNSPort: 53},
		"outside6":      {Kind: CoreDNS, Addr: netip.MustParseAddr("2001:4860::8888"), DNSPort: 53},
		"mapped":        {Kind: CoreDNS, Addr: netip.MustParseAddr("::ffff:198.19.1.1"), DNSPort: 53},
		"unspecified":   {Kind: CoreDNS, Addr: netip.IPv4Unspecified(), DNSPort: 53},
		"outside":       {Kind: CoreDNS, Addr: netip.MustParseAddr("8.8.8.8"), DNSPort: 53},
		"tls-no-cert":   {Kind: CoreDNS, Addr: netip.MustParseAddr("198.19.1.1"), DoTPort: 853},
		"aioquic-8888":  {Kind: Aioquic, Addr: netip.MustParseAddr("198.19.1.1"), QUICPorts: []uint16{784}, CertFile: "c", KeyFile: "k", Upstream: netip.MustParseAddrPort("8.8.8.8:53")},
		"aioquic-noup":  {Kind: Aioquic, Addr: netip.MustParseAddr("198.19.1.1"), QUICPorts: []uint16{784}, CertFile: "c", KeyFile: "k"},
		"hickory-doh":   {Kind: Hickory, Addr: netip.MustParseAddr("198.19.1.1"), DoHPort: 443, CertFile: "c", KeyFile: "k"},
		"coredns-retry": {Kind: CoreDNS, Addr: netip.MustParseAddr("198.19.1.1"), DNSPort: 53, Retry: true},
		"dnsproxy-8888": {Kind: DNSProxy, Addr: netip.MustParseAddr("198.19.1.1"), DNSPort: 53, Upstream: netip.MustParseAddrPort("8.8.8.8:53")},
		"dnsproxy-noup": {Kind: DNSProxy, Addr: netip.MustParseAddr("198.19.1.1"), DNSPort: 53},
		"dnsproxy-nodns": {Kind: DNSProxy, Addr: netip.MustParseAddr("198.19.1.1"), QUICPorts: []uint16{853}, CertFile: "c", KeyFile: "k",
			Upstream: netip.MustParseAddrPort("198.19.1.2:53")},
		"coredns-doh3": {Kind: CoreDNS, Addr: netip.MustParseAddr("198.19.1.1"), DNSPort: 53, DoHPort: 443, DoH3Port: 443, CertFile: "c", KeyFile: "k"},
		"dnsproxy-doh3-port": {Kind: DNSProxy, Addr: netip.MustParseAddr("198.19.1.1"), DNSPort: 53, DoHPort: 443, DoH3Port: 8443,
			CertFile: "c", KeyFile: "k", Upstream: netip.MustParseAddrPort("198.19.1.2:53")},
		"unknown": {Kind: "bind9", Addr: netip.MustParseAddr("198.19.1.1"), DNSPort: 53},
	}
	for name, s := range bad {
		if err := s.validate(); err == nil {
			t.Errorf("%s: accepted %+v", name, s)
		}
	}
}

func TestCorefileBindsOnlyItsAddress(t *testing.T) {
	s := Spec{Kind: CoreDNS, Addr: netip.MustParseAddr("198.19.1.1"), DNSPort: 53, QUICPorts: []uint16{784}, CertFile: "/c.pem", KeyFile: "/k.pem"}
	cf := corefile(s, netip.MustParseAddr("192.0.2.1"), 300)
	for _, want := range []string{"dns://.:53 {", "quic://.:784 {", "bind 198.19.1.1", "tls /c.pem /k.pem", "IN A 192.0.2.1"} {
		if !strings.Contains(cf, want) {
			t.Errorf("Corefile lacks %q:\n%s", want, cf)
		}
	}
	for _, bad := range []string{"forward", "0.0.0.0", "tls://", "https://"} {
		if strings.Contains(cf, bad) {
			t.Errorf("Corefile has %q:\n%s", bad, cf)
		}
	}
}

// TestDNSProxyCommandNamesOnlyTestbedAddresses: every address on dnsproxy's command line
// (listen, upstream, bootstrap, fallback, private rDNS) is a testbed address, each of its
// defaults that names a public resolver is overridden, and the hosts file answers test.com.
func TestDNSProxyCommandNamesOnlyTestbedAddresses(t *testing.T) {
	root := t.TempDir()
	bin := Binary(root, DNSProxy)
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Root: root, RunDir: t.TempDir(), Answer: netip.MustParseAddr("192.0.2.1")}
	if err := cfg.fill(); err != nil {
		t.Fatal(err)
	}
	s := Spec{Kind: DNSProxy, Addr: netip.MustParseAddr("198.19.3.7"), DNSPort: 53, DoTPort: 853, DoHPort: 443, DoH3Port: 443,
		QUICPorts: []uint16{784, 853}, CertFile: "/c", KeyFile: "/k", Upstream: netip.MustParseAddrPort("198.19.3.1:53")}
	argv, err := command(cfg, s, "")
	if err != nil {
		t.Fatal(err)
	}
	line := strings.Join(argv, " ")
	for _, flag := range []string{"--upstream", "--bootstrap", "--fallback", "--private-rdns-upstream"} {
		i := slices.Index(argv, flag)
		if i < 0 || i+1 >= len(argv) || argv[i+1] != "198.19.3.1:53" {
			t.Errorf("%s not set to the testbed upstream: %s", flag, line)
		}
	}
	for i, a := range argv {
		if ap, err := netip.ParseAddrPort(a); err == nil && !testbedOrLoopback(ap.Addr()) {
			t.Errorf("argument %d %q is outside the testbed", i, a)
		}
		if ad, err := netip.ParseAddr(a); err == nil && !testbedOrLoopback(ad) {
			t.Errorf("argument %d %q is outside the testbed", i, a)
		}
	}
	for _, want := range []string{"--listen 198.19.3.7", "--port 53", "--tls-port 853", "--https-port 443", "--http3",
		"--quic-port 784", "--quic-port 853", "--tls-crt /c", "--tls-key /k"} {
		if !strings.Contains(line, want) {
			t.Errorf("command line lacks %q: %s", want, line)
		}
	}
	hosts, err := os.ReadFile(argv[slices.Index(argv, "--hosts-files")+1])
	if err != nil || strings.TrimSpace(string(hosts)) != "192.0.2.1 test.com" {
		t.Errorf("hosts file %q (%v)", hosts, err)
	}
}

// TestFromPopulation derives the specs from the committed population: one per peer=
// record, with that record's services, and aioquic and dnsproxy forwarding inside the testbed.
func TestFromPopulation(t *testing.T) {
	pop, err := population.LoadDefault()
	if err != nil {
		t.Fatal(err)
	}
	specs, err := FromPopulation(pop, "/certs")
	if err != nil {
		t.Fatal(err)
	}
	want, want6, got6 := 0, 0, 0
	for _, r := range pop.AllRecords() {
		if r.Peer != "" {
			want += r.Size()
			if r.Prefix.Addr().Is6() {
				want6 += r.Size()
			}
		}
	}
	for _, s := range specs {
		if s.Addr.Is6() {
			got6++
		}
	}
	if len(specs) != want || want == 0 || got6 != want6 || want6 == 0 {
		t.Fatalf("%d specs (%d IPv6) for %d peer addresses (%d IPv6)", len(specs), got6, want, want6)
	}
	for _, s := range specs {
		r := pop.Lookup(s.Addr)
		if r == nil || peerKinds[r.Peer] != s.Kind {
			t.Errorf("%s: population says %+v", s.Name(), r)
			continue
		}
		if !slices.Equal(s.QUICPorts, r.QUICPorts) || s.DoTPort != r.DoT || s.DoHPort != r.DoH || s.DoH3Port != r.DoH3 || s.Retry != r.Retry ||
			(s.DNSPort != 0) != r.HasDNS("udp") {
			t.Errorf("%s: spec %+v disagrees with record %+v", s.Name(), s, r)
		}
		if s.CertFile != "/certs/"+r.Cert+".crt" {
			t.Errorf("%s: cert %s, want %s", s.Name(), s.CertFile, r.Cert)
		}
		if s.Kind == Aioquic || s.Kind == DNSProxy {
			u := pop.Lookup(s.Upstream.Addr())
			if u == nil || !u.HasDNS("udp") || !pop.Prefix.Contains(s.Upstream.Addr()) {
				t.Errorf("%s: upstream %v is not a DNS server of the population", s.Name(), s.Upstream)
			}
		}
	}
}
