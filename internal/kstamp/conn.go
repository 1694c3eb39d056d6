package kstamp

import (
	"errors"
	"net"
	"net/netip"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// PacketConn is a UDP socket whose reads are kernel-timestamped into Log. It implements
// net.PacketConn (plus SyscallConn and the buffer setters) but deliberately not
// quic-go's OOBCapablePacketConn (ReadMsgUDP...): quic-go then reads it one datagram at
// a time through ReadFrom, so every datagram the QUIC stack sees passes through Log.
type PacketConn struct {
	c   *net.UDPConn
	rc  syscall.RawConn
	Log Log
}

func (c *PacketConn) Close() error                       { return c.c.Close() }
func (c *PacketConn) LocalAddr() net.Addr                { return c.c.LocalAddr() }
func (c *PacketConn) SetDeadline(t time.Time) error      { return c.c.SetDeadline(t) }
func (c *PacketConn) SetReadDeadline(t time.Time) error  { return c.c.SetReadDeadline(t) }
func (c *PacketConn) SetWriteDeadline(t time.Time) error { return c.c.SetWriteDeadline(t) }
func (c *PacketConn) SetReadBuffer(n int) error          { return c.c.SetReadBuffer(n) }
func (c *PacketConn) SetWriteBuffer(n int) error         { return c.c.SetWriteBuffer(n) }

// SyscallConn gives the socket (quic-go sets the DF bit through it).
func (c *PacketConn) SyscallConn() (syscall.RawConn, error) { return c.rc, nil }

// enable turns receive timestamps on for c's socket and returns the socket.
func enable(c syscall.Conn) (syscall.RawConn, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	return rc, Enable(rc)
}

// NewPacketConn enables receive timestamps on c and wraps it.
func NewPacketConn(c *net.UDPConn) (*PacketConn, error) {
	rc, err := enable(c)
	if err != nil {
		return nil, err
	}
	return &PacketConn{c: c, rc: rc}, nil
}

// ReadFrom reads one datagram and logs its kernel receive time (and a long-header
// datagram's checksum: Log.ArrivalOfDatagram).
func (c *PacketConn) ReadFrom(p []byte) (int, net.Addr, error) {
	n, from, at, err := Recv(c.rc, p, false)
	if err != nil {
		return 0, nil, err
	}
	c.Log.ReceivedDatagram(p[:n], at)
	return n, udpAddr(from), nil
}

// Read reads one datagram of a connected socket and logs its kernel receive time.
func (c *PacketConn) Read(p []byte) (int, error) {
	n, _, err := c.ReadFrom(p)
	return n, err
}

// ReadStamped reads one datagram and returns it with its kernel receive time (zero if
// the kernel gave none). The caller has the time, so Log is left alone.
func (c *PacketConn) ReadStamped(p []byte) (int, time.Time, error) {
	n, _, at, err := recv(c.rc, p, false, false)
	if err != nil {
		return 0, time.Time{}, err
	}
	return n, at, nil
}

// Exchange sends q on the connected socket and reads one datagram into p (sendRecv:
// no first read that fails while the answer is on its way). It returns when q left
// (just before the send system call; zero if q was not sent, and then the error is the
// send's) and the datagram with its kernel receive time (zero if the kernel gave none).
// The caller has both times, so Log is left alone. The datagram may be an older one
// than q's answer: the caller reads on.
func (c *PacketConn) Exchange(q, p []byte) (sent time.Time, n int, at time.Time, err error) {
	sent, n, at, err = sendRecv(c.rc, q, p)
	if errors.Is(err, errSendBusy) { // send buffer full: wait for room, then read
		sent = time.Now()
		if _, err = c.c.Write(q); err != nil {
			return time.Time{}, 0, time.Time{}, err
		}
		n, _, at, err = recv(c.rc, p, false, false)
	}
	if err != nil {
		return sent, 0, time.Time{}, err
	}
	return sent, n, at, nil
}

// WriteTo notes the first write after Log.Arm and sends.
func (c *PacketConn) WriteTo(p []byte, addr net.Addr) (int, error) {
	c.Log.Wrote()
	return c.c.WriteTo(p, addr)
}

// Write notes the first write after Log.Arm and sends (connected socket).
func (c *PacketConn) Write(p []byte) (int, error) {
	c.Log.Wrote()
	return c.c.Write(p)
}

func udpAddr(sa unix.Sockaddr) net.Addr {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port)))
	case *unix.SockaddrInet6:
		return net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.AddrFrom16(a.Addr), uint16(a.Port)))
	}
	return &net.UDPAddr{}
}

// Conn is a TCP connection whose reads are kernel-timestamped into Log (for TCP the
// kernel reports the arrival of the last segment a read consumed). Writes are not
// watched here: the caller's wrapper notes them (Log.Wrote) at the layer it times.
type Conn struct {
	*net.TCPConn
	rc  syscall.RawConn
	Log Log
}

// NewConn enables receive timestamps on c and wraps it.
func NewConn(c *net.TCPConn) (*Conn, error) {
	rc, err := enable(c)
	if err != nil {
		return nil, err
	}
	return &Conn{TCPConn: c, rc: rc}, nil
}

// Read reads and logs the kernel receive time of what it read.
func (c *Conn) Read(p []byte) (int, error) {
	n, _, at, err := recv(c.rc, p, true, false)
	if err != nil {
		return n, err
	}
	c.Log.Received(at)
	return n, nil
}

// HandshakeRTT returns the kernel's own measurement of the TCP 3-way handshake of a
// connected socket: tcpi_rtt right after connect is the first RTT sample, SYN sent to
// SYN-ACK received (RFC 6298 §2.2: SRTT <- R on the first measurement), in µs. It
// reports false when a retransmission happened (Karn: no clean sample) or the kernel
// gives none.
func HandshakeRTT(c *net.TCPConn) (time.Duration, bool) {
	info, ok := TCPInfo(c)
	if !ok || info.Total_retrans > 0 || info.Retransmits > 0 || info.Rtt == 0 {
		return 0, false
	}
	return time.Duration(info.Rtt) * time.Microsecond, true
}

// TCPInfo is the kernel's TCP_INFO of a connected socket (tcp(7)), or false.
func TCPInfo(c *net.TCPConn) (*unix.TCPInfo, bool) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, false
	}
	var info *unix.TCPInfo
	var ierr error
	if err := rc.Control(func(fd uintptr) { info, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) }); err != nil || ierr != nil || info == nil {
		return nil, false
	}
	return info, true
}
