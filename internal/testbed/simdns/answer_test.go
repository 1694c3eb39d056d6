package simdns

import (
	"testing"
	"time"

	"github.com/miekg/dns"
)

// FuzzRespond feeds arbitrary bytes as a query to every class and transport: respond must
// never panic, and an answering class must either stay silent or produce a message that
// parses (the hostile classes excepted, which exist to be unparseable).
func FuzzRespond(f *testing.F) {
	q, _ := query("test.com").Pack()
	f.Add(q)
	m := query("example.org")
	m.SetEdns0(4096, true)
	o := m.IsEdns0()
	o.Option = append(o.Option, &dns.EDNS0_TCP_KEEPALIVE{Code: dns.EDNS0TCPKEEPALIVE})
	q2, _ := m.Pack()
	f.Add(q2)
	f.Add([]byte{})
	f.Add(make([]byte, headerLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, c := range Classes {
			for _, p := range allProtocols {
				wire, ok := respond(b, Behaviour{Class: c, Keepalive: true}, p, 10*time.Second)
				if !ok {
					continue
				}
				if c == ClassAnswer || c == ClassRefused || c == ClassWrongID {
					if err := new(dns.Msg).Unpack(wire); err != nil {
						t.Fatalf("%s/%s: reply does not parse: %v", c, p, err)
					}
				}
			}
		}
	})
}
