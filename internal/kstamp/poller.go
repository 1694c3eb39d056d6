package kstamp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ErrWouldBlock is Socket.Recv's answer when no datagram is waiting.
var ErrWouldBlock = errors.New("kstamp: no datagram waiting")

// Poller waits on many UDP sockets from one goroutine (epoll(7)), for a client that
// keeps a query outstanding on each of many sockets: one wait reports every socket
// with a datagram, where a goroutine per socket costs a park and a netpoller wake-up
// per datagram. Its sockets are its own (not Go's netpoller's) and non-blocking: Send
// and Recv never sleep. Wait is for one goroutine; Dial, Wake and Close for any.
type Poller struct {
	ep, wake int // the epoll instance; an eventfd that ends a Wait (Wake)
	evs      []unix.EpollEvent
	mu       sync.Mutex
	closed   bool
}

// wakeKey marks the eventfd's events (a Socket's key is below it).
const wakeKey = ^uint64(0)

// NewPoller opens an epoll instance and its wake-up eventfd.
func NewPoller() (*Poller, error) {
	keepStamping()
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	wake, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		_ = unix.Close(ep)
		return nil, os.NewSyscallError("eventfd", err)
	}
	p := &Poller{ep: ep, wake: wake, evs: make([]unix.EpollEvent, 256)}
	if err := p.add(wake, wakeKey); err != nil {
		_ = unix.Close(wake)
		_ = unix.Close(ep)
		return nil, err
	}
	return p, nil
}

// add watches fd for input, level-triggered: a socket read to EAGAIN or not is
// reported again while it holds a datagram. The key travels in the event's 8 data
// bytes (Fd and Pad of x/sys's EpollEvent).
func (p *Poller) add(fd int, key uint64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed { // its epoll descriptor may be another file's by now
		return net.ErrClosed
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN}
	*(*uint64)(unsafe.Pointer(&ev.Fd)) = key
	return os.NewSyscallError("epoll_ctl", unix.EpollCtl(p.ep, unix.EPOLL_CTL_ADD, fd, &ev))
}

// Socket is a connected, non-blocking UDP socket of a Poller with receive timestamps.
type Socket struct {
	fd    int
	Local netip.AddrPort // the source address the kernel chose
	oob   [oobSize]byte
}

// Dial opens a UDP socket connected to addr (a fresh ephemeral source port, as
// net.Dial gives) with receive timestamps, watched under key (below 2^64-1) until its
// Close.
func (p *Poller) Dial(addr netip.AddrPort, key uint64) (*Socket, error) {
	if key == wakeKey {
		return nil, fmt.Errorf("kstamp: socket key %d is reserved", key)
	}
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
	if err := p.add(fd, key); err != nil {
		_ = unix.Close(fd)
		return nil, &net.OpError{Op: "dial", Net: "udp", Addr: net.UDPAddrFromAddrPort(addr), Err: err}
	}
	return s, nil
}

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

// Close closes the socket, which leaves the Poller's watch with it.
func (s *Socket) Close() error { return unix.Close(s.fd) }

// Wait blocks until a socket has a datagram or Wake is called, and appends the keys of
// the sockets with one to keys. A key may come once more after its socket was closed
// (the wait had already collected it): a caller checks its key is still open.
func (p *Poller) Wait(keys []uint64) ([]uint64, error) { return p.WaitFor(keys, -1) }

// WaitFor is Wait bounded by d: after d without a datagram or a Wake it returns keys as
// they were (d < 0: no bound; 0: only what is there now). d is kept to the nanosecond
// (epoll_pwait2(2); on a kernel before 5.11, epoll_wait rounds it up to a millisecond).
func (p *Poller) WaitFor(keys []uint64, d time.Duration) ([]uint64, error) {
	for {
		n, err := p.epollWait(d)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return keys, os.NewSyscallError("epoll_wait", err)
		}
		for _, ev := range p.evs[:n] {
			key := *(*uint64)(unsafe.Pointer(&ev.Fd))
			if key == wakeKey {
				var b [8]byte
				_, _ = unix.Read(p.wake, b[:]) // reset the counter: one wake-up for all Wakes so far
				continue
			}
			keys = append(keys, key)
		}
		return keys, nil
	}
}

// noPwait2 is set once epoll_pwait2 is found missing (ENOSYS).
var noPwait2 atomic.Bool

func (p *Poller) epollWait(d time.Duration) (int, error) {
	if d < 0 {
		return unix.EpollWait(p.ep, p.evs, -1)
	}
	if !noPwait2.Load() {
		ts := unix.NsecToTimespec(int64(d))
		r, _, e := unix.Syscall6(unix.SYS_EPOLL_PWAIT2, uintptr(p.ep), uintptr(unsafe.Pointer(&p.evs[0])),
			uintptr(len(p.evs)), uintptr(unsafe.Pointer(&ts)), 0, 0)
		if e != unix.ENOSYS {
			if e != 0 {
				return 0, e
			}
			return int(r), nil
		}
		noPwait2.Store(true)
	}
	return unix.EpollWait(p.ep, p.evs, int((d+time.Millisecond-1)/time.Millisecond))
}

// Wake ends a Wait in progress, or the next one.
func (p *Poller) Wake() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return net.ErrClosed
	}
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], 1)
	if _, err := unix.Write(p.wake, b[:]); err != nil && !errors.Is(err, unix.EAGAIN) {
		return os.NewSyscallError("write", err)
	}
	return nil
}

// Close releases the epoll instance and the eventfd (its sockets are closed by their
// owners); no Wait may be in progress.
func (p *Poller) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	return errors.Join(unix.Close(p.wake), unix.Close(p.ep))
}
