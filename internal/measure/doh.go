package measure

import (
	"context"
	"fmt"
	"time"

	"github.com/doqscan/doqscan/internal/dnsmsg"
	"golang.org/x/net/http2"
)

// alpnH2 is HTTP/2 over TLS (RFC 9113 §3.2).
const alpnH2 = "h2"

// dohMeasurer is DNS over HTTPS (RFC 8484) over HTTP/2 and TLS: handshake = TCP + TLS
// (2 RTT with TLS 1.3), GET or POST per Request.Variant.
type dohMeasurer struct{}

func (dohMeasurer) Protocol() Protocol { return DoH }

func (dohMeasurer) Measure(ctx context.Context, req *Request) *Result {
	ctx, cancel := context.WithTimeout(ctx, req.timeout())
	defer cancel()
	res := &Result{Protocol: DoH}
	c, tc, err := dialTLS(ctx, req, res, []string{alpnH2})
	if err != nil {
		return res.fail(err)
	}
	defer tc.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	defer stop()
	if res.ALPN != alpnH2 {
		return res.fail(fmt.Errorf("%w: server chose ALPN %q, want h2", errALPN, res.ALPN))
	}
	tr := &http2.Transport{}
	cc, err := tr.NewClientConn(tc)
	if err != nil {
		return res.fail(fmt.Errorf("http2 client: %w", err))
	}
	defer cc.Close()
	for i := 0; i < req.queries(); i++ {
		q := dnsmsg.Query{Name: req.name(), Type: req.QType, ID: 0}
		out := Query{Seq: i, KeepaliveTimeout: -1}
		hr, err := dohRequest(ctx, req, q)
		if err != nil {
			out.Status, out.Err = StatusError, err
			res.Queries = append(res.Queries, out)
			break
		}
		c.arm()
		before := time.Now()
		resp, err := cc.RoundTrip(hr)
		out.StartedAt = c.sent(before)
		var raw []byte
		if err == nil {
			raw, err = dohResponse(resp)
		}
		done := c.arrived(out.StartedAt, time.Now())
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
	return res.finish()
}
