package delayline

import (
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TUN is a TUN device read and written with raw syscalls (no Go poller: the line's
// reader and releaser each own a locked OS thread, and a poller hand-off would add
// wake-up latency). Read polls with a timeout when no packet is queued, so Close stops
// it within pollTimeoutMS.
type TUN struct {
	fd     int
	closed atomic.Bool
	pfd    [1]unix.PollFd // preallocated: the reader allocates nothing
}

const pollTimeoutMS = 200

// OpenTUN attaches to the TUN device name (created persistent by the netns package, or
// created here if absent) in the calling thread's network namespace, without packet
// information headers (IFF_NO_PI).
func OpenTUN(name string) (*TUN, error) {
	if len(name) >= unix.IFNAMSIZ {
		return nil, fmt.Errorf("TUN name %q too long", name)
	}
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	var req struct {
		name  [unix.IFNAMSIZ]byte
		flags uint16
		_     [22]byte
	}
	copy(req.name[:], name)
	req.flags = unix.IFF_TUN | unix.IFF_NO_PI
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(unix.TUNSETIFF), uintptr(unsafe.Pointer(&req))); e != 0 {
		unix.Close(fd)
		return nil, fmt.Errorf("TUNSETIFF %s: %w", name, e)
	}
	return &TUN{fd: fd}, nil
}

// ErrClosed is returned by Read and Write after Close.
var ErrClosed = errors.New("tun: closed")

// Read reads one packet, waiting for one if needed.
func (t *TUN) Read(b []byte) (int, error) {
	for {
		if t.closed.Load() {
			return 0, ErrClosed
		}
		n, err := unix.Read(t.fd, b)
		if err == nil {
			return n, nil
		}
		if err == unix.EINTR {
			continue
		}
		if err != unix.EAGAIN {
			return 0, fmt.Errorf("tun read: %w", err)
		}
		t.pfd[0] = unix.PollFd{Fd: int32(t.fd), Events: unix.POLLIN}
		if _, err := unix.Poll(t.pfd[:], pollTimeoutMS); err != nil && err != unix.EINTR {
			return 0, fmt.Errorf("tun poll: %w", err)
		}
	}
}

// Write writes one packet back into the kernel.
func (t *TUN) Write(b []byte) (int, error) {
	for {
		n, err := unix.Write(t.fd, b)
		if err == unix.EINTR {
			continue
		}
		return n, err
	}
}

// Close makes Read return ErrClosed; the descriptor is closed once.
func (t *TUN) Close() error {
	if t.closed.Swap(true) {
		return nil
	}
	// Closing while Read polls is safe: poll returns POLLNVAL/timeout, Read sees closed.
	return unix.Close(t.fd)
}
