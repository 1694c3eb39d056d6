// Package kstamp reads from sockets together with the kernel's receive timestamp
// (SO_TIMESTAMPNS, socket(7)): the moment a packet entered this host's network stack,
// before the reading process was scheduled to look at it. A measurement that ends "when
// the answer arrived" takes that instant from here, so a busy measuring process (many
// exchanges in flight on two cores) does not add its own wake-up and processing delay to
// every handshake and resolve time.
//
// The timestamps are CLOCK_REALTIME (what SO_TIMESTAMPNS reports); durations against a
// time.Now() taken on this host use the wall clock, so a clock step during one exchange
// would show in it (NTP slews, it does not step, in normal operation).
package kstamp

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sizeofTimespec is the size of the kernel's struct timespec on this platform.
const sizeofTimespec = unsafe.Sizeof(unix.Timespec{})

// oobSize holds one SCM_TIMESTAMPNS control message (a struct timespec) with headroom.
const oobSize = 128

// Enable turns on receive timestamps (SO_TIMESTAMPNS) for the socket behind rc. The
// first call in a process also makes sure the kernel is stamping packets (see
// keepStamping) before it returns.
func Enable(rc syscall.RawConn) error {
	keepStamping()
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
	}); err != nil {
		return err
	}
	return serr
}

// Recv reads once from the socket behind rc (honouring the connection's deadlines, like
// Read) and returns the bytes, the sender's address (datagram sockets) and the kernel
// receive time of the (last) packet the bytes came from; at is zero when the kernel gave
// none. A stream socket's orderly shutdown is io.EOF. rc is a net package socket's, which
// is non-blocking (recvmsg relies on it).
func Recv(rc syscall.RawConn, p []byte, stream bool) (n int, from unix.Sockaddr, at time.Time, err error) {
	return recv(rc, p, stream, true)
}

// recv is Recv; wantFrom: return the sender's address (else nil).
//
// The first recvmsg of a read whose data is still to arrive fails with EAGAIN; it
// cannot be skipped by waiting for readiness first: RawRead clears a readiness that
// arrived before it was called, so a datagram that came in between would go unnoticed.
// sendRecv avoids it where the read answers a send of its own.
func recv(rc syscall.RawConn, p []byte, stream, wantFrom bool) (n int, from unix.Sockaddr, at time.Time, err error) {
	r := recvs.Get().(*recvState)
	defer func() { r.p = nil; recvs.Put(r) }()
	r.p, r.wantFrom = p, wantFrom
	if err := rc.Read(r.call); err != nil {
		return 0, nil, time.Time{}, err
	}
	return r.result(p, stream, wantFrom)
}

// errSendBusy is sendRecv's word that the socket's send buffer is full (EAGAIN): nothing
// was sent and nothing read; the caller sends the blocking way.
var errSendBusy = errors.New("kstamp: send buffer full")

// sendRecv writes q to the connected datagram socket behind rc, then reads one
// datagram into p as recv does, and returns when q left (taken just before the send
// system call). The send happens inside the read, after RawRead has cleared the
// socket's old readiness: the answer's arrival is then always noticed, and the read
// waits for it at once instead of first trying a recvmsg that fails (EAGAIN) while the
// answer is on its way, one system call less per exchange. A failed send is returned
// as a write error with sent zero; errSendBusy when the send buffer was full.
func sendRecv(rc syscall.RawConn, q, p []byte) (sent time.Time, n int, at time.Time, err error) {
	r := recvs.Get().(*recvState)
	defer func() { r.p, r.send, r.sent = nil, nil, time.Time{}; recvs.Put(r) }()
	// The state keeps a copy of q: keeping q itself would move every caller's query
	// buffer to the heap.
	r.sendBuf = append(r.sendBuf[:0], q...)
	r.p, r.wantFrom, r.send = p, false, r.sendBuf
	if err := rc.Read(r.call); err != nil {
		return r.sent, 0, time.Time{}, err
	}
	if r.send != nil { // the send failed
		if errors.Is(r.err, unix.EAGAIN) || errors.Is(r.err, unix.EWOULDBLOCK) {
			return time.Time{}, 0, time.Time{}, errSendBusy
		}
		return time.Time{}, 0, time.Time{}, &net.OpError{Op: "write", Net: "udp", Err: os.NewSyscallError("write", r.err)}
	}
	n, _, at, err = r.result(p, false, false)
	return r.sent, n, at, err
}

// result is what one recv read, as recv returns it.
func (r *recvState) result(p []byte, stream, wantFrom bool) (n int, from unix.Sockaddr, at time.Time, err error) {
	if r.err != nil {
		return 0, nil, time.Time{}, &net.OpError{Op: "read", Net: "recvmsg", Err: r.err}
	}
	if wantFrom {
		from = sockaddr(&r.name)
	}
	if stream && r.n == 0 && len(p) > 0 {
		return 0, from, time.Time{}, io.EOF
	}
	return r.n, from, Parse(r.oob[:r.oobn]), nil
}

// recvState is one recv's syscall state, pooled with its call (a closure made per
// recv, capturing its results and control buffer, cost four allocations per read).
type recvState struct {
	oob      [oobSize]byte
	name     unix.RawSockaddrAny
	p        []byte
	wantFrom bool
	n, oobn  int
	err      error
	call     func(fd uintptr) bool
	// send, when not nil, is written before the first recvmsg (sendRecv); it is nil
	// again once sent, at sent.
	send    []byte
	sendBuf []byte
	sent    time.Time
}

var recvs = sync.Pool{New: func() any {
	r := new(recvState)
	r.call = r.syscall
	return r
}}

// syscall is one recvmsg for rawconn.Read: false (wait for readiness) when the socket
// has nothing yet.
func (r *recvState) syscall(fd uintptr) bool {
	if r.send != nil {
		r.sent = time.Now()
		if r.err = write(int(fd), r.send); r.err != nil {
			return true
		}
		r.send = nil
		return false // the answer is not here yet: wait for it
	}
	var name *unix.RawSockaddrAny
	if r.wantFrom {
		r.name = unix.RawSockaddrAny{} // no address (a stream socket's): no stale one
		name = &r.name
	}
	r.n, r.oobn, r.err = recvmsg(int(fd), r.p, r.oob[:], name)
	return !errors.Is(r.err, unix.EAGAIN) && !errors.Is(r.err, unix.EWOULDBLOCK)
}

// recvmsg is recvmsg(2) of one buffer with control data; name, when not nil, receives
// the sender's address. Unlike unix.Recvmsg it asks the kernel nothing more (that one
// looks up the socket's protocol with getsockopt for every IPv4/IPv6 sender address).
func recvmsg(fd int, p, oob []byte, name *unix.RawSockaddrAny) (n, oobn int, err error) {
	var iov unix.Iovec
	if len(p) > 0 {
		iov.Base = &p[0]
		iov.SetLen(len(p))
	}
	var msg unix.Msghdr
	if name != nil {
		msg.Name = (*byte)(unsafe.Pointer(name))
		msg.Namelen = unix.SizeofSockaddrAny
	}
	msg.Iov = &iov
	msg.SetIovlen(1)
	if len(oob) > 0 {
		msg.Control = &oob[0]
		msg.SetControllen(len(oob))
	}
	r, _, e := unix.RawSyscall(unix.SYS_RECVMSG, uintptr(fd), uintptr(unsafe.Pointer(&msg)), 0)
	if e != 0 {
		return 0, 0, e
	}
	return int(r), int(msg.Controllen), nil
}

// write is write(2) of all of p on a socket of Go's netpoller, which is non-blocking.
//
// This call and recvmsg's return at once: a non-blocking socket never sleeps in them.
// So they use RawSyscall, without the scheduler's bookkeeping for a call that may block
// (entersyscall and exitsyscall, 2 % of the CPU of a DoUDP load).
func write(fd int, p []byte) error {
	var ptr unsafe.Pointer
	if len(p) > 0 {
		ptr = unsafe.Pointer(&p[0])
	}
	_, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(ptr), uintptr(len(p)))
	if e != 0 {
		return e
	}
	return nil
}

// sockaddr converts an IPv4 or IPv6 sender address (nil for any other family).
func sockaddr(rsa *unix.RawSockaddrAny) unix.Sockaddr {
	switch rsa.Addr.Family {
	case unix.AF_INET:
		pp := (*unix.RawSockaddrInet4)(unsafe.Pointer(rsa))
		port := (*[2]byte)(unsafe.Pointer(&pp.Port))
		return &unix.SockaddrInet4{Port: int(port[0])<<8 | int(port[1]), Addr: pp.Addr}
	case unix.AF_INET6:
		pp := (*unix.RawSockaddrInet6)(unsafe.Pointer(rsa))
		port := (*[2]byte)(unsafe.Pointer(&pp.Port))
		return &unix.SockaddrInet6{Port: int(port[0])<<8 | int(port[1]), ZoneId: pp.Scope_id, Addr: pp.Addr}
	}
	return nil
}

// Parse returns the SCM_TIMESTAMPNS time in a recvmsg control buffer (zero if none).
// Malformed control data (in any of its messages) yields zero, never a panic. It
// allocates nothing.
func Parse(oob []byte) time.Time {
	var at time.Time
	found := false
	for len(oob) >= unix.CmsgLen(0) {
		h, data, rest, err := unix.ParseOneSocketControlMessage(oob)
		if err != nil {
			return time.Time{}
		}
		if !found && h.Level == unix.SOL_SOCKET && h.Type == unix.SCM_TIMESTAMPNS {
			at, found = timespec(data), true
		}
		oob = rest
	}
	return at
}

// timespec decodes a struct timespec (zero if short or not a valid time).
func timespec(data []byte) time.Time {
	var sec, nsec int64
	switch {
	case sizeofTimespec == 16 && len(data) >= 16:
		sec, nsec = int64(binary.NativeEndian.Uint64(data)), int64(binary.NativeEndian.Uint64(data[8:]))
	case sizeofTimespec == 8 && len(data) >= 8:
		sec, nsec = int64(int32(binary.NativeEndian.Uint32(data))), int64(int32(binary.NativeEndian.Uint32(data[4:])))
	default:
		return time.Time{}
	}
	if sec <= 0 || nsec < 0 || nsec >= 1e9 {
		return time.Time{}
	}
	return time.Unix(sec, nsec)
}

// maxLog bounds a Log: the arrivals of one exchange are a handful; a hostile peer that
// floods the socket only pushes old entries out.
const maxLog = 256

// MaxDatagrams bounds the long-header datagrams a Log keeps by checksum (see
// ArrivalOfDatagram): a QUIC handshake takes a handful; the first ones are kept, so a
// flood that follows a handshake cannot push the handshake's out.
const MaxDatagrams = 64

// Log remembers, for each read of a connection, when the read returned (user time) and
// when its packet reached the host (kernel time); the first write of the socket and the
// first write after Arm; and, for the first long-header QUIC datagrams read (RFC 9000
// §17.2), their payload checksum with their kernel time.
type Log struct {
	mu         sync.Mutex
	recs       []rec
	armed      bool
	firstWrite time.Time
	origin     time.Time // the socket's first write
	datagrams  []datagram
}

type rec struct{ user, kernel time.Time }

// datagram is a long-header datagram's CRC-32C (Castagnoli) over its UDP payload, the
// checksum quic-go's qlog gives each received long-header packet
// (datagram_payload_checksum), and its kernel receive time.
type datagram struct {
	sum    uint32
	kernel time.Time
}

// castagnoli is the CRC-32C table (quic-go's qlog.CalculateDatagramPayloadChecksum).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// DatagramChecksum is the checksum ArrivalOfDatagram matches: CRC-32C of the UDP payload.
func DatagramChecksum(p []byte) uint32 { return crc32.Checksum(p, castagnoli) }

// Received records a read that returned now with kernel time at (ignored when zero).
func (l *Log) Received(at time.Time) {
	if at.IsZero() {
		return
	}
	now := time.Now()
	l.mu.Lock()
	l.push(rec{user: now, kernel: at})
	l.mu.Unlock()
}

// ReceivedDatagram records the read of datagram p that returned now with kernel time at
// (ignored when zero), keeping the checksum of a long-header datagram (see
// ArrivalOfDatagram).
func (l *Log) ReceivedDatagram(p []byte, at time.Time) {
	if at.IsZero() {
		return
	}
	now := time.Now()
	var sum uint32
	long := len(p) > 0 && p[0]&0x80 != 0 // RFC 9000 §17.2: the header form bit
	if long {
		sum = DatagramChecksum(p)
	}
	l.mu.Lock()
	l.push(rec{user: now, kernel: at})
	if long && len(l.datagrams) < MaxDatagrams {
		l.datagrams = append(l.datagrams, datagram{sum: sum, kernel: at})
	}
	l.mu.Unlock()
}

func (l *Log) push(r rec) {
	if len(l.recs) == maxLog {
		copy(l.recs, l.recs[maxLog/2:])
		l.recs = l.recs[:maxLog/2]
	}
	l.recs = append(l.recs, r)
}

// ArrivalOfDatagram returns the kernel receive time of the first long-header datagram
// read whose payload checksum is sum (DatagramChecksum) and that arrived at or after
// since: the datagram a QUIC stack's qlog names by its checksum (a duplicate that arrived
// later is not the one that counted). It reports false when no such datagram was kept.
func (l *Log) ArrivalOfDatagram(sum uint32, since time.Time) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, d := range l.datagrams {
		if d.sum == sum && !d.kernel.Before(since) {
			return d.kernel, true
		}
	}
	return time.Time{}, false
}

// DatagramArrival is a long-header datagram the Log kept: its CRC-32C
// (DatagramChecksum) and its kernel receive time.
type DatagramArrival struct {
	Sum uint32
	At  time.Time
}

// Datagrams returns the long-header datagrams kept (the first MaxDatagrams read), in
// the order they were read.
func (l *Log) Datagrams() []DatagramArrival {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]DatagramArrival, len(l.datagrams))
	for i, d := range l.datagrams {
		out[i] = DatagramArrival{Sum: d.sum, At: d.kernel}
	}
	return out
}

// Arrival returns the kernel receive time of the latest read that returned at or before
// t: when an exchange that completed at t (as the process saw it) really got its last
// packet. It reports false when no stamped read precedes t, or when the stamp is not
// plausible (after t, or before since: the exchange's start).
func (l *Log) Arrival(since, t time.Time) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.recs) - 1; i >= 0; i-- {
		r := l.recs[i]
		if r.user.After(t) {
			continue
		}
		k := r.kernel
		if k.After(t) || k.Before(since) {
			return time.Time{}, false
		}
		return k, true
	}
	return time.Time{}, false
}

// Arm starts watching for the next write (see Sent).
func (l *Log) Arm() {
	l.mu.Lock()
	l.armed, l.firstWrite = true, time.Time{}
	l.mu.Unlock()
}

// Wrote records a write about to be issued (the first after Arm counts, and the
// socket's first of all: see FirstSent).
func (l *Log) Wrote() {
	now := time.Now()
	l.mu.Lock()
	if l.armed && l.firstWrite.IsZero() {
		l.firstWrite = now
	}
	if l.origin.IsZero() {
		l.origin = now
	}
	l.mu.Unlock()
}

// FirstSent returns the time of the socket's first write (taken right before the
// syscall), whatever Arm did since, or false if nothing was written: a QUIC
// connection's first Initial on the connection's own socket.
func (l *Log) FirstSent() (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.origin, !l.origin.IsZero()
}

// Sent returns the time of the first write since Arm (taken right before the syscall),
// or false if nothing was written since.
func (l *Log) Sent() (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.firstWrite, !l.firstWrite.IsZero()
}

// SentAt returns the first write's time since Arm, or fallback if nothing was written.
func (l *Log) SentAt(fallback time.Time) time.Time {
	if t, ok := l.Sent(); ok {
		return t
	}
	return fallback
}

// ArrivedBy returns Arrival(since, t), or t itself when there is no plausible stamp.
func (l *Log) ArrivedBy(since, t time.Time) time.Time {
	if k, ok := l.Arrival(since, t); ok {
		return k
	}
	return t
}

// The kernel stamps packets on arrival only while some socket of the system asks for
// timestamps, and it switches stamping on through a deferred work item
// (net_enable_timestamp, net/core/dev.c) when the first socket asks and off when the
// last one closes. A packet that arrives before the work item ran is not stamped: a UDP
// read then gets its own read time as the stamp, and a TCP read gets no stamp at all. A
// process that opens and closes one socket per exchange would hit that window at every
// exchange made while no other socket held stamping on.
//
// keepStamping therefore holds one timestamping UDP socket on loopback open for the
// life of the process, so stamping stays on, and on the first call waits (at most
// keepWait) until a datagram it sends to itself comes back stamped before the read that
// returned it, which shows the work item has run. Without a usable loopback it only
// holds the socket.
var (
	keepOnce sync.Once
	keeper   *net.UDPConn //nolint:unused // never read: holding it keeps the socket (and stamping) alive
)

// keepWait bounds the first call's wait for stamping to take effect (the work item
// normally runs within microseconds to milliseconds).
const keepWait = 2 * time.Second

func keepStamping() {
	keepOnce.Do(func() {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			c, err = net.ListenUDP("udp", nil)
			if err != nil {
				return
			}
		}
		rc, err := c.SyscallConn()
		if err != nil {
			c.Close()
			return
		}
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
		}); err != nil || serr != nil {
			c.Close()
			return
		}
		keeper = c
		self, ok := c.LocalAddr().(*net.UDPAddr)
		if !ok || !self.IP.IsLoopback() {
			return
		}
		waitStamping(c, rc, self)
	})
}

// waitStamping sends datagrams to c's own address until one is read back with a kernel
// stamp taken before the read began, or keepWait has passed.
func waitStamping(c *net.UDPConn, rc syscall.RawConn, self *net.UDPAddr) {
	end := time.Now().Add(keepWait)
	buf := make([]byte, 1)
	for time.Now().Before(end) {
		if _, err := c.WriteToUDP([]byte{0}, self); err != nil {
			return
		}
		before := time.Now()
		if err := c.SetReadDeadline(end); err != nil {
			return
		}
		_, _, at, err := Recv(rc, buf, false)
		if err != nil {
			return
		}
		if !at.IsZero() && at.Before(before) {
			_ = c.SetReadDeadline(time.Time{})
			return
		}
	}
}
