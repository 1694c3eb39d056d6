package udploop

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

	"github.com/doqscan/doqscan/internal/kstamp"
)

// Poller waits on many UDP sockets (kstamp.Socket) from one goroutine (epoll(7)), for a
// client that keeps a query outstanding on each of many sockets: one wait reports every
// socket with a datagram, where a goroutine per socket costs a park and a netpoller
// wake-up per datagram. Its sockets are its own (not Go's netpoller's) and
// non-blocking: Send and Recv never sleep. Wait is for one goroutine; Dial, Wake and
// Close for any.
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

// Dial opens a socket connected to addr (kstamp.DialSocket), watched under key (below
// 2^64-1) until its Close.
func (p *Poller) Dial(addr netip.AddrPort, key uint64) (*kstamp.Socket, error) {
	if key == wakeKey {
		return nil, fmt.Errorf("poller: socket key %d is reserved", key)
	}
	s, err := kstamp.DialSocket(addr)
	if err != nil {
		return nil, err
	}
	if err := p.add(s.FD(), key); err != nil {
		_ = s.Close()
		return nil, &net.OpError{Op: "dial", Net: "udp", Addr: net.UDPAddrFromAddrPort(addr), Err: err}
	}
	return s, nil
}

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
