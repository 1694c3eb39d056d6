package population

import (
	"fmt"
	"net/netip"
)

// The IPv6 half of the generated population, in 2001:2:0:8000::/49 (inside the RFC 5180
// benchmarking prefix 2001:2::/48). Written after every IPv4 record and drawing nothing
// from the generator's RNG, so the IPv4 part of a seed's file does not change with it.
const genPrefix6 = "2001:2:0:8000::/49"

// twins6 are dual-stack servers: the IPv6 address serves exactly what the first address
// of the IPv4 special class serves, with the same certificate, path and location.
var twins6 = []struct {
	addr  string
	class string // an IPv4 special class
}{
	{"2001:2:0:8001::1", "doq"},
	{"2001:2:0:8001::2", "doq-853"},
	{"2001:2:0:8001::3", "doq-retry"},
	{"2001:2:0:8001::4", "doq-bigchain-honour"},
	{"2001:2:0:8001::5", "doq-bigchain-ignore"},
	{"2001:2:0:8001::6", "doq-midchain-honour"},
	{"2001:2:0:8001::7", "doq-i02"},
	{"2001:2:0:8001::8", "quic-h3"},
	{"2001:2:0:8001::9", "dns-full"},
	{"2001:2:0:8001::a", "dns-udp-only"},
}

// only6 are IPv6-only servers (no IPv4 address), with their own geo.
var only6 = []struct {
	prefix, class, comment, fields, geo string
}{
	{"2001:2:0:8002::10/126", "doq6", "IPv6-only RFC 9250 DoQ on 784 and 853, DoH3", "quic=784,853 alpn=doq versions=v1,v2 token=honour cert=provider-b doh3=443 " + allDNS, "path=eu-20ms asn=AS64496 site=fra"},
	{"2001:2:0:8002::20", "doq6-lossy", "IPv6-only DoQ on a lossy, jittery path", "quic=853 alpn=doq versions=v1 token=ignore cert=provider-c dns=udp,tcp", "path=eu-20ms-jitter2 asn=AS64501 site=ams"},
	{"2001:2:0:8002::30/127", "dns6", "IPv6-only plain DNS", "dns=udp,tcp", "path=as-150ms asn=AS64503 site=sin"},
	{"2001:2:0:8002::40", "quic6-h3", "IPv6-only QUIC that is not DoQ (h3 only)", "quic=784,853 alpn=h3 versions=v1,v2 token=honour cert=provider-a", "path=na-80ms asn=AS64500 site=iad"},
	{"2001:2:0:8002::50", "hostile6-garbage", "IPv6-only: random bytes for every datagram and DNS query", "quic=784,853,8853 dns=udp,tcp hostile=garbage", "path=na-80ms asn=AS65537 site=iad"},
	{"2001:2:0:8002::60", "peer6-coredns", "IPv6-only third-party server: CoreDNS (DoQ on 853, DNS, DoT)", "peer=coredns quic=853 alpn=doq versions=v1,v2 token=honour cert=provider-b idle=10s streams=256 dns=udp,tcp dot=853", "path=eu-20ms asn=AS64496 site=fra"},
}

func (g *gen) ipv6() {
	w := &g.buf
	fmt.Fprintf(w, "\n# IPv6, %s. Dual-stack servers: the IPv6 address of an IPv4 special class's\n", genPrefix6)
	fmt.Fprintf(w, "# first address (twin=), same services, certificate, path and location.\n")
	for _, t := range twins6 {
		e, ok := g.emitted[t.class]
		if !ok {
			panic("population: twins6 names an unknown class " + t.class) // covered by tests
		}
		g.host(netip.MustParsePrefix(t.addr+"/128"), t.class, e.fields+" twin="+e.addr.String(), e.geo)
	}
	fmt.Fprintf(w, "\n# IPv6-only servers.\n")
	for _, o := range only6 {
		fmt.Fprintf(w, "# %s: %s\n", o.class, o.comment)
		p, err := netip.ParsePrefix(o.prefix)
		if err != nil {
			p = netip.MustParsePrefix(o.prefix + "/128")
		}
		g.host(p, o.class, o.fields, o.geo)
	}
}
