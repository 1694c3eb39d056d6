package drive

import (
	"context"
	"errors"
	"net"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/doqscan/doqscan/internal/kstamp"
	"github.com/doqscan/doqscan/internal/measure"
)

const (
	// udpBatch bounds the datagrams of one recvmmsg of a DoUDP pipeline (its sends are
	// bursts of at most measure.PipeBurst).
	udpBatch = measure.PipeBurst
	// udpPipeBuf is the receive buffer per datagram of a DoUDP session with several
	// queries outstanding: more than the EDNS size its queries advertise
	// (dnsmsg.EDNSBufferSize), so an answer cut to it is a bad response.
	udpPipeBuf = 4096
)

// udpPipeline runs a DoUDP session's queries with several outstanding on its socket
// (measure.Session.PipelineOver): a burst's queries in one sendmmsg, every answer
// waiting in one recvmmsg, each with its kernel receive time.
func udpPipeline(ctx context.Context, s *measure.Session, pl measure.Pipelining) []measure.Query {
	conn := s.PacketConn()
	n := min(udpBatch, max(pl.Streams, 1))
	var wb, rb Batch
	backing := make([]byte, n*udpPipeBuf)
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = backing[i*udpPipeBuf : (i+1)*udpPipeBuf : (i+1)*udpPipeBuf]
	}
	dgs := make([]Datagram, n)
	msgs := make([]measure.Message, n)
	return s.PipelineOver(ctx, pl, measure.PipeIO{
		Write: func(m [][]byte) (int, error) { return WriteBatch(conn, &wb, m) },
		Read: func() ([]measure.Message, error) {
			k, err := ReadBatch(conn, &rb, bufs, dgs)
			if err != nil {
				return nil, err
			}
			for i, d := range dgs[:k] {
				msgs[i] = measure.Message{Raw: bufs[i][:d.N], At: d.At, Truncated: d.Truncated}
			}
			return msgs[:k], nil
		},
		SetReadDeadline: conn.SetReadDeadline,
	})
}

// mmsghdr is the kernel's struct mmsghdr (sendmmsg(2), recvmmsg(2)).
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
}

// Datagram is one datagram of ReadBatch: its length in its buffer, its kernel receive
// time (zero if the kernel gave none), and whether it was longer than its buffer (cut).
type Datagram struct {
	N         int
	At        time.Time
	Truncated bool
}

// Batch holds the buffers of one socket's batched reads and writes (reused: one
// Batch per reading or writing goroutine).
type Batch struct {
	hdrs []mmsghdr
	iovs []unix.Iovec
	oob  []byte
	// The syscall of the batch in progress, made once per Batch (a closure made per
	// call, capturing its results, cost three allocations per read or write): n
	// datagrams to read or write, done of them so far, and the syscall's error.
	call    func(fd uintptr) bool
	read    bool
	n, done int
	err     error
}

// syscall runs b's recvmmsg (read) or sendmmsg (write) on fd for rawconn.Read/Write: it
// reports whether the operation is over (false: the socket would block, wait for it).
func (b *Batch) syscall(fd uintptr) bool {
	if b.read {
		r, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&b.hdrs[0])), uintptr(b.n), unix.MSG_DONTWAIT, 0, 0)
		if e != 0 {
			b.err = e
			return !errors.Is(e, unix.EAGAIN) && !errors.Is(e, unix.EWOULDBLOCK)
		}
		b.done, b.err = int(r), nil
		return true
	}
	for b.done < b.n {
		r, _, e := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&b.hdrs[b.done])), uintptr(b.n-b.done), unix.MSG_DONTWAIT, 0, 0)
		if e != 0 {
			if errors.Is(e, unix.EAGAIN) || errors.Is(e, unix.EWOULDBLOCK) {
				return false
			}
			if errors.Is(e, unix.EINTR) {
				continue
			}
			b.err = e
			return true
		}
		b.done += int(r)
	}
	return true
}

// start readies b for one read or write of n datagrams.
func (b *Batch) start(read bool, n int) {
	if b.call == nil {
		b.call = b.syscall
	}
	b.read, b.n, b.done, b.err = read, n, 0, nil
}

func (b *Batch) grow(n int, oob bool) {
	if len(b.hdrs) < n {
		b.hdrs, b.iovs = make([]mmsghdr, n), make([]unix.Iovec, n)
	}
	if oob && len(b.oob) < n*oobSize {
		b.oob = make([]byte, n*oobSize)
	}
}

// oobSize holds one SCM_TIMESTAMPNS control message (a struct timespec) with headroom,
// as kstamp's reads do.
const oobSize = 128

// ReadBatch reads at least one and at most len(bufs) datagrams of c, a connected
// socket, in one recvmmsg(2) (waiting, honouring the read deadline, until one is there)
// and describes each in out (len(out) >= len(bufs)), its kernel receive time included
// (so c.Log is left alone).
func ReadBatch(c *kstamp.PacketConn, b *Batch, bufs [][]byte, out []Datagram) (int, error) {
	n := min(len(bufs), len(out))
	if n == 0 {
		return 0, nil
	}
	b.grow(n, true)
	for i := range n {
		h := &b.hdrs[i]
		*h = mmsghdr{}
		b.iovs[i] = unix.Iovec{}
		if len(bufs[i]) > 0 {
			b.iovs[i].Base = &bufs[i][0]
			b.iovs[i].SetLen(len(bufs[i]))
		}
		h.hdr.Iov = &b.iovs[i]
		h.hdr.SetIovlen(1)
		h.hdr.Control = &b.oob[i*oobSize]
		h.hdr.SetControllen(oobSize)
	}
	b.start(true, n)
	rc, _ := c.SyscallConn()
	if err := rc.Read(b.call); err != nil {
		return 0, err
	}
	if b.err != nil {
		return 0, &net.OpError{Op: "read", Net: "recvmmsg", Err: b.err}
	}
	got := b.done
	for i := range got {
		h := &b.hdrs[i]
		at := kstamp.Parse(b.oob[i*oobSize : i*oobSize+int(h.hdr.Controllen)])
		out[i] = Datagram{N: int(h.len), At: at, Truncated: h.hdr.Flags&unix.MSG_TRUNC != 0}
		if out[i].N > len(bufs[i]) {
			out[i].N = len(bufs[i])
		}
	}
	return got, nil
}

// WriteBatch sends msgs on c, a connected socket, as many as possible per sendmmsg(2),
// until all are sent or an error; it returns how many were sent. c.Log notes the write.
func WriteBatch(c *kstamp.PacketConn, b *Batch, msgs [][]byte) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	c.Log.Wrote()
	b.grow(len(msgs), false)
	for i, m := range msgs {
		h := &b.hdrs[i]
		*h = mmsghdr{}
		b.iovs[i] = unix.Iovec{}
		if len(m) > 0 {
			b.iovs[i].Base = &m[0]
			b.iovs[i].SetLen(len(m))
		}
		h.hdr.Iov = &b.iovs[i]
		h.hdr.SetIovlen(1)
	}
	b.start(false, len(msgs))
	rc, _ := c.SyscallConn()
	if err := rc.Write(b.call); err != nil {
		return b.done, err
	}
	if b.err != nil {
		return b.done, &net.OpError{Op: "write", Net: "sendmmsg", Err: b.err}
	}
	return b.done, nil
}
