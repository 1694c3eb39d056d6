package measure

import (
	"context"
	"time"

	"github.com/doqscan/doqscan/internal/kstamp"
)

// measureTCP is DNS over TCP (RFC 1035 §4.2.2, RFC 7766): handshake = the TCP 3-way
// handshake (1 RTT).
func measureTCP(ctx context.Context, req *Request, res *Result, cl *client) *Result {
	c, start, hs, err := dialTCP(ctx, req)
	res.StartedAt = start
	if err != nil {
		return res.fail(ctx, err)
	}
	defer c.Close()
	res.Handshake, res.HasHandshake, res.TCPHandshake = hs, true, hs
	res.Local = AddrPortOf(c.LocalAddr())
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	defer stop()
	res.Queries = cl.drive(ctx, tcpSession(req, c))
	if req.FastOpen {
		res.TFO = tfoUsed(c.Conn)
		// With TCP_FASTOPEN_CONNECT, connect(2) returns before the SYN leaves (it goes
		// with the first write): the handshake is the kernel's SYN/SYN-ACK sample, taken
		// now that the exchange is over, or unknown.
		res.Handshake, res.HasHandshake, res.TCPHandshake = 0, false, 0
		if kc, ok := c.Conn.(*kstamp.Conn); ok {
			if rtt, ok := kstamp.HandshakeRTT(kc.TCPConn); ok {
				res.Handshake, res.HasHandshake, res.TCPHandshake = rtt, true, rtt
			}
		}
	}
	return res.finish()
}
