package measure

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/doqscan/doqscan/internal/dnsmsg"
	"github.com/doqscan/doqscan/internal/kstamp"
)

// tcpiOptSynData is TCPI_OPT_SYN_DATA of linux/tcp.h: our SYN carried data that the
// server acknowledged (TCP Fast Open, RFC 7413 §4.2).
const tcpiOptSynData = 0x20

// timedConn wraps a connection with a kstamp.Log: the first Write after Log.Arm (the
// moment the first packet of a query leaves, taken right before the syscall) and, for a
// kernel-timestamped TCP connection, when what was read arrived. Several timedConns may
// share one Log (DoT: the TLS layer's writes and the TCP connection's reads).
type timedConn struct {
	net.Conn
	log *kstamp.Log
}

func (c *timedConn) Write(b []byte) (int, error) {
	c.log.Wrote()
	return c.Conn.Write(b)
}

// dialTCP connects and times the 3-way handshake: the kernel's own first RTT sample
// (SYN sent to SYN-ACK received, tcpi_rtt) when the handshake had no retransmission,
// else from just before the connect(2) syscall (net.Dialer.Control runs between
// socket(2) and connect(2)) to the moment the netpoller reports the socket writable.
// The connection's reads are kernel-timestamped (internal/kstamp).
func dialTCP(ctx context.Context, req *Request) (c *timedConn, start time.Time, hs time.Duration, err error) {
	var t0 time.Time
	d := net.Dialer{
		Control: func(network, address string, rc syscall.RawConn) error {
			var serr error
			if req.FastOpen {
				if cerr := rc.Control(func(fd uintptr) {
					serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_FASTOPEN_CONNECT, 1)
				}); cerr != nil {
					return cerr
				}
			}
			t0 = time.Now()
			return serr
		},
	}
	conn, err := d.DialContext(ctx, "tcp", req.Addr.String())
	t1 := time.Now()
	if t0.IsZero() {
		t0 = t1
	}
	if err != nil {
		return nil, t0, 0, err
	}
	hs = t1.Sub(t0)
	tcp, ok := conn.(*net.TCPConn)
	if !ok {
		return &timedConn{Conn: conn, log: &kstamp.Log{}}, t0, hs, nil
	}
	if rtt, ok := kstamp.HandshakeRTT(tcp); ok && rtt <= hs {
		hs = rtt
	}
	kc, err := kstamp.NewConn(tcp)
	if err != nil { // no timestamps: user-space times only
		return &timedConn{Conn: conn, log: &kstamp.Log{}}, t0, hs, nil
	}
	return &timedConn{Conn: kc, log: &kc.Log}, t0, hs, nil
}

// tfoUsed reports whether the kernel says our SYN carried data the server accepted.
func tfoUsed(c net.Conn) *bool {
	var tc *net.TCPConn
	switch v := c.(type) {
	case *net.TCPConn:
		tc = v
	case *kstamp.Conn:
		tc = v.TCPConn
	default:
		return nil
	}
	info, ok := kstamp.TCPInfo(tc)
	if !ok {
		return nil
	}
	return boolp(info.Options&tcpiOptSynData != 0)
}

// tcpExchange sends one length-prefixed DNS query (RFC 1035 §4.2.2) and reads the
// response, timing from the first write to the complete valid response.
func tcpExchange(ctx context.Context, c *timedConn, q dnsmsg.Query, seq int) Query {
	out := Query{Seq: seq, KeepaliveTimeout: -1}
	msg, err := dnsmsg.Build(q)
	if err != nil {
		out.Status, out.Err = StatusError, err
		return out
	}
	buf := make([]byte, 2+len(msg))
	binary.BigEndian.PutUint16(buf, uint16(len(msg)))
	copy(buf[2:], msg)
	c.log.Arm()
	before := time.Now()
	if _, err := c.Write(buf); err != nil {
		out.StartedAt = before
		out.Status, out.Err = Failure(ctx, StepAnswer, fmt.Errorf("write query: %w", err))
		return out
	}
	out.StartedAt = c.log.SentAt(before)
	raw, err := readTCPMessage(c)
	done := c.log.ArrivedBy(out.StartedAt, time.Now())
	if err != nil {
		out.Status, out.Err = Failure(ctx, StepAnswer, err)
		return out
	}
	return CheckAnswer(out, q, raw, done)
}

// tcpSession is the session of c (DoTCP, DoT): one query after another, or pipelined,
// answers matched by ID in any order (RFC 7766 §6.2.1.1). c's log is that of the
// kernel-timestamped TCP connection under it.
func tcpSession(req *Request, c *timedConn) *Session {
	return &Session{req: req,
		ex: func(ctx context.Context, seq int, q dnsmsg.Query, _ bool) Query {
			return tcpExchange(ctx, c, dnsmsg.Query{Name: q.Name, Type: q.Type, ID: NewID(), TCPKeepalive: req.TCPKeepalive, RcodeOnly: q.RcodeOnly}, seq)
		},
		pipe: func(ctx context.Context, p Pipelining) []Query {
			return tcpPipeline(ctx, p, req.timeout(), c, req.TCPKeepalive)
		},
	}
}

// readTCPMessage reads one 2-byte length-prefixed message.
func readTCPMessage(r io.Reader) ([]byte, error) {
	var l [2]byte
	if n, err := io.ReadFull(r, l[:]); err != nil {
		if n == 0 && errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("read length: %w", errClosedEarly)
		}
		return nil, fmt.Errorf("read length: %w", err)
	}
	n := int(binary.BigEndian.Uint16(l[:]))
	if n < dnsHeaderLen {
		return nil, fmt.Errorf("%w: length %d", errBadLength, n)
	}
	msg := make([]byte, n)
	if _, err := io.ReadFull(r, msg); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("%w: announced %d bytes: %v", errBadLength, n, err)
		}
		return nil, fmt.Errorf("read message: %w", err)
	}
	return msg, nil
}

// dnsHeaderLen is the fixed DNS header size (RFC 1035 §4.1.1).
const dnsHeaderLen = 12

// CheckAnswer validates raw against q and fills the query's outcome (q.RcodeOnly: on
// the raw bytes, dnsmsg.Check; Answers stays empty, KeepaliveTimeout -1).
func CheckAnswer(out Query, q dnsmsg.Query, raw []byte, done time.Time) Query {
	if q.RcodeOnly {
		rcode, err := dnsmsg.Check(q, raw)
		if err != nil {
			out.Status, out.Err = StatusBadResponse, err
			return out
		}
		out.Resolve = done.Sub(out.StartedAt)
		out.Status, out.Rcode = StatusOK, rcode
		return out
	}
	resp, err := dnsmsg.Validate(q, raw)
	if err != nil {
		out.Status, out.Err = StatusBadResponse, err
		return out
	}
	out.Resolve = done.Sub(out.StartedAt)
	out.Status = StatusOK
	out.Rcode, out.Answers, out.KeepaliveTimeout = resp.Rcode, resp.Answers, resp.KeepaliveTimeout
	return out
}

// NewID returns a random DNS message ID (RFC 5452 §9.2).
func NewID() uint16 {
	var b [2]byte
	randRead(b[:])
	return binary.BigEndian.Uint16(b[:])
}
