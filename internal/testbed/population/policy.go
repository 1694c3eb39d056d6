package population

import (
	"cmp"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/doqscan/doqscan/internal/doq"
)

// The QUIC defaults of simserver's hosts (simquic applies them; a record's idle= and
// streams= override them).
const (
	SimIdle    = 30 * time.Second // quic.Config.MaxIdleTimeout
	SimStreams = 100              // quic.Config.MaxIncomingStreams (quic-go's default)
)

// SimDNSIdle is when simserver's DoTCP/DoT close an idle connection (simdns's default
// Limits.IdleTimeout; a record's idle= overrides it). Its DoH closes an idle HTTP/2
// connection after the same time for every host (the one http.Server's IdleTimeout,
// which Go's HTTP/2 server counts from the end of a connection's last stream): idle=
// does not apply to DoH.
const SimDNSIdle = 10 * time.Second

// SimDoHStreams is the SETTINGS_MAX_CONCURRENT_STREAMS simserver's DoH announces (simdns's
// http.Server HTTP2Config.MaxConcurrentStreams) on every host: streams= is DoQ's.
const SimDoHStreams = 100

// NoIdleTimeout is Policy.Idle of a server that never closes an idle connection.
const NoIdleTimeout = time.Duration(math.MaxInt64)

// GoTicketLifetime is the lifetime crypto/tls gives every session ticket it issues (its
// maxSessionTicketLifetime, RFC 8446 §4.6.1's limit): simserver, CoreDNS and dnsproxy.
const GoTicketLifetime = 7 * 24 * time.Hour

// QuicGoTokenAge is how long quic-go honours a NEW_TOKEN token when its Transport's
// MaxTokenAge is not set (transport.go: "if maxTokenAge == 0 { maxTokenAge = 24 *
// time.Hour }", the same in v0.56, v0.64.1 and v0.65; server.go validateToken refuses a
// token older than that): simserver's hosts without tokenage=, CoreDNS 1.15 (quic.Listen,
// quic-go v0.64.1) and dnsproxy 0.78 (a quic.Transport without MaxTokenAge, quic-go v0.56).
const QuicGoTokenAge = 24 * time.Hour

// parsePolicy reads the connection-policy and DDR keys of a host line.
func parsePolicy(r *Record, m map[string]string) error {
	var err error
	if v, ok := m["maxq"]; ok {
		if r.MaxQueries, err = strconv.Atoi(v); err != nil || r.MaxQueries < 1 || r.MaxQueries > 1_000_000 {
			return fmt.Errorf("maxq=%q: want 1..1000000", v)
		}
	}
	if v, ok := m["idle"]; ok {
		if r.Idle, err = parseDuration(v); err != nil || r.Idle < time.Second || r.Idle > time.Hour {
			return fmt.Errorf("idle=%q: want 1s..1h", v)
		}
	}
	if v, ok := m["streams"]; ok {
		if r.Streams, err = strconv.Atoi(v); err != nil || r.Streams < 1 || r.Streams > 1<<16 {
			return fmt.Errorf("streams=%q: want 1..65536", v)
		}
	}
	if v, ok := m["tokenage"]; ok {
		if r.TokenAge, err = parseDuration(v); err != nil || r.TokenAge < time.Second || r.TokenAge > 7*24*time.Hour {
			return fmt.Errorf("tokenage=%q: want 1s..168h", v)
		}
		if r.Token != TokenHonour || r.Peer != "" {
			// simserver sets it (quic-go's MaxTokenAge); a peer's is its own code's, and
			// only an honoured token has an age limit to show.
			return fmt.Errorf("tokenage= needs token=honour on a simserver host")
		}
	}
	switch m["0rtt"] {
	case "", "yes":
	case "no":
		r.No0RTT = true
	default:
		return fmt.Errorf("0rtt=%q: want yes or no", m["0rtt"])
	}
	if v, ok := m["ddr"]; ok {
		if !r.HasDNS("udp") {
			return fmt.Errorf("ddr= needs plain DNS over UDP (dns=udp)")
		}
		for _, e := range strings.Split(v, ",") {
			d, err := parseDesignation(e)
			if err != nil {
				return fmt.Errorf("ddr: %w", err)
			}
			r.DDR = append(r.DDR, d)
		}
	}
	return nil
}

// parseDesignation reads ALPN[+ALPN]@PORT[/HINT].
func parseDesignation(s string) (Designation, error) {
	var d Designation
	alpns, rest, ok := strings.Cut(s, "@")
	if !ok || alpns == "" {
		return d, fmt.Errorf("%q: want ALPN[+ALPN]@PORT[/HINT]", s)
	}
	d.ALPNs = strings.Split(alpns, "+")
	port, hint, _ := strings.Cut(rest, "/")
	p, err := parsePort(port)
	if err != nil {
		return d, fmt.Errorf("%q: %w", s, err)
	}
	d.Port = p
	if hint != "" {
		if d.Hint, err = netip.ParseAddr(hint); err != nil || !d.Hint.Is4() {
			return d, fmt.Errorf("%q: hint %q is not an IPv4 address", s, hint)
		}
	}
	return d, nil
}

// DDRRecord is the SVCB record (RFC 9460) a DDR answer carries for one designation.
type DDRRecord struct {
	Priority  uint16
	Target    string // the designated resolver's name (absolute)
	ALPNs     []string
	Port      uint16
	DoHPath   string // for h2/h3 designations: "/dns-query{?dns}"
	IPv4Hints []netip.Addr
}

// DDR returns the SVCB records addr's plain DNS answers to _dns.resolver.arpa SVCB
// (none: it answers NOERROR without records). The target is the host's certificate
// CN, else "resolver.<class>.test".
func (p *Population) DDR(addr netip.Addr) []DDRRecord {
	r := p.Lookup(addr)
	if r == nil || len(r.DDR) == 0 {
		return nil
	}
	target := "resolver." + r.Class + ".test."
	if c, ok := p.Certs[r.Cert]; ok {
		target = c.CN + "."
	}
	out := make([]DDRRecord, len(r.DDR))
	for i, d := range r.DDR {
		hint := d.Hint
		if !hint.IsValid() {
			hint = addr
		}
		rec := DDRRecord{Priority: uint16(i + 1), Target: target, ALPNs: d.ALPNs, Port: d.Port, IPv4Hints: []netip.Addr{hint}}
		for _, a := range d.ALPNs {
			if a == "h2" || a == "h3" {
				rec.DoHPath = "/dns-query{?dns}"
			}
		}
		out[i] = rec
	}
	return out
}

// DDREndpoints returns every designated DoQ endpoint of the population (the hint and
// port of each designation offering an RFC 9250 ALPN), the DNS responder first, in
// address order: what verify contacts after asking every DNS/53 responder.
func (p *Population) DDREndpoints() []DDREndpoint {
	var out []DDREndpoint
	for a, r := range p.Hosts {
		if len(r.DDR) == 0 || !r.HasDNS("udp") || r.Hostile != "" {
			continue
		}
		for _, rec := range p.DDR(a) {
			for _, alpn := range rec.ALPNs {
				if _, ok := doq.Lookup(alpn); !ok {
					continue
				}
				for _, h := range rec.IPv4Hints {
					out = append(out, DDREndpoint{Resolver: a, Endpoint: Endpoint{h, rec.Port}})
				}
				break
			}
		}
	}
	return out
}

// DDREndpoint is a designated DoQ endpoint and the DNS responder that named it.
type DDREndpoint struct {
	Resolver netip.Addr
	Endpoint
}

// Retry policies (the connection check's retry_policy).
const (
	RetryPolicyNever  = "never"
	RetryPolicyFirst  = "first"
	RetryPolicyAlways = "always"
)

// peerAdvertisedIdle is the max_idle_timeout a peer advertises where it differs from when
// it drops an idle connection (its idle= key): hickory-dns closes a connection that
// carried no request for its tcp_request_timeout (5 s) while quinn advertises its
// default 30 s.
var peerAdvertisedIdle = map[string]time.Duration{PeerHickory: 30 * time.Second}

// peerTicketLifetime is the session ticket lifetime of the peers not built on crypto/tls:
// rustls's ticketer under hickory-dns and aioquic both give a day.
var peerTicketLifetime = map[string]time.Duration{PeerHickory: 24 * time.Hour, PeerAioquic: 24 * time.Hour}

// tcpPolicy is what a peer allows one DoT or DoH connection (neither ends a connection
// for its number of queries).
type tcpPolicy struct {
	DoTIdle, DoHIdle time.Duration // when it drops an idle connection (NoIdleTimeout: never)
	DoHStreams       int           // its SETTINGS_MAX_CONCURRENT_STREAMS
}

// peerTCPPolicy is the DoT and DoH policy of the peers that serve them here, read from
// their source and the configuration internal/testbed/peers writes (no timeout or limit
// of theirs is set there, so their defaults apply). A peer without an entry has no
// DoT/DoH expectation (ExpectPolicy's ok is false): hickory-dns's DoT is not configured
// in the population (no dot= on its line), and it has no DoH.
var peerTCPPolicy = map[string]tcpPolicy{
	// CoreDNS 1.15 (core/dnsserver/server.go NewServer): IdleTimeout 10 s for every
	// connection-oriented server: tls:// hands it to miekg/dns's Server.IdleTimeout (the
	// wait for every query after the first, which ReadTimeout's 3 s bounds), https:// to
	// http.Server.IdleTimeout; MaxTCPQueries -1 (no limit); max_streams unset:
	// DefaultHTTPSMaxStreams, 250 (server_https.go).
	PeerCoreDNS: {DoTIdle: 10 * time.Second, DoHIdle: 10 * time.Second, DoHStreams: 250},
	// dnsproxy 0.78 (proxy/servertcp.go): a deadline of defaultTimeout (10 s, proxy.go)
	// before each DoT query is read, no query limit. Its DoH http.Server
	// (serverhttps.go) sets only ReadHeaderTimeout and WriteTimeout: Go's HTTP/2 server
	// takes IdleTimeout, else ReadTimeout, both zero, so it never closes an idle
	// connection; no HTTP/2 settings: Go's default 250 streams (http2defaultMaxStreams).
	PeerDNSProxy: {DoTIdle: 10 * time.Second, DoHIdle: NoIdleTimeout, DoHStreams: 250},
}

// Libraries: the QUIC implementation behind each server of the population.
const (
	LibQuicGo  = "quic-go"
	LibQuinn   = "quinn"
	LibAioquic = "aioquic"
	LibNgtcp2  = "ngtcp2"
)

var peerLibraries = map[string]string{
	PeerCoreDNS: LibQuicGo, PeerDNSProxy: LibQuicGo, PeerHickory: LibQuinn, PeerAioquic: LibAioquic, PeerNgtcp2: LibNgtcp2,
	PeerLazyDNS: LibQuinn,
}

// ExpectLibrary returns the QUIC library of the server at addr ("" when nothing there
// speaks QUIC: silent, or a hostile raw responder). simserver's hosts are quic-go.
func (p *Population) ExpectLibrary(addr netip.Addr) string {
	r := p.Lookup(addr)
	if r == nil || len(r.QUICPorts) == 0 {
		return ""
	}
	if r.RawQUIC() {
		return ""
	}
	if r.Peer != "" {
		return peerLibraries[r.Peer]
	}
	return LibQuicGo
}

// Policy is what a server allows one connection of a protocol: the connection check's
// ground truth.
type Policy struct {
	MaxQueries int // 0: the server never ends a connection for its query count
	// Idle is when the server drops an idle connection (0: not known here;
	// NoIdleTimeout: never).
	Idle time.Duration
	// IdleAdvertised is the max_idle_timeout a DoQ server advertises (0: not known here).
	IdleAdvertised time.Duration
	// MaxStreams is DoQ's initial_max_streams_bidi, DoH's SETTINGS_MAX_CONCURRENT_STREAMS
	// (0: not known here, or DoT).
	MaxStreams int
	ZeroRTT    bool   // DoQ: early data accepted
	Token      string // DoQ: TokenHonour, TokenIgnore, TokenNone
	Retry      string // DoQ: RetryPolicy*
	// TicketLifetime is the session tickets' lifetime (0: not known here).
	TicketLifetime time.Duration
	// TokenAge is, for Token == TokenHonour, the oldest NEW_TOKEN token the DoQ server
	// honours: a token presented younger is honoured, one older is not (0: not known
	// here, or no token honoured).
	TokenAge time.Duration
}

// ExpectPolicy returns the connection policy of proto ("doq", "dot", "doh") at (addr,
// port); ok is false when the endpoint does not serve it (or is hostile), and for the
// DoT and DoH of a peer whose policy is not known here (peerTCPPolicy). DoT and DoH
// have no 0-RTT, NEW_TOKEN or Retry (Policy's DoQ fields stay zero).
func (p *Population) ExpectPolicy(addr netip.Addr, port uint16, proto string) (Policy, bool) {
	r := p.Lookup(addr)
	if r == nil || r.Hostile != "" {
		return Policy{}, false
	}
	pol := Policy{MaxQueries: r.MaxQueries, Token: r.Token, ZeroRTT: !r.No0RTT}
	quicGo := r.Peer == "" || r.Peer == PeerCoreDNS || r.Peer == PeerDNSProxy
	if quicGo {
		pol.TicketLifetime = GoTicketLifetime
	} else {
		pol.TicketLifetime = peerTicketLifetime[r.Peer]
	}
	switch proto {
	case ProtoDoQ:
		if v := p.ExpectVerify(addr, port); v.ALPN == "" || !slices.Contains(r.QUICPorts, port) {
			return Policy{}, false
		}
		pol.Idle, pol.MaxStreams = r.Idle, r.Streams
		if r.Peer == "" {
			pol.Idle, pol.MaxStreams = cmp.Or(r.Idle, SimIdle), cmp.Or(r.Streams, SimStreams)
		}
		pol.IdleAdvertised = cmp.Or(peerAdvertisedIdle[r.Peer], pol.Idle)
		if r.Token == TokenHonour && quicGo {
			pol.TokenAge = cmp.Or(r.TokenAge, QuicGoTokenAge)
		}
		pol.Retry = RetryPolicyNever
		switch {
		case r.Retry:
			pol.Retry = RetryPolicyAlways
		case r.RetryFirst:
			pol.Retry = RetryPolicyFirst
		}
	case ProtoDoT, ProtoDoH:
		served := r.DoT
		if proto == ProtoDoH {
			served = r.DoH
		}
		if served == 0 || port != served {
			return Policy{}, false
		}
		pol.ZeroRTT, pol.Token = false, ""
		switch tcp, known := peerTCPPolicy[r.Peer]; {
		case r.Peer == "" && proto == ProtoDoT:
			pol.Idle = cmp.Or(r.Idle, SimDNSIdle)
		case r.Peer == "":
			// Go's HTTP/2 server ends no connection for its number of requests: maxq=
			// and idle= are simserver's DoQ, DoTCP and DoT.
			pol.MaxQueries, pol.Idle, pol.MaxStreams = 0, SimDNSIdle, SimDoHStreams
		case !known:
			return Policy{}, false
		case proto == ProtoDoT:
			// A peer's idle= and maxq= describe its DoQ; its DoT and DoH are its own.
			pol.MaxQueries, pol.Idle = 0, tcp.DoTIdle
		default:
			pol.MaxQueries, pol.Idle, pol.MaxStreams = 0, tcp.DoHIdle, tcp.DoHStreams
		}
	default:
		return Policy{}, false
	}
	return pol, true
}
