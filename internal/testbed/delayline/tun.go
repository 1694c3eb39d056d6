package delayline

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TUN is a multi-queue TUN device read and written with raw, non-blocking syscalls (no
// Go poller: each queue's worker owns a locked OS thread and sleeps in ppoll itself).
// Interrupt wakes every sleeping worker through one eventfd.
type TUN struct {
	queues []*tunQueue
	efd    int // eventfd: readable once interrupted
	closed atomic.Bool
}

type tunQueue struct {
	fd, efd int
	pfd     [2]unix.PollFd // preallocated: the worker allocates nothing
	ts      unix.Timespec
}

// OpenTUN attaches queues queues to the TUN device name (created persistent by the
// netns package with multi_queue, or created here if absent) in the calling thread's
// network namespace, without packet information headers (IFF_NO_PI). With queues > 1
// the device must be multi-queue (IFF_MULTI_QUEUE); one created without it (by an older
// testnet) can only be attached with one queue (Serve falls back to that with a warning).
func OpenTUN(name string, queues int) (*TUN, error) {
	if len(name) >= unix.IFNAMSIZ {
		return nil, fmt.Errorf("TUN name %q too long", name)
	}
	queues = max(queues, 1)
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	t := &TUN{efd: efd}
	for i := 0; i < queues; i++ {
		fd, err := attach(name, true)
		if i == 0 && queues == 1 && errors.Is(err, unix.EINVAL) {
			fd, err = attach(name, false) // a single-queue device
		}
		if err != nil {
			t.Close()
			return nil, err
		}
		t.queues = append(t.queues, &tunQueue{fd: fd, efd: efd})
	}
	return t, nil
}

func attach(name string, multi bool) (int, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return -1, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	var req struct {
		name  [unix.IFNAMSIZ]byte
		flags uint16
		_     [22]byte
	}
	copy(req.name[:], name)
	req.flags = unix.IFF_TUN | unix.IFF_NO_PI
	if multi {
		req.flags |= unix.IFF_MULTI_QUEUE
	}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(unix.TUNSETIFF), uintptr(unsafe.Pointer(&req))); e != 0 {
		unix.Close(fd)
		return -1, fmt.Errorf("TUNSETIFF %s (multi-queue %v): %w", name, multi, e)
	}
	return fd, nil
}

// Queues implements Device.
func (t *TUN) Queues() []Queue {
	qs := make([]Queue, len(t.queues))
	for i, q := range t.queues {
		qs[i] = q
	}
	return qs
}

// Interrupt implements Device: every Wait returns ErrClosed from now on.
func (t *TUN) Interrupt() {
	one := [8]byte{1}
	_, _ = unix.Write(t.efd, one[:])
}

// Close implements Device: it interrupts and closes every descriptor (call it once the
// workers stopped).
func (t *TUN) Close() error {
	if t.closed.Swap(true) {
		return nil
	}
	t.Interrupt()
	var errs []error
	for _, q := range t.queues {
		errs = append(errs, unix.Close(q.fd))
	}
	errs = append(errs, unix.Close(t.efd))
	return errors.Join(errs...)
}

// The queue's syscalls are raw (RawSyscall: no entersyscall/exitsyscall). A worker's
// thread is locked and real-time; with ordinary syscalls the Go runtime hands its P to
// another thread whenever ppoll sleeps longer than 20 µs and takes one back on return,
// which woke a second thread per wake-up and showed as 9.5% of the line's CPU in
// exitsyscall (perf, 20k packets/s). Read and Write never block (O_NONBLOCK); ppoll
// does, and keeps the P meanwhile: Serve runs with spare Ps (minProcs) and no GC, and a
// preemption signal ends the ppoll with EINTR.

func (q *tunQueue) Read(b []byte) (int, error) {
	for {
		n, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(q.fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)))
		switch e {
		case 0:
			return int(n), nil
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return 0, ErrAgain
		case unix.EBADF:
			return 0, ErrClosed
		}
		return 0, fmt.Errorf("tun read: %w", e)
	}
}

func (q *tunQueue) Write(b []byte) (int, error) {
	for {
		n, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(q.fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)))
		switch e {
		case 0:
			return int(n), nil
		case unix.EINTR:
			continue
		}
		return 0, fmt.Errorf("tun write: %w", e)
	}
}

func (q *tunQueue) Wait(timeout time.Duration, watch bool) (bool, error) {
	q.pfd[0] = unix.PollFd{Fd: int32(q.efd), Events: unix.POLLIN}
	n := 1
	if watch {
		q.pfd[1] = unix.PollFd{Fd: int32(q.fd), Events: unix.POLLIN}
		n = 2
	}
	var ts *unix.Timespec
	if timeout >= 0 {
		q.ts = unix.NsecToTimespec(int64(timeout))
		ts = &q.ts
	}
	_, _, e := unix.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&q.pfd[0])), uintptr(n), uintptr(unsafe.Pointer(ts)), 0, 0, 0)
	if e != 0 && e != unix.EINTR {
		return false, fmt.Errorf("tun ppoll: %w", e)
	}
	if e == unix.EINTR {
		q.pfd[0].Revents, q.pfd[1].Revents = 0, 0
	}
	if q.pfd[0].Revents != 0 {
		return false, ErrClosed
	}
	return n == 2 && q.pfd[1].Revents&unix.POLLIN != 0, nil
}
