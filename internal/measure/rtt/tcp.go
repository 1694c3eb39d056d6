package rtt

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/doqscan/doqscan/internal/ipv4hdr"
	"github.com/doqscan/doqscan/internal/kstamp"
)

// TCP SYN probe on a raw socket (RFC 9293 §3.1, §3.5). The source port comes from a
// TCP socket we bind but never listen or connect on: the port is ours for the probe, and
// since no socket accepts the SYN-ACK the kernel answers it with a RST itself, so the
// connection is never completed and no iptables rule is needed.
const (
	tcpHeaderLen = 20
	tcpOptMSS    = 2    // RFC 9293 §3.2: Maximum Segment Size option kind
	tcpMSS       = 1460 // advertised, like a normal client
	flagSYN      = 0x02
	flagRST      = 0x04
	flagACK      = 0x10
	synWindow    = 64240
)

type reply struct {
	flags uint8
	ack   uint32
	at    time.Time
}

type probeKey struct {
	remote netip.AddrPort
	lport  uint16
}

// tcpProber owns the raw TCP socket of one address family and the probes waiting on it.
type tcpProber struct {
	conn    *net.IPConn
	rc      syscall.RawConn
	v6      bool
	mu      sync.Mutex
	waiters map[probeKey]chan reply
}

// ensureTCP returns the raw TCP socket of dst's family, opening it on first use: an
// IPv4 raw socket cannot send to an IPv6 address, so each family has its own.
func (p *Prober) ensureTCP(dst netip.Addr) (*tcpProber, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	v6 := dst.Is6() && !dst.Is4In6()
	slot := &p.tcp4
	network, unspec := "ip4:tcp", net.IPv4zero
	if v6 {
		slot = &p.tcp6
		network, unspec = "ip6:tcp", net.IPv6unspecified
	}
	if *slot != nil {
		return *slot, nil
	}
	c, err := net.ListenIP(network, &net.IPAddr{IP: unspec})
	if err != nil {
		return nil, fmt.Errorf("raw TCP socket (needs root or CAP_NET_RAW): %w", err)
	}
	rc, err := c.SyscallConn()
	if err == nil {
		err = kstamp.Enable(rc)
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("raw TCP socket: receive timestamps: %w", err)
	}
	t := &tcpProber{conn: c, rc: rc, v6: v6, waiters: map[probeKey]chan reply{}}
	go t.readLoop()
	*slot = t
	return t, nil
}

func (t *tcpProber) close() error { return t.conn.Close() }

// readLoop demultiplexes every TCP segment the host receives to the probe waiting for
// it, with the segment's kernel receive time (the loop may run late when the process is
// busy; the stamp does not).
func (t *tcpProber) readLoop() {
	buf := make([]byte, 65535)
	for {
		n, from, at, err := kstamp.Recv(t.rc, buf, false)
		if err != nil {
			return
		}
		if at.IsZero() {
			at = time.Now()
		}
		src, seg, ok := t.segment(from, buf[:n])
		if !ok || len(seg) < tcpHeaderLen {
			continue
		}
		k := probeKey{remote: netip.AddrPortFrom(src, binary.BigEndian.Uint16(seg[0:2])), lport: binary.BigEndian.Uint16(seg[2:4])}
		t.mu.Lock()
		ch := t.waiters[k]
		t.mu.Unlock()
		if ch == nil {
			continue
		}
		select {
		case ch <- reply{flags: seg[13], ack: binary.BigEndian.Uint32(seg[8:12]), at: at}:
		default:
		}
	}
}

// segment returns the sender and the TCP segment of one read from the raw socket. An
// IPv4 raw socket delivers the IP header too (RFC 791 §3.1); an IPv6 one delivers the
// payload only (RFC 3542 §3: no IPv6 header on input), with the sender in from.
func (t *tcpProber) segment(from unix.Sockaddr, b []byte) (netip.Addr, []byte, bool) {
	switch sa := from.(type) {
	case *unix.SockaddrInet4:
		if t.v6 {
			return netip.Addr{}, nil, false
		}
		seg, ok := stripIPv4(b)
		return netip.AddrFrom4(sa.Addr), seg, ok
	case *unix.SockaddrInet6:
		if !t.v6 {
			return netip.Addr{}, nil, false
		}
		return netip.AddrFrom16(sa.Addr), b, true
	}
	return netip.Addr{}, nil, false
}

// stripIPv4 returns the payload of an IPv4 packet as a raw socket delivers it (header
// included, RFC 791 §3.1), or false when the header is malformed.
func stripIPv4(b []byte) ([]byte, bool) {
	h, err := ipv4hdr.Parse(b)
	if err != nil {
		return nil, false
	}
	return b[h.HeaderLen:], true
}

func (p *Prober) probeTCP(ctx context.Context, addr netip.AddrPort, timeout time.Duration) Sample {
	addr = netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port())
	t, err := p.ensureTCP(addr.Addr())
	if err != nil {
		return Sample{SentAt: time.Now(), Status: StatusError, Detail: err.Error()}
	}
	src, err := SourceFor(addr)
	if err != nil {
		return Sample{SentAt: time.Now(), Status: StatusError, Detail: err.Error()}
	}
	if src.Is4() != addr.Addr().Is4() {
		return Sample{SentAt: time.Now(), Status: StatusError, Detail: fmt.Sprintf("source %s for %s: address families differ", src, addr)}
	}
	fd, lport, err := reservePort(src)
	if err != nil {
		return Sample{SentAt: time.Now(), Status: StatusError, Detail: err.Error()}
	}
	defer unix.Close(fd)
	var sb [4]byte
	_, _ = rand.Read(sb[:])
	seq := binary.BigEndian.Uint32(sb[:])
	seg := synSegment(src, addr, lport, seq)
	k := probeKey{remote: addr, lport: lport}
	ch := make(chan reply, 4)
	t.mu.Lock()
	t.waiters[k] = ch
	t.mu.Unlock()
	defer func() { t.mu.Lock(); delete(t.waiters, k); t.mu.Unlock() }()

	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	sent := time.Now()
	if _, err := t.conn.WriteToIP(seg, &net.IPAddr{IP: addr.Addr().AsSlice()}); err != nil {
		return Sample{SentAt: sent, Status: StatusError, Detail: err.Error()}
	}
	for {
		select {
		case <-ctx.Done():
			return Sample{SentAt: sent, Status: StatusTimeout}
		case r := <-ch:
			switch {
			case r.flags&(flagSYN|flagACK) == flagSYN|flagACK && r.ack == seq+1:
				return Sample{SentAt: sent, RTT: r.at.Sub(sent), Status: StatusOK}
			case r.flags&flagRST != 0 && (r.flags&flagACK == 0 || r.ack == seq+1):
				return Sample{SentAt: sent, RTT: r.at.Sub(sent), Status: StatusConnRefused}
			}
		}
	}
}

// SourceFor returns the source address the kernel would use towards addr (a connected
// UDP socket's local address: connect(2) on UDP sends nothing).
func SourceFor(addr netip.AddrPort) (netip.Addr, error) {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(addr))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("route to %s: %w", addr, err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), nil
}

// reservePort binds a TCP socket of src's family to an ephemeral port on src and
// returns it (open).
func reservePort(src netip.Addr) (int, uint16, error) {
	family, bind := unix.AF_INET, unix.Sockaddr(nil)
	if src.Is4() {
		bind = &unix.SockaddrInet4{Addr: src.As4()}
	} else {
		family = unix.AF_INET6
		bind = &unix.SockaddrInet6{Addr: src.As16()}
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, unix.IPPROTO_TCP)
	if err != nil {
		return -1, 0, fmt.Errorf("reserve port: %w", err)
	}
	if err := unix.Bind(fd, bind); err != nil {
		unix.Close(fd)
		return -1, 0, fmt.Errorf("reserve port: %w", err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		unix.Close(fd)
		return -1, 0, fmt.Errorf("reserve port: %w", err)
	}
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		return fd, uint16(sa.Port), nil
	case *unix.SockaddrInet6:
		return fd, uint16(sa.Port), nil
	}
	unix.Close(fd)
	return -1, 0, fmt.Errorf("reserve port: unexpected socket address %T", sa)
}

// synSegment builds a SYN with an MSS option and a valid checksum (RFC 9293 §3.1).
func synSegment(src netip.Addr, dst netip.AddrPort, sport uint16, seq uint32) []byte {
	seg := make([]byte, tcpHeaderLen+4)
	binary.BigEndian.PutUint16(seg[0:2], sport)
	binary.BigEndian.PutUint16(seg[2:4], dst.Port())
	binary.BigEndian.PutUint32(seg[4:8], seq)
	seg[12] = byte((tcpHeaderLen + 4) / 4 << 4)
	seg[13] = flagSYN
	binary.BigEndian.PutUint16(seg[14:16], synWindow)
	seg[20], seg[21] = tcpOptMSS, 4
	binary.BigEndian.PutUint16(seg[22:24], tcpMSS)
	binary.BigEndian.PutUint16(seg[16:18], tcpChecksum(src, dst.Addr(), seg))
	return seg
}

// tcpChecksum covers the segment and the pseudo-header of its family: addresses, protocol
// and length (RFC 9293 §3.1 for IPv4; RFC 8200 §8.1 for IPv6, where the length is 32
// bits, which the one's complement sum treats the same for a segment this small).
func tcpChecksum(src, dst netip.Addr, seg []byte) uint16 {
	var sum uint32
	s, d := src.AsSlice(), dst.AsSlice()
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(b[i])<<8 | uint32(b[i+1])
		}
		if len(b)%2 == 1 {
			sum += uint32(b[len(b)-1]) << 8
		}
	}
	add(s)
	add(d)
	sum += unix.IPPROTO_TCP
	sum += uint32(len(seg))
	add(seg)
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}
