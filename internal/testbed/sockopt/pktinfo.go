package sockopt

import (
	"net"
	"net/netip"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"
)

// A wildcard UDP socket answering for many local addresses (AnyIP) must learn which
// address each datagram was sent to and send the reply from that address, or the client
// drops it: IP_PKTINFO on IPv4 sockets (ip(7)), IPV6_RECVPKTINFO/IPV6_PKTINFO on IPv6
// ones (ipv6(7), RFC 3542 §6).

// ListenUDP binds a UDP socket of addr's family on addr (an IPv6 wildcard socket is
// IPv6-only: Go sets IPV6_V6ONLY for "udp6") and enables packet info on it.
func ListenUDP(addr netip.AddrPort) (*net.UDPConn, error) {
	network := "udp4"
	if addr.Addr().Is6() {
		network = "udp6"
	}
	sock, err := net.ListenUDP(network, net.UDPAddrFromAddrPort(addr))
	if err != nil {
		return nil, err
	}
	if err := EnablePktinfo(sock); err != nil {
		sock.Close()
		return nil, err
	}
	return sock, nil
}

// EnablePktinfo asks the kernel for the destination address of every datagram of conn:
// IP_PKTINFO on an IPv4 socket, IPV6_RECVPKTINFO on an IPv6 one (with IPV6_FREEBIND, so
// replies may leave from any address of an AnyIP prefix).
func EnablePktinfo(conn *net.UDPConn) error {
	rc, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	v6 := false
	if a, ok := conn.LocalAddr().(*net.UDPAddr); ok && a.IP.To4() == nil {
		v6 = true
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		if v6 {
			if serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1); serr != nil {
				return
			}
			// An IPV6_PKTINFO source must be an address of an interface (the kernel's
			// ipv6_chk_addr), which an AnyIP address (a local route on lo) is not: the
			// send fails with EINVAL unless the socket may use non-local addresses.
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_FREEBIND, 1)
			return
		}
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_PKTINFO, 1)
	}); err != nil {
		return err
	}
	return serr
}

// PktinfoDst returns the destination address of a datagram from its control messages
// (IP_PKTINFO or IPV6_PKTINFO); false when there is none or it is malformed.
func PktinfoDst(oob []byte) (netip.Addr, bool) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return netip.Addr{}, false
	}
	for _, m := range msgs {
		switch {
		case m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_PKTINFO && len(m.Data) >= 12:
			// struct in_pktinfo { int ipi_ifindex; struct in_addr ipi_spec_dst; struct in_addr ipi_addr; }
			return netip.AddrFrom4([4]byte(m.Data[8:12])), true
		case m.Header.Level == unix.IPPROTO_IPV6 && m.Header.Type == unix.IPV6_PKTINFO && len(m.Data) >= 20:
			// struct in6_pktinfo { struct in6_addr ipi6_addr; unsigned int ipi6_ifindex; }
			return netip.AddrFrom16([16]byte(m.Data[:16])).Unmap(), true
		}
	}
	return netip.Addr{}, false
}

// PktinfoSrc is the control message that makes a reply leave from src (of either family;
// the socket must be of the same family).
func PktinfoSrc(src netip.Addr) []byte {
	if src.Is4() {
		return (&ipv4.ControlMessage{Src: src.AsSlice()}).Marshal()
	}
	return (&ipv6.ControlMessage{Src: src.AsSlice()}).Marshal()
}
