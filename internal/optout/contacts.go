package optout

import (
	"fmt"
	"slices"
	"strings"

	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/protocol"
)

// Contact is one kind of packet the tools send to hosts: which stage, transport and
// ports, and what the packet is. The page's "What we send" is made from Contacts.
type Contact struct {
	Stage     string // scan, verification, measurement
	Transport string // UDP or TCP
	Ports     []uint16
	What      string
}

// measuredContact is how measure contacts a resolver over one protocol and which RTT
// probe it then sends to the same port.
type measuredContact struct {
	Protocol  measure.Protocol
	Transport string // UDP or TCP
	Ports     []uint16
	Name      string
	RTT       string
}

// rttProbes says what each RTT probe (internal/measure/rtt) sends.
var rttProbes = map[protocol.Transport]string{
	protocol.UDP:  "a datagram of 16 random bytes",
	protocol.TCP:  "a TCP SYN that is never completed",
	protocol.QUIC: "a QUIC packet that only asks for Version Negotiation",
}

// measured lists, from internal/protocol's table, how measure contacts a resolver for
// each protocol (the default endpoints of internal/measure/campaign; contacts_test.go
// checks both): the protocols on their default ports first, then the Discovered one
// (DoQ) on the port where verification found it.
func measured() []measuredContact {
	var fixed, found []measuredContact
	for _, s := range protocol.Table {
		m := measuredContact{measure.Protocol(s.Name), strings.ToUpper(s.Transport.IP()), []uint16{s.DefaultPort()}, s.Description, rttProbes[s.RTT]}
		if s.Discovered {
			m.Ports, m.Name = slices.Clone(s.Ports), s.Description+", on the port where verification found it"
			found = append(found, m)
			continue
		}
		fixed = append(fixed, m)
	}
	return append(fixed, found...)
}

// doqPorts are the ports of the DoQ table the scan probes with QUIC (probe.DefaultQUICPorts;
// contacts_test.go checks they are the same).
func doqPorts() []uint16 {
	return slices.Clone(protocol.MustLookup(protocol.DoQ).Ports)
}

// Contacts lists every kind of packet the scan, verification and measurements send.
func Contacts() []Contact {
	out := []Contact{
		{"scan (weekly, every address scanned)", "UDP", doqPorts(),
			"one QUIC Initial with a reserved version, which only asks for Version Negotiation (the host keeps no connection state)"},
		{"scan (weekly, every address scanned)", "UDP", []uint16{measure.PortDNS}, "one DNS query for an A record"},
		{"verification (weekly, only hosts that answered the scan with QUIC)", "UDP", doqPorts(),
			"a DNS-over-QUIC handshake and one DNS query, on the port where the host answered"},
	}
	for _, m := range measured() {
		out = append(out, Contact{"measurement (hourly, only verified DNS-over-QUIC resolvers)", m.Transport, m.Ports,
			m.Name + " queries; then round-trip probes to the same port: " + m.RTT})
	}
	return out
}

// Ports lists every (transport, port) of Contacts, e.g. "TCP 53, 443, 853; UDP 53, 443,
// 784, 853, 8853".
func Ports() string {
	by := map[string][]uint16{}
	for _, c := range Contacts() {
		for _, p := range c.Ports {
			if !slices.Contains(by[c.Transport], p) {
				by[c.Transport] = append(by[c.Transport], p)
			}
		}
	}
	var parts []string
	for _, t := range []string{"TCP", "UDP"} {
		ps := by[t]
		slices.Sort(ps)
		s := make([]string, len(ps))
		for i, p := range ps {
			s[i] = fmt.Sprint(p)
		}
		parts = append(parts, t+" "+strings.Join(s, ", "))
	}
	return strings.Join(parts, "; ")
}
