package simdns

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/doqscan/doqscan/internal/testbed/sockopt"
)

// maxUDPQuery is the largest UDP datagram read (RFC 6891 §6.2.5 lets a requestor advertise
// up to 65535; queries are small, but a hostile client may send anything).
const maxUDPQuery = 65535

// udpBuffer is the UDP socket's receive and send buffer. One wildcard socket receives
// the probes of a whole /16 sweep (silent addresses included, dropped after reading);
// with the kernel default (~200 KiB) a zmap sweep at 5,000 p/s overflowed it (5,457
// RcvbufErrors in the internet namespace, the DNS servers behind them "missed"). 128 MiB
// holds a whole sweep of small queries waiting in the kernel.
const udpBuffer = 128 << 20

// oobSize is room for one packet-info control message of either family.
const oobSize = 128

// bindUDP opens the wildcard UDP socket of each listen address with packet info
// (IP_PKTINFO / IPV6_PKTINFO), so each reply leaves from the address the query was sent to
// (the wildcard socket would otherwise pick the route's source address, and the client
// would drop the reply).
func (s *Server) bindUDP(port int) error {
	for _, listen := range s.listens() {
		c, err := sockopt.ListenUDP(netip.AddrPortFrom(listen, uint16(port)))
		if err != nil {
			return fmt.Errorf("simdns: listen udp [%s]:%d with packet info: %w", listen, port, err)
		}
		s.udp = append(s.udp, c)
		s.setAddr(DoUDP, c.LocalAddr())
		if err := sockopt.SetBuffers(c, udpBuffer); err != nil {
			return fmt.Errorf("simdns: udp port %d buffers: %w", port, err)
		}
		for range s.cfg.Limits.UDPWorkers {
			s.wg.Go(func() { s.serveUDP(c) })
		}
	}
	return nil
}

func (s *Server) serveUDP(c *net.UDPConn) {
	buf := make([]byte, maxUDPQuery)
	oob := make([]byte, oobSize)
	for {
		n, oobn, _, src, err := c.ReadMsgUDPAddrPort(buf, oob)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Transient errors (ICMP errors surfacing as ECONNREFUSED, ...) must not stop
			// the server.
			if s.ctx.Err() != nil {
				return
			}
			continue
		}
		dst, ok := sockopt.PktinfoDst(oob[:oobn])
		if !ok {
			continue
		}
		s.nUDP.Add(1)
		s.guard("udp", func() { s.handleUDP(c, buf[:n], dst, src) })
	}
}

func (s *Server) handleUDP(c *net.UDPConn, query []byte, dst netip.Addr, src netip.AddrPort) {
	b, ok := s.cfg.Directory.Behaviour(s.cfg.MapAddr(dst), DoUDP)
	if !ok {
		return
	}
	out := sockopt.PktinfoSrc(dst)
	if b.Class == ClassEndless {
		// No stream to keep open on UDP: a bounded burst of replies with wrong IDs.
		wb := b
		wb.Class = ClassWrongID
		for range wrongIDBurst {
			if wire, ok := respond(query, wb, DoUDP, 0); ok {
				c.WriteMsgUDPAddrPort(wire, out, src)
			}
		}
		return
	}
	wire, ok := respond(query, b, DoUDP, 0)
	if !ok {
		return
	}
	c.WriteMsgUDPAddrPort(wire, out, src)
}
