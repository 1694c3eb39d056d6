package measure

import (
	"context"
	"time"
)

// alpnDoT is the DoT ALPN (RFC 7858 has none; "dot" is registered by RFC 9461 §7.1 for SVCB).
const alpnDoT = "dot"

// dotMeasurer is DNS over TLS (RFC 7858): handshake = TCP + TLS (2 RTT with TLS 1.3).
type dotMeasurer struct{}

func (dotMeasurer) Protocol() Protocol { return DoT }

func (dotMeasurer) Measure(ctx context.Context, req *Request) *Result {
	ctx, cancel := context.WithTimeout(ctx, req.timeout())
	defer cancel()
	res := &Result{Protocol: DoT}
	c, tc, err := dialTLS(ctx, req, res, []string{alpnDoT})
	if err != nil {
		return res.fail(err)
	}
	defer tc.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	defer stop()
	tlsTimed := &timedConn{Conn: tc, log: c.log}
	// The first write on the TLS conn is what puts a query's first packet on the wire
	// (the TCP conn's writes carry the same bytes, encrypted).
	tcpQueries(ctx, req, res, tlsTimed)
	return res.finish()
}
