package measure

import (
	"context"
	"crypto/tls"
	"fmt"
	"time"

	"github.com/doqscan/doqscan/internal/dnsmsg"
	"github.com/doqscan/doqscan/internal/doq"
)

// measureDoQ is DNS over QUIC (RFC 9250): handshake = the QUIC handshake (1 RTT when
// neither VN, Retry nor the anti-amplification limit intervene), one query per stream.
func measureDoQ(ctx context.Context, req *Request, res *Result, c *client) *Result {
	alpn := req.ALPN
	if len(alpn) == 0 {
		alpn = []string{doq.Versions[0].ALPN}
	}
	return overQUIC(ctx, req, res, c, alpn, func(conn *quicConn) {
		res.Queries = c.drive(ctx, &Session{req: req, ex: func(ctx context.Context, seq int, q dnsmsg.Query, shared bool) Query {
			return doqExchange(ctx, conn, alpn, dnsmsg.Query{Name: q.Name, Type: q.Type, RcodeOnly: q.RcodeOnly}, seq, shared)
		}})
	})
}

// overQUIC dials QUIC with alpn (DoQ, DoH3; see dialQUIC), runs queries on the
// connection, in 0-RTT mode waits for the handshake the queries went ahead of, and
// then closes the connection and takes its qlog and handshake times (finishQUIC).
func overQUIC(ctx context.Context, req *Request, res *Result, c *client, alpn []string, queries func(conn *quicConn)) *Result {
	ql := newQlogBuffer()
	conn, err := dialQUIC(ctx, req, res, alpn, ql, !c.noQlog)
	if err != nil {
		finishQUIC(nil, res, ql)
		return res.fail(ctx, err)
	}
	defer func() { finishQUIC(conn, res, ql) }()
	queries(conn)
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

// doqExchange runs q (its ID 0: RFC 9250 §4.2.1, the DNS Message ID MUST be 0) on a new
// stream of conn, dialed offering the ALPNs offered. shared: other queries are
// outstanding on conn (see exchangeFunc).
func doqExchange(ctx context.Context, conn *quicConn, offered []string, q dnsmsg.Query, seq int, shared bool) Query {
	out := Query{Seq: seq, KeepaliveTimeout: -1}
	st := conn.ConnectionState().TLS
	framing, err := doq.FramingFor(st.NegotiatedProtocol)
	if err != nil {
		if !st.HandshakeComplete && len(offered) > 0 {
			// Before the handshake completes (0-RTT) nothing is negotiated yet: the
			// resumed session's ALPN, the one the client offers first.
			framing, _ = doq.FramingFor(offered[0])
		} else {
			out.Status, out.Err = StatusALPNMismatch, err
			return out
		}
	}
	msg, err := dnsmsg.Build(q)
	if err != nil {
		out.Status, out.Err = StatusError, err
		return out
	}
	out.StartedAt = time.Now()
	var before time.Time
	raw, err := doq.Exchange(ctx, conn.Conn, framing, msg, doq.ExchangeOptions{OnSend: func() {
		before = time.Now()
		if !shared {
			conn.log.Arm()
		}
		out.StartedAt = before
	}})
	step := doq.StepOf(err)
	if err != nil && step != doq.StepRead {
		out.Status, out.Err = Failure(ctx, StepAnswer, err)
		return out
	}
	// From the query's first datagram (quic-go's send loop writes it after Write
	// returns) to the arrival of the datagram that completed the answer.
	if !shared {
		out.StartedAt = conn.log.SentAt(before)
	}
	done := conn.log.ArrivedBy(out.StartedAt, time.Now())
	if err != nil {
		if ctx.Err() == nil && !isQUICErr(err) {
			err = fmt.Errorf("%w: %v", errBadLength, err)
		}
		out.Status, out.Err = Failure(ctx, StepAnswer, err)
		return out
	}
	return CheckAnswer(out, q, raw, done)
}

// isQUICErr reports errors that come from the connection rather than the stream's bytes.
func isQUICErr(err error) bool {
	s := Classify(err)
	return s != StatusError && s != StatusBadResponse
}

func tlsCipherName(id uint16) string {
	if id == 0 {
		return ""
	}
	return tls.CipherSuiteName(id)
}
