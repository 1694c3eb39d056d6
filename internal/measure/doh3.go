package measure

import (
	"context"
	"time"

	"github.com/doqscan/doqscan/internal/dnsmsg"
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
	tr := &http3.Transport{}
	cc := tr.NewClientConn(conn.Conn)
	for i := 0; i < req.queries(); i++ {
		q := dnsmsg.Query{Name: req.name(), Type: req.QType, ID: 0}
		out := Query{Seq: i, KeepaliveTimeout: -1}
		hr, err := dohRequest(ctx, req, q)
		if err != nil {
			out.Status, out.Err = StatusError, err
			res.Queries = append(res.Queries, out)
			break
		}
		before := time.Now()
		conn.arm()
		resp, err := cc.RoundTrip(hr)
		var raw []byte
		if err == nil {
			raw, err = dohResponse(resp)
		}
		out.StartedAt = conn.sent(before)
		done := conn.arrived(out.StartedAt, time.Now())
		if err != nil {
			out.Status, out.Err = Classify(err), err
		} else {
			out = finishQuery(out, q, raw, done)
		}
		res.Queries = append(res.Queries, out)
		if out.Status != StatusOK {
			break
		}
	}
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
