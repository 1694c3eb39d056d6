package kstamp

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// ErrWouldBlock is Socket.Recv's answer when no datagram is waiting.
var ErrWouldBlock = errors.New("kstamp: no datagram waiting")

// Socket is a connected, non-blocking UDP socket with receive timestamps, for a client
// that waits on many sockets from one goroutine (epoll(7)) rather than on Go's netpoller:
// Send and Recv never sleep.
type Socket struct {
	fd    int
	Local netip.AddrPort // the source address the kernel chose
	oob   [oobSize]byte
}

// DialSocket opens a UDP socket connected to addr (a fresh ephemeral source port, as
// net.Dial gives) with receive timestamps.
func DialSocket(addr netip.AddrPort) (*Socket, error) {
	keepStamping()
	sa6 := &unix.SockaddrInet6{Port: int(addr.Port()), Addr: addr.Addr().As16()}
	if zone := addr.Addr().Zone(); zone != "" { // a link-local address's interface
		ifi, err := net.InterfaceByName(zone)
		if err != nil {
			return nil, &net.OpError{Op: "dial", Net: "udp", Addr: net.UDPAddrFromAddrPort(addr), Err: err}
		}
		sa6.ZoneId = uint32(ifi.Index)
	}
	family, sa := unix.AF_INET6, unix.Sockaddr(sa6)
	if addr.Addr().Is4() || addr.Addr().Is4In6() {
		family, sa = unix.AF_INET, &unix.SockaddrInet4{Port: int(addr.Port()), Addr: addr.Addr().Unmap().As4()}
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: "udp", Addr: net.UDPAddrFromAddrPort(addr), Err: os.NewSyscallError("socket", err)}
	}
	fail := func(op string, err error) (*Socket, error) {
		_ = unix.Close(fd)
		return nil, &net.OpError{Op: "dial", Net: "udp", Addr: net.UDPAddrFromAddrPort(addr), Err: os.NewSyscallError(op, err)}
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1); err != nil {
		return fail("setsockopt", err)
	}
	if err := unix.Connect(fd, sa); err != nil {
		return fail("connect", err)
	}
	s := &Socket{fd: fd}
	if local, err := unix.Getsockname(fd); err == nil {
		switch a := local.(type) {
		case *unix.SockaddrInet4:
			s.Local = netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port))
		case *unix.SockaddrInet6:
			s.Local = netip.AddrPortFrom(netip.AddrFrom16(a.Addr), uint16(a.Port))
		}
	}
	return s, nil
}

// FD is the socket's file descriptor (to watch it for input; Close closes it).
func (s *Socket) FD() int { return s.fd }

// Send writes b as one datagram and returns the time taken just before the write. A
// full send buffer is an error (EAGAIN), as the socket cannot wait for room.
func (s *Socket) Send(b []byte) (time.Time, error) {
	sent := time.Now()
	if err := write(s.fd, b); err != nil {
		return sent, &net.OpError{Op: "write", Net: "udp", Err: os.NewSyscallError("write", err)}
	}
	return sent, nil
}

// Recv reads one datagram into p with its kernel receive time (zero if the kernel gave
// none). ErrWouldBlock: nothing is waiting. An ICMP error the kernel queued for the
// socket (port unreachable: ECONNREFUSED) is returned as a read error, as on a net
// package socket.
func (s *Socket) Recv(p []byte) (int, time.Time, error) {
	n, oobn, err := recvmsg(s.fd, p, s.oob[:], nil)
	if err != nil {
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EWOULDBLOCK) {
			return 0, time.Time{}, ErrWouldBlock
		}
		return 0, time.Time{}, &net.OpError{Op: "read", Net: "recvmsg", Err: err}
	}
	return n, Parse(s.oob[:oobn]), nil
}

// Close closes the socket (which ends an epoll watch of it).
func (s *Socket) Close() error { return unix.Close(s.fd) }
