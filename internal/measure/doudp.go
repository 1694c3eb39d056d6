package measure

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/doqscan/doqscan/internal/dnsmsg"
	"github.com/doqscan/doqscan/internal/kstamp"
)

// MaxUDPResponse bounds a UDP read (RFC 6891 §6.2.5 allows up to 65535).
const MaxUDPResponse = 65535

// udpBufs recycles the receive buffers of udpExchange: allocating and zeroing 64 KiB
// per query was the largest CPU cost of a DoUDP load (dnsbench). Nothing of a buffer
// is kept after udpExchange returns (CheckAnswer copies what it keeps).
var udpBufs = sync.Pool{New: func() any { b := make([]byte, MaxUDPResponse); return &b }}

// measureUDP is DNS over UDP (RFC 1035 §4.2.1): no session, one datagram each way.
func measureUDP(ctx context.Context, req *Request, res *Result, c *client) *Result {
	res.StartedAt = time.Now()
	var d net.Dialer
	raw, err := d.DialContext(ctx, "udp", req.Addr.String()) // a fresh random source port
	if err != nil {
		return res.fail(ctx, err)
	}
	defer raw.Close()
	res.Local = AddrPortOf(raw.LocalAddr())
	conn, err := kstamp.NewPacketConn(raw.(*net.UDPConn))
	if err != nil {
		return res.fail(ctx, fmt.Errorf("receive timestamps: %w", err))
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	res.Queries = c.drive(ctx, &Session{req: req,
		ex: func(ctx context.Context, seq int, q dnsmsg.Query, _ bool) Query {
			return udpExchange(ctx, conn, dnsmsg.Query{Name: q.Name, Type: q.Type, ID: NewID(), RcodeOnly: q.RcodeOnly}, seq)
		},
		udp: conn,
	})
	return res.finish()
}

// udpExchange sends q and waits for its answer: resolve time from just before the send
// to the answer's arrival at the host (kernel timestamp; the read's return if the kernel
// gave none).
func udpExchange(ctx context.Context, conn *kstamp.PacketConn, q dnsmsg.Query, seq int) Query {
	out := Query{Seq: seq, KeepaliveTimeout: -1}
	msg, err := dnsmsg.Build(q)
	if err != nil {
		out.Status, out.Err = StatusError, err
		return out
	}
	bp := udpBufs.Get().(*[]byte)
	defer udpBufs.Put(bp)
	buf := *bp
	var lastBad error
	for first := true; ; first = false {
		var n int
		var at time.Time
		if first { // send, then read: one system call less than Write and ReadStamped
			out.StartedAt, n, at, err = conn.Exchange(msg, buf)
			if out.StartedAt.IsZero() {
				out.StartedAt = time.Now()
				out.Status, out.Err = Failure(ctx, StepAnswer, fmt.Errorf("send query: %w", err))
				return out
			}
		} else {
			n, at, err = conn.ReadStamped(buf)
		}
		if err != nil {
			out.Status, out.Err = ReadFailure(ctx, lastBad, err)
			return out
		}
		r := CheckAnswer(out, q, buf[:n], Arrival(at, out.StartedAt))
		if r.Status == StatusOK {
			return r
		}
		// A datagram that is not our answer (wrong ID or garbage) may be an off-path
		// injection (RFC 5452 §9.1): keep listening until the deadline.
		lastBad = r.Err
		if !errors.Is(r.Err, dnsmsg.ErrBadResponse) {
			return r
		}
	}
}

// Arrival is an answer's arrival time: the kernel's stamp at, else the clock now (no
// stamp, or one before the send at sent: the clock was stepped back).
func Arrival(at, sent time.Time) time.Time {
	if at.IsZero() || at.Before(sent) {
		return time.Now()
	}
	return at
}

// ReadFailure classifies a read for an answer that failed with err: once the query's
// context is done it is a timeout, or a bad response if only datagrams that were not
// the answer came (lastBad, the last of them).
func ReadFailure(ctx context.Context, lastBad, err error) (Status, error) {
	if ctx.Err() != nil {
		if lastBad != nil {
			return StatusBadResponse, lastBad
		}
		err = fmt.Errorf("%w: %v", context.DeadlineExceeded, err)
	}
	return Failure(ctx, StepAnswer, err)
}
