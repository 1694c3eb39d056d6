package optout

import (
	"fmt"
	"slices"
	"strings"

	"github.com/doqscan/doqscan/internal/doq"
	"github.com/doqscan/doqscan/internal/measure"
)

// Contact is one kind of packet the tools send to hosts: which stage, transport and
// ports, and what the packet is. The page's "What we send" is made from Contacts.
type Contact struct {
	Stage     string // scan, verification, measurement
	Transport string // UDP or TCP
	Ports     []uint16
	What      string
}

// measured is how measure contacts a resolver for each protocol of measure.Protocols
// (the default endpoints of internal/measure/campaign; contacts_test.go checks this table
// against both) and which RTT probe it then sends to the same port.
var measured = []struct {
	Protocol  measure.Protocol
	Transport string
	Ports     []uint16
	Name      string
	RTT       string
}{
	{measure.DoUDP, "UDP", []uint16{measure.PortDNS}, "DNS over UDP", "a datagram of 16 random bytes"},
	{measure.DoTCP, "TCP", []uint16{measure.PortDNS}, "DNS over TCP", "a TCP SYN that is never completed"},
	{measure.DoT, "TCP", []uint16{measure.PortDoT}, "DNS over TLS", "a TCP SYN that is never completed"},
	{measure.DoH, "TCP", []uint16{measure.PortHTTPS}, "DNS over HTTPS (HTTP/2)", "a TCP SYN that is never completed"},
	{measure.DoH3, "UDP", []uint16{measure.PortHTTPS}, "DNS over HTTPS over HTTP/3 (QUIC)", "a QUIC packet that only asks for Version Negotiation"},
	{measure.DoQ, "UDP", doqPorts(), "DNS over QUIC, on the port where verification found it", "a QUIC packet that only asks for Version Negotiation"},
}

// doqPorts are the ports of the DoQ table the scan probes with QUIC (probe.DefaultQUICPorts;
// contacts_test.go checks they are the same).
func doqPorts() []uint16 {
	return []uint16{doq.PortRFC9250, doq.PortExperimental, doq.PortDraft02}
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
	for _, m := range measured {
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
