package measuretest

import (
	"net"
	"net/netip"
	"testing"

	"github.com/miekg/dns"

	"github.com/doqscan/doqscan/internal/testsupport"
)

// UDPAnswerer is a DoUDP server on 127.0.0.7 that answers by the question's name:
// ok.example with a datagram of another ID, then the answer; big.example with the
// answer padded past 4,096 bytes; wrong.example with an answer to another question;
// any other name not at all.
func UDPAnswerer(t testing.TB) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 7)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	testsupport.ServeUDP(c, func(c *net.UDPConn, msg []byte, from netip.AddrPort) {
		q := new(dns.Msg)
		if q.Unpack(msg) != nil || len(q.Question) != 1 {
			return
		}
		m := new(dns.Msg)
		m.SetReply(q)
		switch q.Question[0].Name {
		case "ok.example.":
			other := m.Copy()
			other.Id++
			b, _ := other.Pack()
			_, _ = c.WriteToUDPAddrPort(b, from)
			b, _ = m.Pack()
			_, _ = c.WriteToUDPAddrPort(b, from)
		case "big.example.":
			b, _ := m.Pack()
			_, _ = c.WriteToUDPAddrPort(append(b, make([]byte, 5000)...), from)
		case "wrong.example.":
			m.Question[0].Name = "other.example."
			b, _ := m.Pack()
			_, _ = c.WriteToUDPAddrPort(b, from)
		}
	})
	return c
}
