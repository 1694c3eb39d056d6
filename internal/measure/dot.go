package measure

import (
	"context"
	"crypto/tls"
	"time"
)

// alpnDoT is the DoT ALPN: the protocol table's ALPN.
var alpnDoT = DoT.Spec().DefaultALPN()

// measureDoT is DNS over TLS (RFC 7858): handshake = TCP + TLS (2 RTT with TLS 1.3).
func measureDoT(ctx context.Context, req *Request, res *Result, cl *client) *Result {
	return overTLS(ctx, req, res, []string{alpnDoT}, func(c *timedConn, tc *tls.Conn) *Result {
		// The first write on the TLS conn is what puts a query's first packet on the
		// wire (the TCP conn's writes carry the same bytes, encrypted).
		res.Queries = cl.drive(ctx, tcpSession(req, &timedConn{Conn: tc, log: c.log}))
		return res.finish()
	})
}

// overTLS dials TCP + TLS with alpn (DoT, DoH; see dialTLS), runs measure on the
// connection with ctx's end interrupting its reads and writes, and closes it.
func overTLS(ctx context.Context, req *Request, res *Result, alpn []string, measure func(c *timedConn, tc *tls.Conn) *Result) *Result {
	c, tc, err := dialTLS(ctx, req, res, alpn)
	if err != nil {
		return res.fail(ctx, err)
	}
	defer tc.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	defer stop()
	return measure(c, tc)
}
