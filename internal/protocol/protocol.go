// Package protocol is the one table of the DNS transports doqscan measures: each
// protocol's name, default ports, transport, TLS, ALPNs, request variants, session
// modes, the RTT probe its handshake pairs with and its display names. Every layer reads
// it: the measurement client (internal/measure), the campaign, dnsbench, the opt-out
// page, the targets-file grammar and help, the data release; schema.sql's and the
// migrations' CHECK lists and the analysis package's names (doqscan_analysis.names) are
// held equal to it by tests.
//
// It is a leaf package (it imports only internal/doq) so that internal/cli and
// internal/listfile, which internal/measure itself depends on, can read it too.
package protocol

import (
	"fmt"
	"slices"
	"strings"

	"github.com/doqscan/doqscan/internal/doq"
)

// Protocol names, as in schema.sql measurements.protocol, --protocols and targets files.
const (
	DoUDP = "doudp" // RFC 1035 §4.2.1
	DoTCP = "dotcp" // RFC 1035 §4.2.2, RFC 7766
	DoT   = "dot"   // RFC 7858
	DoH   = "doh"   // RFC 8484 over HTTP/2 (RFC 9113)
	DoQ   = "doq"   // RFC 9250
	DoH3  = "doh3"  // RFC 8484 over HTTP/3 (RFC 9114)
)

// Default ports.
const (
	PortDNS   = 53  // RFC 1035 §4.2
	PortDoT   = 853 // RFC 7858 §3.1
	PortHTTPS = 443 // RFC 8484 §1 (https)
	PortDoQ   = 853 // RFC 9250 §8.2
)

// Transport is a transport as rtt_samples.transport names it: what a protocol's
// packets travel on and which RTT probe pairs with its handshake.
type Transport string

const (
	UDP  Transport = "udp"
	TCP  Transport = "tcp"
	QUIC Transport = "quic" // over UDP
)

// IP is the IP protocol the transport's packets carry: "udp" or "tcp".
func (t Transport) IP() string {
	if t == QUIC {
		return string(UDP)
	}
	return string(t)
}

// Session modes, as in schema.sql measurements.mode (measure.Mode).
const (
	ModeFresh      = "fresh"      // a new session per query, no resumption (the study)
	ModeResumed    = "resumed"    // TLS session ticket from the warm-up (RFC 8446 §2.2)
	Mode0RTT       = "0rtt"       // early data where the server allows it (RFC 8446 §2.3, RFC 9001 §4.6)
	ModePersistent = "persistent" // several queries on one session
)

// Modes lists every session mode.
var Modes = []string{ModeFresh, ModeResumed, Mode0RTT, ModePersistent}

// Request variants (DoH's methods).
const (
	VariantGET  = "GET"  // RFC 8484 §4.1 (dns= parameter, base64url)
	VariantPOST = "POST" // RFC 8484 §4.1 (application/dns-message body)
)

// Spec is one protocol's row.
type Spec struct {
	Name  string // measurements.protocol, --protocols, targets files, dnsbench's PROTOCOL://
	Label string // figures and tables: "DoQ"
	// Description names it for people who never heard of it (the opt-out page).
	Description string
	// Ports are its default ports, the one a target without a port uses first. A
	// Discovered protocol lists every port the scan looks for it on.
	Ports     []uint16
	Transport Transport // what its packets travel on
	TLS       bool      // TLS 1.3 handshake (over TCP, or QUIC's)
	// ALPNs are the ALPN identifiers it negotiates, the one offered by default first.
	ALPNs []string
	// Variants are its request variants (DoH's HTTP methods), each measured as a row of
	// its own (measurements.variant); nil: one, unnamed.
	Variants []string
	Modes    []string // the session modes it has (a subset of Modes, in Modes' order)
	// RTT is the transport of the RTT probe whose sample pairs with its handshake
	// (rtt_samples.transport; the study's Sect. 2).
	RTT Transport
	// EarlyData: its client can send a query as 0-RTT early data (QUIC's; Go's TLS
	// over TCP has no client early data), so a 0rtt exchange shows the server's 0-RTT.
	EarlyData bool
	// Discovered: its endpoints come from the scan and verification (with the verified
	// ALPN), not from the default port; it is what the census looks for.
	Discovered bool
}

// Table lists every protocol in measuring order (also the figures' order).
var Table = []Spec{
	{Name: DoUDP, Label: "DoUDP", Description: "DNS over UDP", Ports: []uint16{PortDNS},
		Transport: UDP, Modes: []string{ModeFresh}, RTT: UDP},
	{Name: DoTCP, Label: "DoTCP", Description: "DNS over TCP", Ports: []uint16{PortDNS},
		Transport: TCP, Modes: []string{ModeFresh, ModePersistent}, RTT: TCP},
	// RFC 7858 defines no ALPN; "dot" is registered by RFC 9461 §7.1 (SVCB).
	{Name: DoT, Label: "DoT", Description: "DNS over TLS", Ports: []uint16{PortDoT},
		Transport: TCP, TLS: true, ALPNs: []string{"dot"}, Modes: Modes, RTT: TCP},
	{Name: DoH, Label: "DoH", Description: "DNS over HTTPS (HTTP/2)", Ports: []uint16{PortHTTPS},
		Transport: TCP, TLS: true, ALPNs: []string{"h2"}, Variants: []string{VariantGET, VariantPOST},
		Modes: Modes, RTT: TCP},
	{Name: DoQ, Label: "DoQ", Description: "DNS over QUIC",
		Ports:     []uint16{doq.PortRFC9250, doq.PortExperimental, doq.PortDraft02},
		Transport: QUIC, TLS: true, ALPNs: doq.ALPNs(), Modes: Modes, RTT: QUIC, EarlyData: true, Discovered: true},
	{Name: DoH3, Label: "DoH3", Description: "DNS over HTTPS over HTTP/3 (QUIC)", Ports: []uint16{PortHTTPS},
		Transport: QUIC, TLS: true, ALPNs: []string{"h3"}, Variants: []string{VariantGET, VariantPOST},
		Modes: Modes, RTT: QUIC, EarlyData: true},
}

// Lookup returns the row of the protocol named name.
func Lookup(name string) (Spec, bool) {
	i := slices.IndexFunc(Table, func(s Spec) bool { return s.Name == name })
	if i < 0 {
		return Spec{}, false
	}
	return Table[i], true
}

// MustLookup returns the row of name, a protocol of Table; it panics on another name
// (a programming error: use Lookup for input).
func MustLookup(name string) Spec {
	s, ok := Lookup(name)
	if !ok {
		panic(fmt.Sprintf("protocol: unknown protocol %q", name))
	}
	return s
}

// DefaultPort is the port a target without one uses (0 for the zero Spec: no protocol).
func (s Spec) DefaultPort() uint16 {
	if len(s.Ports) == 0 {
		return 0
	}
	return s.Ports[0]
}

// DefaultALPN is the ALPN offered by default ("" without ALPN).
func (s Spec) DefaultALPN() string {
	if len(s.ALPNs) == 0 {
		return ""
	}
	return s.ALPNs[0]
}

// HasMode reports whether the protocol has session mode m.
func (s Spec) HasMode(m string) bool { return slices.Contains(s.Modes, m) }

// Names lists the protocols' names in Table's order.
func Names() []string {
	out := make([]string, len(Table))
	for i, s := range Table {
		out[i] = s.Name
	}
	return out
}

// List writes items as prose: "a, b or c" (conj "or"), "a, b and c" (conj "and").
func List(items []string, conj string) string {
	if len(items) < 2 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " " + conj + " " + items[len(items)-1]
}

// Labels is every protocol's label as prose: "DoUDP, DoTCP, ... and DoH3".
func Labels() string {
	out := make([]string, len(Table))
	for i, s := range Table {
		out[i] = s.Label
	}
	return List(out, "and")
}

// DefaultPortsText is every protocol's default port for --help, protocols sharing a
// port grouped, the Discovered one (whose port is where the scan found it) last:
// "doudp/dotcp 53, dot 853, doh/doh3 443, doq 853". withALPN writes the Discovered
// protocol's default ALPN after its port, as a targets file does ("doq 853/doq").
func DefaultPortsText(withALPN bool) string {
	var ports []uint16
	names := map[uint16][]string{}
	var found []string
	for _, s := range Table {
		p := s.DefaultPort()
		if s.Discovered {
			f := fmt.Sprintf("%s %d", s.Name, p)
			if withALPN && s.DefaultALPN() != "" {
				f += "/" + s.DefaultALPN()
			}
			found = append(found, f)
			continue
		}
		if _, ok := names[p]; !ok {
			ports = append(ports, p)
		}
		names[p] = append(names[p], s.Name)
	}
	var out []string
	for _, p := range ports {
		out = append(out, fmt.Sprintf("%s %d", strings.Join(names[p], "/"), p))
	}
	return strings.Join(append(out, found...), ", ")
}

// TransportSQL is an SQL expression giving the RTT transport of the protocol in column
// col: "CASE col WHEN 'doudp' THEN 'udp' ... END" (NULL for a name not in Table).
func TransportSQL(col string) string {
	var b strings.Builder
	b.WriteString("CASE " + col)
	for _, s := range Table {
		fmt.Fprintf(&b, " WHEN '%s' THEN '%s'", s.Name, s.RTT)
	}
	b.WriteString(" END")
	return b.String()
}
