package population

import (
	"net/netip"
	"slices"

	"github.com/doqscan/doqscan/internal/doq"
	"github.com/doqscan/doqscan/internal/hostile"
	"github.com/doqscan/doqscan/internal/quicver"
)

// ClientVersions are the QUIC versions doqscan's clients (quic-go) speak, in offer order.
var ClientVersions = []string{"v1", "v2"}

// Verify outcome classes; the verifier's classification must equal these.
const (
	OutcomeDoQVerified     = "doq-verified"     // handshake with a DoQ ALPN, DNS answer NOERROR
	OutcomeDoQRefused      = "doq-refused"      // handshake ok, DNS REFUSED
	OutcomeDoQDNSError     = "doq-dns-error"    // handshake ok, a well-formed DNS error (SERVFAIL)
	OutcomeQUICNotDoQ      = "quic-not-doq"     // QUIC handshake fails on ALPN: no DoQ ALPN accepted
	OutcomeDoQNoALPN       = "doq-no-alpn"      // every DoQ ALPN refused; without ALPN, a DNS reply (RFC 9250 framing)
	OutcomeVersionMismatch = "version-mismatch" // Version Negotiation lists no version the client speaks
	OutcomeSNIRequired     = "sni-required"     // handshake without SNI fails with unrecognized_name
	OutcomeTimeout         = "timeout"          // no (usable) answer within the timeout
	OutcomeTLSError        = "tls-error"        // another TLS failure
	OutcomeProtocolError   = "protocol-error"   // DoQ framing/stream violated (reset, wrong length, endless, unparsable DNS)
	OutcomeUnreachable     = "unreachable"      // ICMP unreachable (outside the population's prefix)
)

// VN reply kinds: what a Version Negotiation probe (a 1200+ byte long-header packet with a
// reserved version, FIELD-NOTES) gets back.
const (
	VNNone      = "none"                  // nothing
	VNValid     = "valid"                 // a well-formed VN packet (RFC 9000 §17.2.1) listing Versions
	VNMalformed = "malformed"             // a VN-looking packet that does not parse
	VNGarbage   = string(hostile.Garbage) // random bytes (a hostile=garbage host)
)

// Endpoint is an (address, UDP or TCP port) pair.
type Endpoint struct {
	Addr netip.Addr
	Port uint16
}

// VNReply returns what a VN probe to (addr, port) gets back.
func (p *Population) VNReply(addr netip.Addr, port uint16) string {
	r := p.Lookup(addr)
	if r == nil || !r.HasQUICPort(port) {
		return VNNone
	}
	switch r.Hostile {
	case hostile.Garbage:
		return VNGarbage
	case hostile.BadVN:
		return VNMalformed
	}
	return VNValid
}

// AdvertisedVersions returns the QUIC versions the VN packet from (addr, port) lists (without
// greased values), nil if none is sent.
func (p *Population) AdvertisedVersions(addr netip.Addr, port uint16) []uint32 {
	if p.VNReply(addr, port) != VNValid {
		return nil
	}
	r := p.Lookup(addr)
	out := make([]uint32, 0, len(r.Versions))
	for _, v := range r.Versions {
		n, _ := quicver.Lookup(v)
		out = append(out, n)
	}
	return out
}

// UDPResponders returns the addresses that answer a VN probe on port with anything at all
// (what stock ZMap's udp module counts), in address order.
func (p *Population) UDPResponders(port uint16) []netip.Addr {
	return p.addrsWhere(func(_ netip.Addr, r *Record) bool { return r.HasQUICPort(port) })
}

// QUICSpeakers returns the addresses that answer a VN probe on port with a valid Version
// Negotiation packet: what a VN-parsing scan must find, in address order.
func (p *Population) QUICSpeakers(port uint16) []netip.Addr {
	return p.addrsWhere(func(a netip.Addr, _ *Record) bool { return p.VNReply(a, port) == VNValid })
}

// QUICEndpoints returns every (address, port) answering a VN probe with anything, ports
// ascending within an address: the verifier's input after a scan of every DoQ port.
func (p *Population) QUICEndpoints() []Endpoint {
	var out []Endpoint
	for a, r := range p.Hosts {
		for _, port := range r.AllQUICPorts() {
			out = append(out, Endpoint{a, port})
		}
	}
	return out
}

// DNSServers returns the addresses running plain DNS on port 53 over transport ("udp" or
// "tcp"), hostile ones included (check Lookup(a).Hostile), in address order.
func (p *Population) DNSServers(transport string) []netip.Addr {
	return p.addrsWhere(func(_ netip.Addr, r *Record) bool { return r.HasDNS(transport) })
}

// addrsWhere returns the listed addresses for which keep holds, in address order.
func (p *Population) addrsWhere(keep func(netip.Addr, *Record) bool) []netip.Addr {
	var out []netip.Addr
	for a, r := range p.Hosts {
		if keep(a, r) {
			out = append(out, a)
		}
	}
	return out
}

// Verdict is what a verifier must conclude about one (address, port).
type Verdict struct {
	Class      string // one of the Outcome* classes: the final result (after an SNI retry)
	NoSNIClass string // the result of an attempt without SNI (differs only for SNI-requiring hosts)
	SNI        string // the server name needed for the handshake ("" if none)
	ALPN       string // negotiated ALPN when the handshake succeeds
	Version    string // negotiated QUIC version ("v1", "v2") when the handshake succeeds
	NeedsVN    bool   // the client's first version (v1) is not spoken: Version Negotiation happens
	Cert       string // certificate profile presented
	SelfSigned bool
}

// ExpectVerify returns the verdict for (addr, port) when verified by a quic-go client
// offering every DoQ ALPN (doq.ALPNs order) and QUIC v1 then v2, querying an A record.
func (p *Population) ExpectVerify(addr netip.Addr, port uint16) Verdict {
	if !p.Prefix.Contains(addr) {
		return Verdict{Class: OutcomeUnreachable, NoSNIClass: OutcomeUnreachable}
	}
	r := p.Lookup(addr)
	if r == nil || !r.HasQUICPort(port) {
		return Verdict{Class: OutcomeTimeout, NoSNIClass: OutcomeTimeout}
	}
	v := Verdict{Cert: r.Cert, SNI: r.SNI}
	if c, ok := p.Certs[r.Cert]; ok {
		v.SelfSigned = c.SelfSigned()
	}
	set := func(c string) Verdict {
		v.Class, v.NoSNIClass = c, c
		return v
	}
	switch r.Hostile {
	case hostile.Garbage, hostile.BadVN:
		return set(OutcomeTimeout)
	case hostile.DraftOnly:
		return set(OutcomeVersionMismatch)
	}
	v.Version = ""
	for _, cv := range ClientVersions {
		if slices.Contains(r.Versions, cv) {
			v.Version = cv
			break
		}
	}
	if v.Version == "" {
		return set(OutcomeVersionMismatch)
	}
	v.NeedsVN = v.Version != ClientVersions[0]
	if r.NoALPN() {
		// Every DoQ ALPN is refused (no_application_protocol); the verifier's one
		// attempt without ALPN completes and its DNS reply makes doq-no-alpn, unless the
		// host's hostility spoils the reply (then it stays quic-not-doq).
		switch r.Hostile {
		case hostile.Stall, hostile.Endless, hostile.WrongLength, hostile.Reset, hostile.Truncated:
			v.Version = ""
			return set(OutcomeQUICNotDoQ)
		}
		return set(OutcomeDoQNoALPN)
	}
	// The server picks the first of its own ALPNs the client offers (crypto/tls, quinn,
	// aioquic all prefer the server's order).
	for _, a := range r.ALPNsOn(port) {
		if _, ok := doq.Lookup(a); ok {
			v.ALPN = a
			break
		}
	}
	if v.ALPN == "" {
		v.Version = ""
		return set(OutcomeQUICNotDoQ)
	}
	switch r.Hostile {
	case hostile.Stall:
		set(OutcomeTimeout)
	case hostile.Endless, hostile.WrongLength, hostile.Reset, hostile.Truncated:
		set(OutcomeProtocolError)
	default:
		switch r.RCode {
		case "REFUSED":
			set(OutcomeDoQRefused)
		case "SERVFAIL":
			set(OutcomeDoQDNSError)
		default:
			set(OutcomeDoQVerified)
		}
	}
	if r.SNI != "" {
		v.NoSNIClass = OutcomeSNIRequired
	}
	return v
}
