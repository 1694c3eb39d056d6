package simdns

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/doqscan/doqscan/internal/testbed/sockopt"

	"golang.org/x/net/ipv4"
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

// bindUDP opens the wildcard UDP socket with IP_PKTINFO, so each reply leaves from the
// address the query was sent to (the wildcard socket would otherwise pick the route's
// source address, and the client would drop the reply).
func (s *Server) bindUDP(port int) error {
	lc := net.ListenConfig{Control: sockopts(false)}
	pconn, err := lc.ListenPacket(s.ctx, "udp4", netip.AddrPortFrom(s.cfg.Listen, uint16(port)).String())
	if err != nil {
		return fmt.Errorf("simdns: listen udp port %d: %w", port, err)
	}
	c := pconn.(*net.UDPConn)
	s.udp = c
	if err := sockopt.SetBuffers(c, udpBuffer); err != nil {
		return fmt.Errorf("simdns: udp port %d buffers: %w", port, err)
	}
	s.addrs[DoUDP] = c.LocalAddr()
	pc := ipv4.NewPacketConn(c)
	if err := pc.SetControlMessage(ipv4.FlagDst, true); err != nil {
		return fmt.Errorf("simdns: IP_PKTINFO on udp port %d: %w", port, err)
	}
	for range s.cfg.Limits.UDPWorkers {
		s.wg.Go(func() { s.serveUDP(pc) })
	}
	return nil
}

func (s *Server) serveUDP(pc *ipv4.PacketConn) {
	buf := make([]byte, maxUDPQuery)
	for {
		n, cm, src, err := pc.ReadFrom(buf)
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
		if cm == nil || cm.Dst == nil {
			continue
		}
		dst, ok := netip.AddrFromSlice(cm.Dst)
		if !ok {
			continue
		}
		dst = dst.Unmap()
		s.nUDP.Add(1)
		s.guard("udp", func() { s.handleUDP(pc, buf[:n], dst, src) })
	}
}

func (s *Server) handleUDP(pc *ipv4.PacketConn, query []byte, dst netip.Addr, src net.Addr) {
	b, ok := s.cfg.Directory.Behaviour(s.cfg.MapAddr(dst), DoUDP)
	if !ok {
		return
	}
	out := &ipv4.ControlMessage{Src: dst.AsSlice()}
	if b.Class == ClassEndless {
		// No stream to keep open on UDP: a bounded burst of replies with wrong IDs.
		wb := b
		wb.Class = ClassWrongID
		for range wrongIDBurst {
			if wire, ok := respond(query, wb, DoUDP, 0); ok {
				pc.WriteTo(wire, out, src)
			}
		}
		return
	}
	wire, ok := respond(query, b, DoUDP, 0)
	if !ok {
		return
	}
	pc.WriteTo(wire, out, src)
}
