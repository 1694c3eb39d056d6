package simquic

import (
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/ipv4"
)

// The demultiplexer: one wildcard UDP socket per port receives the datagrams for every
// address; IP_PKTINFO tells which address each was sent to, and the population says which
// behaviour answers it. Well-behaved QUIC behaviours get one quic-go Transport per distinct
// profile (ALPNs, versions, Retry, token mode, certificate, SNI, DoQ behaviour), each
// reading from a vconn that the demultiplexer feeds, so that Retry, token lifetime and
// versions, which quic-go only configures per Transport, can differ per address while one
// socket serves them all. Writes go straight to the shared socket with quic-go's own
// IP_PKTINFO control message, so every reply leaves from the address it answers for.

const (
	oobSize       = 256  // room for IP_PKTINFO and IP_TOS control messages
	maxDatagram   = 1500 // the testbed's veth MTU; larger datagrams are truncated and dropped by quic-go
	vconnQueueLen = 8192 // datagrams buffered per Transport before the demultiplexer drops
	// socketBuffer is the receive/send buffer of each shared socket: a ZMap sweep of the
	// /16 (65,536 probes of 1,200+ bytes, ~2.3 KB of kernel memory each) may arrive faster
	// than a starved demultiplexer reads; 160 MiB holds a whole sweep. The memory is only
	// used while datagrams wait.
	socketBuffer = 160 << 20
)

type datagram struct {
	data []byte
	oob  []byte
	src  *net.UDPAddr
}

// vconn is the net.PacketConn one quic-go Transport reads from. It implements quic-go's
// OOBCapablePacketConn (so quic-go keeps using IP_PKTINFO for its replies) and batchConn
// (so quic-go reads from the queue instead of unwrapping the shared socket's descriptor).
type vconn struct {
	real   *net.UDPConn
	queue  chan datagram
	closed chan struct{}
	once   sync.Once

	mu       sync.Mutex
	deadline time.Time
	wake     chan struct{} // closed and replaced when the deadline changes
}

func newVconn(real *net.UDPConn) *vconn {
	return &vconn{real: real, queue: make(chan datagram, vconnQueueLen), closed: make(chan struct{}),
		wake: make(chan struct{})}
}

// deliver queues a datagram; false if the queue is full (the datagram is dropped, as a
// full socket buffer would).
func (c *vconn) deliver(d datagram) bool {
	select {
	case <-c.closed:
		return false
	case c.queue <- d:
		return true
	default:
		return false
	}
}

func (c *vconn) ReadBatch(ms []ipv4.Message, _ int) (int, error) {
	for {
		c.mu.Lock()
		dl, wake := c.deadline, c.wake
		c.mu.Unlock()
		var timer *time.Timer
		var expired <-chan time.Time
		if !dl.IsZero() {
			d := time.Until(dl)
			if d <= 0 {
				return 0, os.ErrDeadlineExceeded
			}
			timer = time.NewTimer(d)
			expired = timer.C
		}
		stop := func() {
			if timer != nil {
				timer.Stop()
			}
		}
		select {
		case <-c.closed:
			stop()
			return 0, net.ErrClosed
		case <-wake:
			stop()
			continue
		case <-expired:
			return 0, os.ErrDeadlineExceeded
		case d := <-c.queue:
			stop()
			m := &ms[0]
			m.N = copy(m.Buffers[0], d.data)
			m.NN = copy(m.OOB, d.oob)
			m.Addr = d.src
			m.Flags = 0
			return 1, nil
		}
	}
}

func (c *vconn) ReadMsgUDP(b, oob []byte) (n, oobn, flags int, addr *net.UDPAddr, err error) {
	ms := []ipv4.Message{{Buffers: [][]byte{b}, OOB: oob}}
	if _, err := c.ReadBatch(ms, 0); err != nil {
		return 0, 0, 0, nil, err
	}
	return ms[0].N, ms[0].NN, 0, ms[0].Addr.(*net.UDPAddr), nil
}

func (c *vconn) ReadFrom(b []byte) (int, net.Addr, error) {
	n, _, _, a, err := c.ReadMsgUDP(b, nil)
	return n, a, err
}

func (c *vconn) WriteMsgUDP(b, oob []byte, addr *net.UDPAddr) (n, oobn int, err error) {
	return c.real.WriteMsgUDP(b, oob, addr)
}

func (c *vconn) WriteTo(b []byte, addr net.Addr) (int, error) { return c.real.WriteTo(b, addr) }

func (c *vconn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}

func (c *vconn) LocalAddr() net.Addr { return c.real.LocalAddr() }

func (c *vconn) SetDeadline(t time.Time) error { return c.SetReadDeadline(t) }

func (c *vconn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	close(c.wake)
	c.wake = make(chan struct{})
	c.mu.Unlock()
	return nil
}

func (c *vconn) SetWriteDeadline(t time.Time) error { return nil }

// SyscallConn exposes the shared socket: quic-go sets its options (IP_PKTINFO, IP_RECVTOS,
// DF, GSO probing) there, idempotently for every Transport.
func (c *vconn) SyscallConn() (syscall.RawConn, error) { return c.real.SyscallConn() }

func (c *vconn) SetReadBuffer(n int) error  { return c.real.SetReadBuffer(n) }
func (c *vconn) SetWriteBuffer(n int) error { return c.real.SetWriteBuffer(n) }
