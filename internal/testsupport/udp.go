package testsupport

import (
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
)

// CountDatagrams counts the datagrams arriving at pc (the target-side check that an
// address received nothing, or something) until the test ends; pc is closed then.
func CountDatagrams(t testing.TB, pc net.PacketConn) *atomic.Int64 {
	t.Cleanup(func() { pc.Close() })
	var n atomic.Int64
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
			n.Add(1)
		}
	}()
	return &n
}

// Echo answers every datagram arriving at pc with the same bytes, to its sender, until
// pc is closed.
func Echo(pc net.PacketConn) {
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo(buf[:n], from)
		}
	}()
}

// ReflectQuery is an answer for ServeUDP that sends a DNS query back to its sender as
// its own answer: QR set, so NOERROR without records (the query's OPT record kept),
// which passes any client's check of ID and question. It allocates nothing, so a
// server of it costs less per answer than any client that loads it.
func ReflectQuery(c *net.UDPConn, msg []byte, from netip.AddrPort) {
	if len(msg) < 12 {
		return
	}
	msg[2] |= 0x80 // QR
	_, _ = c.WriteToUDPAddrPort(msg, from)
}

// ServeUDP hands every datagram arriving at c to answer (msg is a reused buffer: answer
// must not keep it) until c is closed. The loop allocates nothing per datagram, so tests
// that count allocations can run their server in-process.
func ServeUDP(c *net.UDPConn, answer func(c *net.UDPConn, msg []byte, from netip.AddrPort)) {
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			answer(c, buf[:n], from)
		}
	}()
}
