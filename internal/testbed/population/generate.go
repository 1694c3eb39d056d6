package population

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
)

// DefaultSeed is the seed of the committed testbed/population.txt.
const DefaultSeed = 1

// The generator's fixed tables. Everything random (which site, AS and path a block gets,
// the bulk populations' mixes) is drawn from a PCG seeded with the seed, in a fixed order,
// so one seed always yields the same file byte for byte.

type genPath struct {
	name   string
	rtt    string
	jitter string
	loss   string
}

var genPaths = []genPath{
	{"default", "20ms", "0ms", "0%"},
	{"eu-5ms", "5ms", "0ms", "0%"},
	{"eu-20ms", "20ms", "0ms", "0%"},
	{"na-80ms", "80ms", "0ms", "0%"},
	{"as-150ms", "150ms", "0ms", "0%"},
	{"oc-300ms", "300ms", "0ms", "0%"},
	{"eu-20ms-jitter2", "20ms", "2ms", "0%"},
	{"na-80ms-loss1", "80ms", "0ms", "1%"},
	{"as-150ms-loss5", "150ms", "1ms", "5%"},
}

type genSite struct {
	name, cc, continent, city string
	lat, lon                  string
	paths                     []string // lossless paths plausible from the vantage (in Europe)
	lossy                     string
}

var genSites = []genSite{
	{"fra", "DE", "EU", "Frankfurt", "50.1109", "8.6821", []string{"eu-5ms", "eu-20ms"}, "eu-20ms-jitter2"},
	{"ams", "NL", "EU", "Amsterdam", "52.3676", "4.9041", []string{"eu-5ms", "eu-20ms"}, "eu-20ms-jitter2"},
	{"lon", "GB", "EU", "London", "51.5072", "-0.1276", []string{"eu-20ms"}, "eu-20ms-jitter2"},
	{"iad", "US", "NA", "Ashburn", "39.0438", "-77.4874", []string{"na-80ms"}, "na-80ms-loss1"},
	{"sfo", "US", "NA", "San Francisco", "37.7749", "-122.4194", []string{"na-80ms"}, "na-80ms-loss1"},
	{"sin", "SG", "AS", "Singapore", "1.3521", "103.8198", []string{"as-150ms"}, "as-150ms-loss5"},
	{"nrt", "JP", "AS", "Tokyo", "35.6762", "139.6503", []string{"as-150ms"}, "as-150ms-loss5"},
	{"syd", "AU", "OC", "Sydney", "-33.8688", "151.2093", []string{"oc-300ms"}, "as-150ms-loss5"},
	{"gru", "BR", "SA", "Sao Paulo", "-23.5558", "-46.6396", []string{"oc-300ms"}, "na-80ms-loss1"},
}

// AS numbers from the documentation ranges (RFC 5398): 64496-64511 and 65536-65551.
var genASNs = []struct {
	num uint32
	org string
}{
	{64496, "Provider A DNS"},
	{64497, "Provider B Cloud"},
	{64498, "Provider C Networks"},
	{64499, "Provider D Private Resolvers"},
	{64500, "Provider E Hosting"},
	{64501, "Example Broadband"},
	{64502, "Example Campus Network"},
	{64503, "Example Mobile"},
	{65536, "Example Transit"},
	{65537, "Hostile Hosting Ltd"},
}

type genCert struct {
	name, cn, san, issuer string
	intermediates, pad    int
}

// Certificate profiles. chain-mid exceeds 3x a one-Initial (X25519) ClientHello but not
// 3x a two-Initial (X25519MLKEM768) one; chain-big exceeds both (byte counts in
// docs/population.md, checked by internal/testbed/pki's tests).
var genCerts = []genCert{
	{"provider-a", "dns.provider-a.test", "doq.provider-a.test", "ca-a", 1, 0},
	{"provider-b", "doq.provider-b.test", "", "ca-b", 1, 0},
	{"provider-c", "resolver.provider-c.test", "", "ca-a", 0, 0},
	{"sni-host", "private.provider-d.test", "", "ca-b", 1, 0},
	{"self-signed", "doq.self-signed.test", "", "self", 0, 0},
	{"chain-mid", "mid.provider-e.test", "", "ca-a", 3, 700},
	{"chain-big", "big.provider-e.test", "", "ca-a", 6, 1500},
	// Chains whose first flight lies between what an unvalidated quic-go server sends to
	// a client padding its Initials to 1,200 and to 1,350 bytes (SendableUnvalidated:
	// 3,840 and 5,120 bytes for one X25519 Initial, 7,680 and 8,960 for the two of an
	// X25519MLKEM768 ClientHello): chain-edge-x with an X25519 share, chain-edge-m with
	// an X25519MLKEM768 one.
	{"chain-edge-x", "edge-x.provider-e.test", "", "ca-b", 3, 522},
	{"chain-edge-m", "edge-m.provider-e.test", "", "ca-b", 5, 627},
}

// Services most DoQ resolvers also offer (so measure can compare every protocol).
const allDNS = "dns=udp,tcp dot=853 doh=443"

type special struct {
	class   string
	comment string
	fields  string
	lossy   bool // use the site's lossy path
	single  bool // one address (/32) instead of four (/30)
}

// Special behaviour classes, four addresses each (one /30), in 198.19.1.0/24 onwards.
var specials = []special{
	{"doq", "RFC 9250 DoQ on every DoQ port, v1 and v2, NEW_TOKEN honoured; DoH3 on UDP 443", "quic=784,853,8853 alpn=doq versions=v1,v2 token=honour cert=provider-a doh3=443 " + allDNS, false, false},
	{"doq-853", "RFC 9250 DoQ on 853 only", "quic=853 alpn=doq versions=v1,v2 token=honour cert=provider-b " + allDNS, false, false},
	{"doq-i00", "draft-00 ALPN (raw framing) on 784", "quic=784 alpn=doq-i00 versions=v1 token=honour cert=provider-c dns=udp,tcp", false, false},
	{"doq-i02", "draft-02 ALPN (raw framing) on 8853, its proposed port", "quic=8853 alpn=doq-i02 versions=v1 token=honour cert=provider-c dns=udp,tcp", false, false},
	{"doq-i03", "draft-03 ALPN (2-byte length prefix from this draft on) on 784", "quic=784 alpn=doq-i03 versions=v1,v2 token=honour cert=provider-a dns=udp,tcp", false, false},
	{"doq-multi", "several DoQ ALPNs; the server prefers RFC 9250", "quic=784,853 alpn=doq,doq-i03,doq-i02,doq-i00 versions=v1,v2 token=honour cert=provider-b " + allDNS, false, false},
	{"quic-h3", "QUIC that is not DoQ (h3 only) on DoQ ports", "quic=784,853 alpn=h3 versions=v1,v2 token=honour cert=provider-a", false, false},
	{"doq-retry", "always sends Retry to a client without a valid token (DoH3 too); honours NEW_TOKEN tokens up to 10 s old", "quic=784,853 alpn=doq versions=v1,v2 retry=always token=honour tokenage=10s cert=provider-a doh3=443 " + allDNS, false, false},
	{"doq-bigchain-honour", "chain over 3x both ClientHello sizes; NEW_TOKEN honoured", "quic=784,853 alpn=doq versions=v1,v2 token=honour cert=chain-big " + allDNS, false, false},
	{"doq-bigchain-ignore", "chain over 3x both ClientHello sizes; NEW_TOKEN issued, never honoured (2021); DoH3 likewise", "quic=784,853 alpn=doq versions=v1,v2 token=ignore cert=chain-big doh3=443 " + allDNS, false, false},
	{"doq-midchain-honour", "chain over 3x a one-Initial ClientHello only; NEW_TOKEN honoured", "quic=784,853 alpn=doq versions=v1,v2 token=honour cert=chain-mid " + allDNS, false, false},
	{"doq-midchain-ignore", "chain over 3x a one-Initial ClientHello only; NEW_TOKEN not honoured", "quic=784,853 alpn=doq versions=v1,v2 token=ignore cert=chain-mid " + allDNS, false, false},
	{"doq-sni", "handshake fails (unrecognized_name) without SNI private.provider-d.test", "quic=784,853 alpn=doq versions=v1,v2 token=honour cert=sni-host sni=private.provider-d.test " + allDNS, false, false},
	{"doq-selfsigned", "self-signed certificate", "quic=784,853 alpn=doq versions=v1,v2 token=honour cert=self-signed dns=udp,tcp", false, false},
	{"doq-v1only", "QUIC v1 only", "quic=784,853 alpn=doq versions=v1 token=honour cert=provider-b dns=udp,tcp", false, false},
	{"doq-v2only", "QUIC v2 only (a v1 client gets Version Negotiation)", "quic=784,853 alpn=doq versions=v2 token=honour cert=provider-b dns=udp,tcp", false, false},
	{"doq-refused", "DoQ handshake fine, every query REFUSED", "quic=784,853 alpn=doq versions=v1,v2 token=honour cert=provider-c rcode=REFUSED " + allDNS, false, false},
	{"doq-servfail", "DoQ handshake fine, every query SERVFAIL", "quic=784,853 alpn=doq versions=v1,v2 token=honour cert=provider-c rcode=SERVFAIL", false, false},
	{"doq-lossy", "DoQ on a lossy path", "quic=784,853 alpn=doq versions=v1,v2 token=honour cert=provider-a " + allDNS, true, false},
	{"quic-draft-only", "answers every Initial with a valid VN listing only drafts", "quic=784,853 versions=draft-29,draft-32,draft-34 hostile=draft-only", false, false},
	{"hostile-garbage", "random bytes for every datagram and DNS query", "quic=784,853,8853 dns=udp,tcp hostile=garbage", false, false},
	{"hostile-bad-vn", "a malformed VN (version list cut mid-entry) for every long-header packet", "quic=784,853,8853 versions=v1 hostile=bad-vn", false, false},
	{"hostile-truncated", "DoQ / DNS replies whose DNS message is cut short", "quic=784,853 alpn=doq versions=v1,v2 token=honour cert=provider-a dns=udp,tcp hostile=truncated", false, false},
	{"hostile-endless", "a DoQ reply stream that never ends", "quic=784,853 alpn=doq versions=v1,v2 token=honour cert=provider-a hostile=endless", false, false},
	{"hostile-wrong-length", "DoQ / DNS-over-TCP length prefix disagreeing with the message", "quic=784,853 alpn=doq versions=v1,v2 token=honour cert=provider-a dns=tcp hostile=wrong-length", false, false},
	{"hostile-reset", "DoQ stream reset instead of a reply; TCP reset", "quic=784,853 alpn=doq versions=v1,v2 token=honour cert=provider-a dns=tcp hostile=reset", false, false},
	{"hostile-stall", "accepts (QUIC handshake, TCP connect) and never answers", "quic=784,853 alpn=doq versions=v1,v2 token=honour cert=provider-a dns=udp,tcp dot=853 doh=443 hostile=stall", false, false},
	{"dns", "plain DNS on UDP and TCP 53", "dns=udp,tcp", false, false},
	{"dns-udp-only", "plain DNS on UDP 53 only", "dns=udp", false, false},
	{"dns-refused", "plain DNS, every query REFUSED", "dns=udp,tcp rcode=REFUSED", false, false},
	{"dot", "DoT on 853 (and plain DNS)", "dns=udp,tcp dot=853", false, false},
	{"doh", "DoH on 443 (and plain DNS)", "dns=udp,tcp doh=443", false, false},
	{"dns-full", "plain DNS, DoT and DoH, no DoQ", allDNS, false, false},
}

// Behaviour classes added after the drawn lines were settled: the /30s right after
// specials, with a fixed site, AS and path instead of drawn ones, so adding them moved
// no other line of the file.
var fixedSpecials = []struct {
	class, comment, fields, geo string
}{
	{"doq-no-alpn", "accepts only a QUIC handshake offering no ALPN (refuses any offered one with no_application_protocol, as rustls/quinn with none configured); DNS on it framed as RFC 9250",
		"quic=784,853 alpn=none versions=v1,v2 token=honour cert=provider-c dns=udp,tcp", "path=eu-20ms asn=AS64502 site=ams"},
	{"doq-policy", "DoQ and DoT with known connection limits: a connection ends after 40 queries, 7 s idle timeout, 8 concurrent DoQ streams, no 0-RTT",
		"quic=853 alpn=doq versions=v1,v2 token=honour cert=provider-b dns=udp,tcp dot=853 maxq=40 idle=7s streams=8 0rtt=no", "path=eu-5ms asn=AS64497 site=fra"},
	{"ddr-doq-port", "plain DNS designating (DDR, RFC 9462) DoQ on UDP/10853, a port no scan probes, and DoT on 853, both at its own address",
		"quic=10853 alpn=doq versions=v1,v2 token=honour cert=provider-a dns=udp,tcp dot=853 ddr=doq@10853,dot@853", "path=eu-20ms asn=AS64496 site=ams"},
	{"ddr-doq-853", "a DoQ resolver on 853 (the scan finds it too) designating DoQ 853, DoT 853 and DoH 443",
		"quic=853 alpn=doq versions=v1,v2 token=honour cert=provider-b dns=udp,tcp dot=853 doh=443 ddr=doq@853,dot@853,h2@443", "path=eu-20ms asn=AS64497 site=lon"},
	{"ddr-dead", "plain DNS designating DoQ on UDP/8530 at its own address, where nothing answers",
		"dns=udp,tcp ddr=doq@8530", "path=na-80ms asn=AS64501 site=iad"},
	{"ddr-elsewhere", "plain DNS designating the DoQ resolver at 198.19.1.140 (ddr-doq-port) on UDP/10853",
		"dns=udp,tcp ddr=doq@10853/198.19.1.140", "path=eu-20ms asn=AS64501 site=ams"},
	{"doq-edgechain-x", "chain-edge-x, tokens ignored: its first flight exceeds what may be sent to a 1,200-byte X25519 Initial only",
		"quic=853 alpn=doq versions=v1,v2 token=ignore cert=chain-edge-x dns=udp,tcp", "path=eu-20ms asn=AS64500 site=fra"},
	{"doq-edgechain-m", "chain-edge-m, tokens ignored: its first flight exceeds what may be sent to two 1,200-byte X25519MLKEM768 Initials only (and every X25519 budget)",
		"quic=853 alpn=doq versions=v1,v2 token=ignore cert=chain-edge-m dns=udp,tcp", "path=eu-20ms asn=AS64500 site=fra"},
}

// Third-party peers, one address each in 198.19.3.0/24. the peers package starts them; the
// versions listed are what each stack's VN advertises (FIELD-NOTES).
var peers = []special{
	{"peer-coredns", "CoreDNS 1.15 (quic-go): DoUDP, DoTCP, DoT, DoH, DoQ", "peer=coredns quic=784,853 alpn=doq versions=v1,v2 token=honour cert=provider-b idle=10s streams=256 " + allDNS, false, true},
	{"peer-hickory", "hickory-dns 0.26 (quinn): DoQ; VN lists v1 and drafts 29-34", "peer=hickory quic=853 alpn=doq versions=v1,draft-29,draft-30,draft-31,draft-32,draft-33,draft-34 token=none cert=provider-c idle=5s streams=100 0rtt=no dns=udp,tcp", false, true},
	{"peer-aioquic", "aioquic 1.7 doq_server: no NEW_TOKEN", "peer=aioquic quic=784 alpn=doq versions=v1,v2 token=none cert=provider-a idle=60s streams=128", false, true},
	{"peer-aioquic-retry", "aioquic 1.7 doq_server --retry", "peer=aioquic quic=784 alpn=doq versions=v1,v2 retry=always token=none cert=provider-a idle=60s streams=128", false, true},
	{"peer-aioquic-bigchain", "aioquic with chain-big and no NEW_TOKEN: the 2-RTT case through a non-Go stack", "peer=aioquic quic=784 alpn=doq versions=v1,v2 token=none cert=chain-big idle=60s streams=128", false, true},
	{"peer-ngtcp2", "ngtcp2 server: QUIC, not DoQ (h3)", "peer=ngtcp2 quic=784 alpn=h3 versions=v1 token=honour cert=provider-a", false, true},
}

// AdGuard dnsproxy (quic-go), the server behind AdGuard Home and AdGuard's public DNS,
// after the peers above (198.19.3.7 on). Their site, AS and path are fixed rather than
// drawn, so adding them left every drawn line of the file as it was. dnsproxy accepts the
// ALPNs doq, doq-i02, doq-i00 and dq; sends Retry to every address it has not sent one to
// within 30 minutes (retry=first), on its DoQ ports only; issues and honours NEW_TOKEN
// (quic-go's defaults); accepts 0-RTT.
var dnsproxyPeers = []struct {
	class, comment, fields, geo string
}{
	{"peer-dnsproxy", "AdGuard dnsproxy 0.78 with AdGuard Home's defaults: DoQ on 853 and on 784 (older deployments), DoT, DoH, DoH3, plain DNS",
		"peer=dnsproxy quic=784,853 alpn=doq,doq-i02,doq-i00,dq versions=v1,v2 retry=first token=honour cert=provider-a idle=5m streams=65535 doh3=443 " + allDNS,
		"path=eu-20ms asn=AS64501 site=fra"},
	{"peer-dnsproxy-public", "AdGuard dnsproxy 0.78 as a public resolver: a 7-certificate chain (chain-big), DoQ on 853, DoT, DoH, DoH3, plain DNS",
		"peer=dnsproxy quic=853 alpn=doq,doq-i02,doq-i00,dq versions=v1,v2 retry=first token=honour cert=chain-big idle=5m streams=65535 doh3=443 " + allDNS,
		"path=na-80ms asn=AS64496 site=iad"},
}

// Third-party peers added after dnsproxy (198.19.3.9 on), with a fixed site, AS and
// path so that adding them moved no other line.
var laterPeers = []struct {
	class, comment, fields, geo string
}{
	{"peer-lazydns", "lazydns 0.2.63 (Rust, quinn): DoQ without an ALPN (rustls refuses any offered one), RFC 9250 framing; NEW_TOKEN issued",
		"peer=lazydns quic=853 alpn=none versions=v1,draft-29,draft-30,draft-31,draft-32,draft-33,draft-34 token=honour cert=provider-c idle=30s streams=100",
		"path=eu-20ms asn=AS64500 site=ams"},
}

type gen struct {
	rng *rand.Rand
	buf bytes.Buffer
	// emitted maps each special class to its first address, fields and geo (for the
	// IPv6 twins, generate6.go).
	emitted map[string]emittedHost
}

type emittedHost struct {
	addr        netip.Addr
	fields, geo string
}

func (g *gen) pick(n int) int { return g.rng.IntN(n) }

func (g *gen) geo(lossy, hostile bool) string {
	s := genSites[g.pick(len(genSites))]
	a := genASNs[g.pick(len(genASNs)-1)] // the last AS hosts hostile ones only
	if hostile {
		a = genASNs[len(genASNs)-1]
	}
	path := s.paths[g.pick(len(s.paths))]
	if lossy {
		path = s.lossy
	}
	return fmt.Sprintf("path=%s asn=AS%d site=%s", path, a.num, s.name)
}

func (g *gen) host(p netip.Prefix, class, fields, geo string) {
	h := p.String()
	if p.IsSingleIP() {
		h = p.Addr().String()
	}
	fmt.Fprintf(&g.buf, "%-18s class=%s %s %s\n", h, class, fields, geo)
}

func addr(a, b, c, d int) netip.Addr { //nolint:unparam // four octets read as the address they make
	return netip.AddrFrom4([4]byte{byte(a), byte(b), byte(c), byte(d)})
}

// Generate returns the population file for seed.
func Generate(seed uint64) []byte {
	g := &gen{rng: rand.New(rand.NewPCG(seed, 0x646f717363616e)), emitted: map[string]emittedHost{}} // "doqscan"
	w := &g.buf
	fmt.Fprintf(w, "# doqscan testbed population: which address of the simulated internet runs what.\n")
	fmt.Fprintf(w, "# Generated by `simserver population --seed %d`; do not edit (a test compares).\n", seed)
	fmt.Fprintf(w, "# Grammar: docs/population.md. Unlisted addresses are silent.\n\n")
	fmt.Fprintf(w, "format %d\nseed %d\nprefix 198.19.0.0/16\nprefix6 %s\nanswer 192.0.2.1 ttl=300   # A record every NOERROR resolver returns, for any name\ndefault-path default\n\n", FormatVersion, seed, genPrefix6)

	fmt.Fprintf(w, "[paths]\n# name            round trip, jitter (each direction), loss (each direction)\n")
	for _, p := range genPaths {
		fmt.Fprintf(w, "%-18s rtt=%s jitter=%s loss=%s\n", p.name, p.rtt, p.jitter, p.loss)
	}
	fmt.Fprintf(w, "\n[sites]\n")
	for _, s := range genSites {
		fmt.Fprintf(w, "%-5s cc=%s continent=%s city=%q lat=%s lon=%s\n", s.name, s.cc, s.continent, s.city, s.lat, s.lon)
	}
	fmt.Fprintf(w, "\n[asns]\n")
	for _, a := range genASNs {
		fmt.Fprintf(w, "AS%d org=%q\n", a.num, a.org)
	}
	fmt.Fprintf(w, "\n[certs]\n# leaf CN, extra SANs, issuer (self or a testbed CA), intermediates sent in the chain, filler bytes per certificate\n")
	for _, c := range genCerts {
		san := ""
		if c.san != "" {
			san = " san=" + c.san
		}
		fmt.Fprintf(w, "%-12s cn=%s%s issuer=%s intermediates=%d pad=%d\n", c.name, c.cn, san, c.issuer, c.intermediates, c.pad)
	}

	fmt.Fprintf(w, "\n[hosts]\n# 198.19.0.0/24 is left silent (infrastructure).\n")
	fmt.Fprintf(w, "\n# Behaviour classes, four addresses each.\n")
	for i, s := range specials {
		p := netip.PrefixFrom(addr(198, 19, 1+i*4/256, i*4%256), 30)
		fmt.Fprintf(w, "# %s: %s\n", s.class, s.comment)
		geo := g.geo(s.lossy, strings.HasPrefix(s.class, "hostile-"))
		g.emitted[s.class] = emittedHost{p.Addr(), s.fields, geo}
		g.host(p, s.class, s.fields, geo)
	}
	for j, s := range fixedSpecials {
		i := len(specials) + j
		p := netip.PrefixFrom(addr(198, 19, 1+i*4/256, i*4%256), 30)
		fmt.Fprintf(w, "# %s: %s\n", s.class, s.comment)
		g.emitted[s.class] = emittedHost{p.Addr(), s.fields, s.geo}
		g.host(p, s.class, s.fields, s.geo)
	}
	fmt.Fprintf(w, "\n# Third-party servers (started by scripts/install-peers.sh / internal/testbed/peers).\n")
	for i, s := range peers {
		fmt.Fprintf(w, "# %s: %s\n", s.class, s.comment)
		g.host(netip.PrefixFrom(addr(198, 19, 3, 1+i), 32), s.class, s.fields, g.geo(false, false))
	}
	for i, s := range dnsproxyPeers {
		fmt.Fprintf(w, "# %s: %s\n", s.class, s.comment)
		g.host(netip.PrefixFrom(addr(198, 19, 3, 1+len(peers)+i), 32), s.class, s.fields, s.geo)
	}
	for i, s := range laterPeers {
		fmt.Fprintf(w, "# %s: %s\n", s.class, s.comment)
		g.host(netip.PrefixFrom(addr(198, 19, 3, 1+len(peers)+len(dnsproxyPeers)+i), 32), s.class, s.fields, s.geo)
	}

	fmt.Fprintf(w, "\n# Bulk: plain DNS resolvers, 198.19.16.0/20 in /26 blocks (some REFUSED, some UDP only).\n")
	for i := 0; i < 64; i++ {
		p := netip.PrefixFrom(addr(198, 19, 16+i/4, i%4*64), 26)
		fields, class := "dns=udp,tcp", "bulk-dns"
		switch r := g.pick(10); {
		case r == 0:
			fields, class = "dns=udp,tcp rcode=REFUSED", "bulk-dns-refused"
		case r <= 2:
			fields, class = "dns=udp", "bulk-dns-udp-only"
		}
		g.host(p, class, fields, g.geo(g.pick(8) == 0, false))
	}

	fmt.Fprintf(w, "\n# Bulk: DoQ resolvers, 198.19.32.0/22 in /27 blocks (port, ALPN, token, certificate mixes).\n")
	portSets := []string{"784", "853", "784,853", "784,853,8853"}
	alpnSets := []string{"doq", "doq", "doq", "doq,doq-i03", "doq-i03", "doq-i02,doq-i00"}
	certs := []string{"provider-a", "provider-b", "provider-c", "self-signed"}
	for i := 0; i < 32; i++ {
		p := netip.PrefixFrom(addr(198, 19, 32+i/8, i%8*32), 27)
		token := TokenHonour
		if g.pick(5) < 2 {
			token = TokenIgnore
		}
		versions := "v1,v2"
		if g.pick(4) == 0 {
			versions = "v1"
		}
		doh3 := ""
		if g.pick(3) == 0 {
			doh3 = " doh3=443"
		}
		fields := fmt.Sprintf("quic=%s alpn=%s versions=%s token=%s cert=%s%s %s",
			portSets[g.pick(len(portSets))], alpnSets[g.pick(len(alpnSets))], versions, token,
			certs[g.pick(len(certs))], doh3, allDNS)
		g.host(p, "bulk-doq", fields, g.geo(g.pick(8) == 0, false))
	}

	fmt.Fprintf(w, "\n# Bulk: QUIC web servers answering on 784 (h3 only), 198.19.40.0/26 in /29 blocks.\n")
	for i := 0; i < 8; i++ {
		g.host(netip.PrefixFrom(addr(198, 19, 40, i*8), 29), "bulk-quic-h3",
			"quic=784 alpn=h3 versions=v1,v2 token=honour cert=provider-a", g.geo(false, false))
	}

	fmt.Fprintf(w, "\n# Bulk: DoT/DoH resolvers without DoQ, 198.19.48.0/23 in /26 blocks.\n")
	for i := 0; i < 8; i++ {
		g.host(netip.PrefixFrom(addr(198, 19, 48+i/4, i%4*64), 26), "bulk-dns-full", allDNS, g.geo(false, false))
	}
	g.ipv6()
	return []byte(strings.ReplaceAll(w.String(), "  \n", "\n"))
}
