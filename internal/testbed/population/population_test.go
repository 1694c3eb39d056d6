package population

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/doqscan/doqscan/internal/doq"
	"github.com/doqscan/doqscan/internal/hostile"
	"github.com/doqscan/doqscan/internal/listfile"
	"github.com/doqscan/doqscan/internal/listfile/listfiletest"
)

func loadCommitted(t *testing.T) *Population {
	t.Helper()
	p, err := LoadDefault()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCommittedFileIsGenerated(t *testing.T) {
	p := loadCommitted(t)
	got, err := os.ReadFile("../../../" + DefaultFile)
	if err != nil {
		t.Fatal(err)
	}
	want := Generate(p.Seed)
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs from `simserver population --seed %d`; regenerate it with\n  go run ./cmd/simserver population --seed %d --out %s",
			DefaultFile, p.Seed, p.Seed, DefaultFile)
	}
}

func TestGenerateIsDeterministicAndSeeded(t *testing.T) {
	if !bytes.Equal(Generate(5), Generate(5)) {
		t.Fatal("same seed, different output")
	}
	if bytes.Equal(Generate(5), Generate(6)) {
		t.Fatal("different seeds, same output")
	}
	for seed := uint64(0); seed < 20; seed++ {
		if _, err := Parse(bytes.NewReader(Generate(seed))); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
	}
}

// Every behaviour class the testbed promises (docs/population.md) exists, each with its defining attribute.
func TestEveryBehaviourClassExists(t *testing.T) {
	p := loadCommitted(t)
	has := func(name string, f func(r *Record) bool) {
		t.Helper()
		for i := range p.Records {
			if f(&p.Records[i]) {
				return
			}
		}
		t.Errorf("no host with %s", name)
	}
	for _, port := range []uint16{doq.PortExperimental, doq.PortRFC9250, doq.PortDraft02} {
		has(fmt.Sprintf("DoQ on %d", port), func(r *Record) bool { return r.HasQUICPort(port) && slices.Contains(r.ALPNs, "doq") })
	}
	for _, alpn := range []string{"doq", "doq-i00", "doq-i02", "doq-i03"} {
		has("ALPN "+alpn, func(r *Record) bool { return slices.Contains(r.ALPNs, alpn) && r.Hostile == "" })
	}
	has("plain DNS UDP+TCP", func(r *Record) bool { return r.HasDNS("udp") && r.HasDNS("tcp") && r.Hostile == "" })
	has("DoT", func(r *Record) bool { return r.DoT == 853 })
	has("DoH", func(r *Record) bool { return r.DoH == 443 })
	has("h3-only QUIC", func(r *Record) bool { return slices.Equal(r.ALPNs, []string{"h3"}) && r.Peer == "" })
	has("QUIC without ALPN only", func(r *Record) bool { return r.NoALPN() && r.Hostile == "" })
	has("always-Retry", func(r *Record) bool { return r.Retry && r.Peer == "" })
	for _, tok := range []string{TokenHonour, TokenIgnore, TokenNone} {
		has("token="+tok+" with chain-big", func(r *Record) bool { return r.Token == tok && r.Cert == "chain-big" })
	}
	has("SNI required", func(r *Record) bool { return r.SNI != "" })
	has("self-signed", func(r *Record) bool { return p.Certs[r.Cert].SelfSigned() })
	has("v1 only", func(r *Record) bool { return slices.Equal(r.Versions, []string{"v1"}) && r.Hostile == "" })
	has("v2 only", func(r *Record) bool { return slices.Equal(r.Versions, []string{"v2"}) })
	has("drafts advertised", func(r *Record) bool { return slices.Contains(r.Versions, "draft-29") })
	has("REFUSED DoQ", func(r *Record) bool { return r.RCode == "REFUSED" && len(r.QUICPorts) > 0 })
	has("REFUSED DNS", func(r *Record) bool { return r.RCode == "REFUSED" && len(r.QUICPorts) == 0 })
	for _, h := range Hostile.Implements {
		has("hostile="+string(h), func(r *Record) bool { return r.Hostile == h })
	}
	for _, peer := range []string{PeerCoreDNS, PeerHickory, PeerAioquic, PeerNgtcp2} {
		has("peer="+peer, func(r *Record) bool { return r.Peer == peer })
	}
	has("a lossy path", func(r *Record) bool { return p.Paths[r.Path].Loss > 0 })
	issuers := map[string]bool{}
	cns := map[string]bool{}
	for _, c := range p.Certs {
		issuers[c.Issuer] = true
		cns[c.CN] = true
	}
	if len(issuers) < 3 || len(cns) < 4 {
		t.Errorf("want several CAs and providers: issuers %v, CNs %v", issuers, cns)
	}
}

func TestLookupAndIteration(t *testing.T) {
	p := loadCommitted(t)
	n := 0
	prev := netip.Addr{}
	for a, r := range p.Hosts {
		if got := p.Lookup(a); got != r {
			t.Fatalf("Lookup(%s) = %v, want the record of line %d", a, got, r.Line)
		}
		if prev.IsValid() && !prev.Less(a) {
			t.Fatalf("Hosts not in address order: %s after %s", a, prev)
		}
		prev = a
		n++
	}
	total := 0
	for i := range p.Records {
		total += p.Records[i].Size()
	}
	if n != total || n < 1000 {
		t.Fatalf("iterated %d addresses, records cover %d", n, total)
	}
	for _, a := range []string{"198.19.0.1", "198.19.255.255", "10.0.0.1"} {
		if r := p.Lookup(netip.MustParseAddr(a)); r != nil {
			t.Errorf("%s should be silent, got class %s", a, r.Class)
		}
	}
	if got := p.PathOf(netip.MustParseAddr("198.19.0.1")); got.Name != p.DefaultPath {
		t.Errorf("silent address path %s, want default %s", got.Name, p.DefaultPath)
	}
}

func TestGroundTruth(t *testing.T) {
	p := loadCommitted(t)
	// Each endpoint's verdict follows from its record; spot-check the classes by their
	// defining attribute rather than by address.
	seen := map[string]int{}
	for _, ep := range p.QUICEndpoints() {
		r := p.Lookup(ep.Addr)
		v := p.ExpectVerify(ep.Addr, ep.Port)
		seen[v.Class]++
		switch {
		case r.Hostile == hostile.Garbage || r.Hostile == hostile.BadVN || r.Hostile == hostile.Stall:
			if v.Class != OutcomeTimeout {
				t.Errorf("%s %s: %s", ep.Addr, r.Class, v.Class)
			}
		case r.Hostile == hostile.DraftOnly:
			if v.Class != OutcomeVersionMismatch {
				t.Errorf("%s %s: %s", ep.Addr, r.Class, v.Class)
			}
		case r.NoALPN():
			if v.Class != OutcomeDoQNoALPN || v.ALPN != "" || v.Version == "" {
				t.Errorf("%s %s: %+v", ep.Addr, r.Class, v)
			}
		case slices.Equal(r.ALPNsOn(ep.Port), []string{"h3"}):
			if v.Class != OutcomeQUICNotDoQ || v.ALPN != "" {
				t.Errorf("%s %s: %+v", ep.Addr, r.Class, v)
			}
		case r.SNI != "":
			if v.NoSNIClass != OutcomeSNIRequired || v.Class != OutcomeDoQVerified || v.SNI != r.SNI {
				t.Errorf("%s %s: %+v", ep.Addr, r.Class, v)
			}
		case r.Hostile == "" && r.RCode == "NOERROR":
			if v.Class != OutcomeDoQVerified || v.ALPN != r.ALPNs[0] {
				t.Errorf("%s %s: %+v", ep.Addr, r.Class, v)
			}
			if slices.Equal(r.Versions, []string{"v2"}) != (v.Version == "v2" && v.NeedsVN) {
				t.Errorf("%s %s: version %s, VN %v", ep.Addr, r.Class, v.Version, v.NeedsVN)
			}
		}
	}
	for _, c := range []string{OutcomeDoQVerified, OutcomeDoQRefused, OutcomeDoQDNSError, OutcomeQUICNotDoQ,
		OutcomeDoQNoALPN, OutcomeVersionMismatch, OutcomeTimeout, OutcomeProtocolError} {
		if seen[c] == 0 {
			t.Errorf("no QUIC endpoint expected to verify as %s", c)
		}
	}
	if v := p.ExpectVerify(netip.MustParseAddr("198.19.0.1"), 784); v.Class != OutcomeTimeout {
		t.Errorf("silent address: %s", v.Class)
	}
	if v := p.ExpectVerify(netip.MustParseAddr("10.1.2.3"), 784); v.Class != OutcomeUnreachable {
		t.Errorf("outside the prefix: %s", v.Class)
	}

	// A VN probe on 784: every responder answers something; QUIC speakers send a valid VN.
	resp, speak := p.UDPResponders(784), p.QUICSpeakers(784)
	if len(speak) == 0 || len(speak) >= len(resp) {
		t.Fatalf("784: %d responders, %d speakers", len(resp), len(speak))
	}
	for _, a := range resp {
		kind := p.VNReply(a, 784)
		valid := slices.Contains(speak, a)
		if (kind == VNValid) != valid || kind == VNNone {
			t.Errorf("%s: VN %s, speaker %v", a, kind, valid)
		}
		if valid && len(p.AdvertisedVersions(a, 784)) == 0 {
			t.Errorf("%s: a valid VN without versions", a)
		}
	}
	if len(p.DNSServers("udp")) < 1000 || len(p.DNSServers("tcp")) >= len(p.DNSServers("udp"))+1000 {
		t.Errorf("DNS servers: %d udp, %d tcp", len(p.DNSServers("udp")), len(p.DNSServers("tcp")))
	}
}

func TestParseErrors(t *testing.T) {
	head := "format 1\nprefix 198.19.0.0/16\nanswer 192.0.2.1\ndefault-path d\n[paths]\nd rtt=1ms\n[sites]\ns cc=DE continent=EU lat=1 lon=2\n[asns]\nAS1 org=x\n[certs]\nc cn=a.test issuer=self\n[hosts]\n"
	good := "198.19.1.0/30 class=x dns=udp path=d asn=AS1 site=s\n"
	if _, err := Parse(strings.NewReader(head + good)); err != nil {
		t.Fatalf("minimal file: %v", err)
	}
	bad := map[string]string{
		"unknown key":     "198.19.1.0/30 class=x colour=red path=d asn=AS1 site=s\n",
		"overlap":         good + "198.19.1.2 class=y path=d asn=AS1 site=s\n",
		"outside prefix":  "10.0.0.1 class=x path=d asn=AS1 site=s\n",
		"unmasked prefix": "198.19.1.1/30 class=x path=d asn=AS1 site=s\n",
		"undefined path":  "198.19.1.0/30 class=x path=nope asn=AS1 site=s\n",
		"undefined cert":  "198.19.1.0/30 class=x quic=784 alpn=doq versions=v1 token=honour cert=zz path=d asn=AS1 site=s\n",
		"quic w/o alpn":   "198.19.1.0/30 class=x quic=784 versions=v1 token=honour cert=c path=d asn=AS1 site=s\n",
		"bad version":     "198.19.1.0/30 class=x quic=784 alpn=doq versions=v9 token=honour cert=c path=d asn=AS1 site=s\n",
		"bad port":        "198.19.1.0/30 class=x quic=70000 path=d asn=AS1 site=s\n",
		"no class":        "198.19.1.0/30 path=d asn=AS1 site=s\n",
		"bad hostile":     "198.19.1.0/30 class=x hostile=nice path=d asn=AS1 site=s\n",
		"dup key":         "198.19.1.0/30 class=x class=y path=d asn=AS1 site=s\n",
		"open quote":      "198.19.1.0/30 class=\"x path=d asn=AS1 site=s\n",
		"none and doq":    "198.19.1.0/30 class=x quic=784 alpn=none,doq versions=v1 token=honour cert=c path=d asn=AS1 site=s\n",
		"none with sni":   "198.19.1.0/30 class=x quic=784 alpn=none versions=v1 token=honour cert=c sni=a.test path=d asn=AS1 site=s\n",
	}
	noALPN := "198.19.1.0/30 class=x quic=784 alpn=none versions=v1 token=honour cert=c path=d asn=AS1 site=s\n"
	if p, err := Parse(strings.NewReader(head + noALPN)); err != nil || !p.Records[0].NoALPN() {
		t.Errorf("alpn=none: %v", err)
	}
	for name, line := range bad {
		if _, err := Parse(strings.NewReader(head + line)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := Parse(strings.NewReader(strings.Replace(head, "format 1", "format 2", 1))); err == nil {
		t.Error("format 2 accepted")
	}
}

// TestHostileAcceptsItsSubset: hostile= takes exactly the behaviours Hostile says the
// population implements, by their hostile.Behaviours names, and nothing else.
func TestHostileAcceptsItsSubset(t *testing.T) {
	if err := Hostile.Check(); err != nil {
		t.Fatal(err)
	}
	head := "format 1\nprefix 198.19.0.0/16\nanswer 192.0.2.1\ndefault-path d\n[paths]\nd rtt=1ms\n[sites]\ns cc=DE continent=EU lat=1 lon=2\n[asns]\nAS1 org=x\n[certs]\nc cn=a.test issuer=self\n[hosts]\n"
	for _, b := range append(hostile.Behaviours.Values(), "nice") {
		line := "198.19.1.0/30 class=x dns=udp hostile=" + string(b) + " path=d asn=AS1 site=s\n"
		p, err := Parse(strings.NewReader(head + line))
		want := slices.Contains(Hostile.Implements, b)
		if (err == nil) != want {
			t.Errorf("hostile=%s: accepted %v (error %v), want %v", b, err == nil, err, want)
		}
		if err == nil && p.Records[0].Hostile != b {
			t.Errorf("hostile=%s parsed as %q", b, p.Records[0].Hostile)
		}
	}
}

func TestSplitLineMatchesShlex(t *testing.T) {
	// The results Python's shlex.split(line, comments=True) gives for these lines.
	cases := map[string][]string{
		`AS1 org="Provider A DNS"  # c`: {"AS1", "org=Provider A DNS"},
		`fra cc=DE city="Sao Paulo"`:    {"fra", "cc=DE", "city=Sao Paulo"},
		"   # only a comment":           nil,
		"a\tb  c":                       {"a", "b", "c"},
	}
	for in, want := range cases {
		got, err := SplitLine(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("SplitLine(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add(Generate(1))
	f.Add([]byte("format 1\n[hosts]\n198.19.0.0/16 class=x\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(bytes.NewReader(data))
		if err != nil {
			return
		}
		for a := range p.Hosts {
			_ = p.ExpectVerify(a, 784)
			_ = p.AdvertisedVersions(a, 853)
			break
		}
	})
}

// The committed population is dual-stack: IPv6 records stay out of the IPv4 answers,
// and the IPv6 view answers the same questions for them.
func TestIPv6Half(t *testing.T) {
	p, err := LoadDefault()
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Records6) == 0 || p.Prefix6 != netip.MustParsePrefix("2001:2:0:8000::/49") {
		t.Fatalf("no IPv6 half: %d records, prefix6 %v", len(p.Records6), p.Prefix6)
	}
	for _, a := range append(p.QUICSpeakers(853), p.DNSServers("udp")...) {
		if !a.Is4() {
			t.Fatalf("IPv4 ground truth lists %s", a)
		}
	}
	v6 := p.IPv6()
	q, d := v6.QUICSpeakers(853), v6.DNSServers("udp")
	if len(q) == 0 || len(d) == 0 {
		t.Fatalf("IPv6 view: %d QUIC speakers on 853, %d DNS servers", len(q), len(d))
	}
	for _, a := range append(q, d...) {
		if !a.Is6() || !p.Prefix6.Contains(a) {
			t.Fatalf("IPv6 ground truth lists %s", a)
		}
	}
	twins, only := 0, 0
	for i := range p.Records6 {
		r := &p.Records6[i]
		if p.Lookup(r.Prefix.Addr()) != r {
			t.Errorf("Lookup(%s) does not find its record", r.Prefix.Addr())
		}
		if !r.Twin.IsValid() {
			only++
			continue
		}
		twins++
		tw := p.Lookup(r.Twin)
		if tw == nil || tw.Cert != r.Cert || tw.Class != r.Class || !slices.Equal(tw.QUICPorts, r.QUICPorts) {
			t.Errorf("%s: twin %s differs: %+v", r.Prefix, r.Twin, tw)
		}
	}
	if twins == 0 || only == 0 {
		t.Errorf("%d dual-stack and %d IPv6-only records, want both", twins, only)
	}
}

func TestIPv6Grammar(t *testing.T) {
	head := "format 1\nprefix 198.19.0.0/16\nprefix6 2001:2:0:8000::/49\nanswer 192.0.2.1\ndefault-path d\n[paths]\nd rtt=1ms jitter=0ms loss=0%\n[sites]\ns cc=DE continent=EU city=x lat=1 lon=1\n[asns]\nAS1 org=x\n[certs]\nc1 cn=a.test issuer=self intermediates=0 pad=0\nc2 cn=b.test issuer=self intermediates=0 pad=0\n[hosts]\n198.19.1.1 class=a quic=853 alpn=doq versions=v1 token=honour cert=c1 path=d asn=AS1 site=s\n"
	ok := "2001:2:0:8001::1 class=a quic=853 alpn=doq versions=v1 token=honour cert=c1 twin=198.19.1.1 path=d asn=AS1 site=s\n2001:2:0:8001::10/126 class=b dns=udp path=d asn=AS1 site=s\n"
	p, err := Parse(strings.NewReader(head + ok))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Records) != 1 || len(p.Records6) != 2 || p.Records6[1].Size() != 4 {
		t.Fatalf("records %d/%d", len(p.Records), len(p.Records6))
	}
	for name, bad := range map[string]string{
		"twin with another certificate": "2001:2:0:8001::1 class=a quic=853 alpn=doq versions=v1 token=honour cert=c2 twin=198.19.1.1 path=d asn=AS1 site=s\n",
		"twin not listed":               "2001:2:0:8001::1 class=a dns=udp twin=198.19.1.2 path=d asn=AS1 site=s\n",
		"twin on an IPv4 host":          "198.19.1.2 class=a dns=udp twin=198.19.1.1 path=d asn=AS1 site=s\n",
		"a /64 of hosts":                "2001:2:0:8001::/64 class=a dns=udp path=d asn=AS1 site=s\n",
		"outside prefix6":               "2001:2::1 class=a dns=udp path=d asn=AS1 site=s\n",
		"IPv4-mapped":                   "::ffff:198.19.1.2 class=a dns=udp path=d asn=AS1 site=s\n",
		"overlap":                       "2001:2:0:8001::10/126 class=b dns=udp path=d asn=AS1 site=s\n2001:2:0:8001::11 class=b dns=udp path=d asn=AS1 site=s\n",
	} {
		if _, err := Parse(strings.NewReader(head + bad)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	noPrefix6 := strings.Replace(head, "prefix6 2001:2:0:8000::/49\n", "", 1)
	if _, err := Parse(strings.NewReader(noPrefix6 + ok)); err == nil {
		t.Error("IPv6 hosts without prefix6: accepted")
	}
}

// TestLoadRefusesAFIFO: a population file that is a FIFO (testnet --population) is
// refused at once, by type (a plain open waited for a writer).
func TestLoadRefusesAFIFO(t *testing.T) {
	_, err := Load(listfiletest.FIFO(t, t.TempDir(), "population.txt"))
	if !errors.Is(err, listfile.ErrNotRegular) {
		t.Fatalf("Load(FIFO) = %v, want %v", err, listfile.ErrNotRegular)
	}
}
