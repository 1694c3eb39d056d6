package population

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestPolicyAndDDRKeys(t *testing.T) {
	head := "format 1\nprefix 198.19.0.0/16\nanswer 192.0.2.1\ndefault-path d\n[paths]\nd rtt=1ms\n[sites]\ns cc=DE continent=EU lat=1 lon=2\n[asns]\nAS1 org=x\n[certs]\nc cn=a.test issuer=self\n[hosts]\n"
	good := "198.19.1.0/30 class=x quic=853 alpn=doq versions=v1 token=honour cert=c dns=udp,tcp dot=853 doh=443 " +
		"maxq=40 idle=4s streams=8 0rtt=no ddr=doq@10853,dot@853,h2+h3@443/198.19.1.9 path=d asn=AS1 site=s\n"
	p, err := Parse(strings.NewReader(head + good))
	if err != nil {
		t.Fatal(err)
	}
	r := p.Records[0]
	if r.MaxQueries != 40 || r.Idle != 4*time.Second || r.Streams != 8 || !r.No0RTT || len(r.DDR) != 3 {
		t.Fatalf("record %+v", r)
	}
	recs := p.DDR(netip.MustParseAddr("198.19.1.1"))
	if len(recs) != 3 || recs[0].Target != "a.test." || recs[0].Port != 10853 || recs[0].IPv4Hints[0] != netip.MustParseAddr("198.19.1.1") ||
		recs[2].IPv4Hints[0] != netip.MustParseAddr("198.19.1.9") || recs[2].DoHPath != "/dns-query{?dns}" || recs[1].DoHPath != "" ||
		!slices.Equal(recs[2].ALPNs, []string{"h2", "h3"}) || recs[1].Priority != 2 {
		t.Errorf("DDR records %+v", recs)
	}
	eps := p.DDREndpoints()
	if len(eps) != 4 || eps[0].Port != 10853 || eps[0].Addr != eps[0].Resolver {
		t.Errorf("DDR endpoints %+v (want one DoQ endpoint per address of the /30)", eps)
	}
	pol, ok := p.ExpectPolicy(netip.MustParseAddr("198.19.1.2"), 853, ProtoDoQ)
	if !ok || pol.MaxQueries != 40 || pol.Idle != 4*time.Second || pol.MaxStreams != 8 || pol.ZeroRTT || pol.Retry != RetryPolicyNever ||
		pol.TicketLifetime != GoTicketLifetime || pol.TokenAge != QuicGoTokenAge {
		t.Errorf("DoQ policy %+v %v", pol, ok)
	}
	if pol, ok := p.ExpectPolicy(netip.MustParseAddr("198.19.1.2"), 853, ProtoDoT); !ok || pol.MaxQueries != 40 || pol.Idle != 4*time.Second {
		t.Errorf("DoT policy %+v %v", pol, ok)
	}
	// simserver's DoH: one http.Server for every host, so maxq= and idle= (DoQ, DoTCP,
	// DoT) do not reach it.
	want := Policy{Idle: SimDNSIdle, MaxStreams: SimDoHStreams, TicketLifetime: GoTicketLifetime}
	if pol, ok := p.ExpectPolicy(netip.MustParseAddr("198.19.1.2"), 443, ProtoDoH); !ok || pol != want {
		t.Errorf("DoH policy %+v %v, want %+v", pol, ok, want)
	}
	if _, ok := p.ExpectPolicy(netip.MustParseAddr("198.19.1.2"), 853, ProtoDoH); ok {
		t.Error("DoH on the DoT port")
	}
	bad := map[string]string{
		"maxq 0":          "198.19.1.0/30 class=x dns=udp maxq=0 path=d asn=AS1 site=s\n",
		"idle short":      "198.19.1.0/30 class=x dns=udp idle=10ms path=d asn=AS1 site=s\n",
		"streams":         "198.19.1.0/30 class=x dns=udp streams=x path=d asn=AS1 site=s\n",
		"0rtt":            "198.19.1.0/30 class=x dns=udp 0rtt=maybe path=d asn=AS1 site=s\n",
		"ddr no dns":      "198.19.1.0/30 class=x ddr=doq@853 path=d asn=AS1 site=s\n",
		"ddr no port":     "198.19.1.0/30 class=x dns=udp ddr=doq path=d asn=AS1 site=s\n",
		"ddr bad hint":    "198.19.1.0/30 class=x dns=udp ddr=doq@853/zz path=d asn=AS1 site=s\n",
		"tokenage short":  "198.19.1.0/30 class=x quic=853 alpn=doq versions=v1 token=honour tokenage=10ms cert=c path=d asn=AS1 site=s\n",
		"tokenage ignore": "198.19.1.0/30 class=x quic=853 alpn=doq versions=v1 token=ignore tokenage=10s cert=c path=d asn=AS1 site=s\n",
		"tokenage peer":   "198.19.1.0/30 class=x peer=coredns quic=853 alpn=doq versions=v1 token=honour tokenage=10s cert=c path=d asn=AS1 site=s\n",
	}
	for name, line := range bad {
		if _, err := Parse(strings.NewReader(head + line)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestTokenAge: tokenage= reaches the record and the DoQ policy; without it a simserver
// host or a quic-go peer honours tokens for quic-go's default; a token=ignore host, a
// peer on another stack and DoT have no token age.
func TestTokenAge(t *testing.T) {
	head := "format 1\nprefix 198.19.0.0/16\nanswer 192.0.2.1\ndefault-path d\n[paths]\nd rtt=1ms\n[sites]\ns cc=DE continent=EU lat=1 lon=2\n[asns]\nAS1 org=x\n[certs]\nc cn=a.test issuer=self\n[hosts]\n"
	lines := "198.19.1.0/30 class=aged quic=853 alpn=doq versions=v1 retry=always token=honour tokenage=20s cert=c dot=853 path=d asn=AS1 site=s\n" +
		"198.19.1.4/30 class=plain quic=853 alpn=doq versions=v1 token=honour cert=c path=d asn=AS1 site=s\n" +
		"198.19.1.8/30 class=ignore quic=853 alpn=doq versions=v1 token=ignore cert=c path=d asn=AS1 site=s\n" +
		"198.19.1.12 class=dnsproxy peer=dnsproxy quic=853 alpn=doq versions=v1 retry=first token=honour cert=c path=d asn=AS1 site=s\n" +
		"198.19.1.13 class=hickory peer=hickory quic=853 alpn=doq versions=v1 token=honour cert=c path=d asn=AS1 site=s\n"
	p, err := Parse(strings.NewReader(head + lines))
	if err != nil {
		t.Fatal(err)
	}
	if r := p.ByClass("aged")[0]; r.TokenAge != 20*time.Second {
		t.Errorf("tokenage=20s read as %v", r.TokenAge)
	}
	for _, c := range []struct {
		addr  string
		proto string
		port  uint16
		want  time.Duration
	}{
		{"198.19.1.1", ProtoDoQ, 853, 20 * time.Second},
		{"198.19.1.1", ProtoDoT, 853, 0},
		{"198.19.1.5", ProtoDoQ, 853, QuicGoTokenAge},
		{"198.19.1.9", ProtoDoQ, 853, 0},
		{"198.19.1.12", ProtoDoQ, 853, QuicGoTokenAge},
		{"198.19.1.13", ProtoDoQ, 853, 0},
	} {
		pol, ok := p.ExpectPolicy(netip.MustParseAddr(c.addr), c.port, c.proto)
		if !ok || pol.TokenAge != c.want {
			t.Errorf("%s %s: token age %v (ok %v), want %v", c.addr, c.proto, pol.TokenAge, ok, c.want)
		}
	}
	// The committed population: doq-retry's tokens expire, so a late one meets a Retry.
	def, err := LoadDefault()
	if err != nil {
		t.Fatal(err)
	}
	if pol, _ := def.ExpectPolicy(def.ByClass("doq-retry")[0].Prefix.Addr(), 853, ProtoDoQ); pol.TokenAge != 10*time.Second || pol.Retry != RetryPolicyAlways {
		t.Errorf("committed doq-retry: token age %v, Retry %q", pol.TokenAge, pol.Retry)
	}
}

// The committed population's defaults: a simserver host without policy keys has
// simquic's defaults; a DDR-designated DoQ endpoint on a port no scan probes is served.
func TestCommittedPolicyAndDDR(t *testing.T) {
	p, err := LoadDefault()
	if err != nil {
		t.Fatal(err)
	}
	doq := p.ByClass("doq-853")[0].Prefix.Addr()
	pol, ok := p.ExpectPolicy(doq, 853, ProtoDoQ)
	if !ok || pol.MaxQueries != 0 || pol.Idle != SimIdle || pol.MaxStreams != SimStreams || !pol.ZeroRTT {
		t.Errorf("doq-853 policy %+v %v", pol, ok)
	}
	var unusual, dead int
	for _, e := range p.DDREndpoints() {
		switch v := p.ExpectVerify(e.Addr, e.Port); {
		case e.Port != 784 && e.Port != 853 && e.Port != 8853 && v.Class == OutcomeDoQVerified:
			unusual++
		case v.Class == OutcomeTimeout:
			dead++
		}
	}
	if unusual == 0 || dead == 0 {
		t.Errorf("DDR endpoints: %d verified on unusual ports, %d dead; want both", unusual, dead)
	}
}

// The committed population's DoT and DoH: simserver's and the peers' that serve them
// (from their source: peerTCPPolicy); none for a peer whose policy is not known.
func TestCommittedTCPPolicies(t *testing.T) {
	p, err := LoadDefault()
	if err != nil {
		t.Fatal(err)
	}
	sim := Policy{Idle: SimDNSIdle, TicketLifetime: GoTicketLifetime}
	simDoH := sim
	simDoH.MaxStreams = SimDoHStreams
	goTLS := func(idle time.Duration, streams int) Policy {
		return Policy{Idle: idle, MaxStreams: streams, TicketLifetime: GoTicketLifetime}
	}
	for _, c := range []struct {
		class, proto string
		port         uint16
		want         *Policy // nil: no expectation
	}{
		{"doq-853", ProtoDoT, 853, &sim},
		{"doq-853", ProtoDoH, 443, &simDoH},
		{"doh", ProtoDoH, 443, &simDoH},
		{"doq-policy", ProtoDoT, 853, &Policy{MaxQueries: 40, Idle: 7 * time.Second, TicketLifetime: GoTicketLifetime}},
		{"doq-policy", ProtoDoH, 443, nil}, // no DoH
		{"peer-coredns", ProtoDoT, 853, &Policy{Idle: 10 * time.Second, TicketLifetime: GoTicketLifetime}},
		{"peer-coredns", ProtoDoH, 443, new(goTLS(10*time.Second, 250))},
		// dnsproxy's line says idle=5m: its DoQ; DoT drops an idle connection at 10 s.
		{"peer-dnsproxy", ProtoDoT, 853, &Policy{Idle: 10 * time.Second, TicketLifetime: GoTicketLifetime}},
		{"peer-dnsproxy", ProtoDoH, 443, new(goTLS(NoIdleTimeout, 250))},
		{"peer-dnsproxy-public", ProtoDoH, 443, new(goTLS(NoIdleTimeout, 250))},
		{"peer-hickory", ProtoDoT, 853, nil}, // not configured
		{"peer-aioquic", ProtoDoH, 443, nil},
	} {
		rs := p.ByClass(c.class)
		if len(rs) == 0 {
			t.Fatalf("no %s", c.class)
		}
		pol, ok := p.ExpectPolicy(rs[0].Prefix.Addr(), c.port, c.proto)
		switch {
		case c.want == nil && ok:
			t.Errorf("%s %s: policy %+v, want none", c.class, c.proto, pol)
		case c.want != nil && (!ok || pol != *c.want):
			t.Errorf("%s %s: policy %+v %v, want %+v", c.class, c.proto, pol, ok, *c.want)
		}
	}
}

func TestClientFor(t *testing.T) {
	for _, size := range InitialSizes {
		x, ok1 := ClientFor("x25519", size)
		m, ok2 := ClientFor("x25519mlkem768", size)
		if !ok1 || !ok2 || x.InitialBytes != size || m.InitialBytes != 2*size {
			t.Errorf("size %d: %+v %+v", size, x, m)
		}
	}
	if _, ok := ClientFor("p256", 1200); ok {
		t.Error("unknown key share accepted")
	}
	// The edge chains: the Initial size decides.
	p, err := LoadDefault()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cert, share string
		stalls      []bool // at 1,200 / 1,350 / 1,452
	}{
		{"chain-edge-x", "x25519", []bool{true, false, false}},
		{"chain-edge-x", "x25519mlkem768", []bool{false, false, false}},
		{"chain-edge-m", "x25519", []bool{true, true, true}},
		{"chain-edge-m", "x25519mlkem768", []bool{true, false, false}},
		{"chain-mid", "x25519", []bool{true, true, true}},
		{"chain-mid", "x25519mlkem768", []bool{false, false, false}},
		{"chain-big", "x25519mlkem768", []bool{true, true, true}},
		{"provider-a", "x25519", []bool{false, false, false}},
	} {
		for i, size := range InitialSizes {
			cl, _ := ClientFor(c.share, size)
			if got := p.Certs[c.cert].ExceedsAmplification(cl); got != c.stalls[i] {
				t.Errorf("%s %s %d: exceeds %v, want %v (flight %d, budget %d)", c.cert, c.share, size, got, c.stalls[i],
					p.Certs[c.cert].ServerFlightBytes(cl), AmplificationFactor*cl.InitialBytes)
			}
		}
	}
}
