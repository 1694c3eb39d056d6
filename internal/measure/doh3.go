package measure

import (
	"context"
	"time"

	"github.com/quic-go/quic-go/http3"
)

// alpnH3 is HTTP/3 (RFC 9114 §3.1).
const alpnH3 = "h3"

// doh3Measurer is DNS over HTTPS over HTTP/3 (RFC 8484 + RFC 9114), via quic-go's http3
// package on a connection we dial (and time) ourselves.
type doh3Measurer struct{}

func (doh3Measurer) Protocol() Protocol { return DoH3 }

func (doh3Measurer) Measure(ctx context.Context, req *Request) *Result {
	ctx, cancel := context.WithTimeout(ctx, req.timeout())
	defer cancel()
	res := &Result{Protocol: DoH3}
	ql := newQlogBuffer()
	conn, err := dialQUIC(ctx, req, res, []string{alpnH3}, ql)
	if err != nil {
		finishQUIC(nil, res, ql)
		return res.fail(err)
	}
	defer func() { finishQUIC(conn, res, ql) }()
	tr := &http3.Transport{MaxResponseHeaderBytes: dohMaxHeaderBytes}
	cc := tr.NewClientConn(conn.Conn)
	dohQueries(ctx, req, res, cc, conn.log)
	if req.Mode == Mode0RTT {
		select {
		case <-conn.HandshakeComplete():
			res.HasHandshake, res.HandshakeWall = true, time.Since(res.StartedAt)
			recordQUICState(req, res, conn.Conn)
		case <-ctx.Done():
		}
	}
	return res.finish()
}
