package measure

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// alpnH3 is HTTP/3 (RFC 9114 §3.1): the protocol table's ALPN.
var alpnH3 = DoH3.Spec().DefaultALPN()

// errBadH3 is an HTTP/3 response the client cannot take (see h3ResponseError).
var errBadH3 = errors.New("malformed HTTP/3 response")

// h3ResponseError classifies an error of quic-go's HTTP/3 client met while a request
// was under way on ctx. The errors that client makes of its own, without a QUIC or
// HTTP/3 error type, are its verdicts on what the server sent: a frame it cannot parse,
// a HEADERS frame longer than MaxResponseHeaderBytes, an invalid header field, more than
// five 1xx responses, a body longer than its Content-Length. Those are bad responses
// (errBadH3), as the HTTP/2 client classifies the same faults; errors with a type, and
// any once ctx is done, are left to Classify and failure.
func h3ResponseError(ctx context.Context, err error) error {
	if err != nil && ctx.Err() == nil && Classify(err) == StatusError {
		return fmt.Errorf("%w: %w", errBadH3, err)
	}
	return err
}

// measureDoH3 is DNS over HTTPS over HTTP/3 (RFC 8484 + RFC 9114), via quic-go's http3
// package on a connection we dial (and time) ourselves.
func measureDoH3(ctx context.Context, req *Request, res *Result, c *client) *Result {
	return overQUIC(ctx, req, res, c, []string{alpnH3}, func(conn *quicConn) {
		h := &h3Conn{tr: &http3.Transport{MaxResponseHeaderBytes: DoHMaxHeaderBytes}, conn: conn.Conn}
		h.cc = h.tr.NewClientConn(conn.Conn)
		res.Queries = c.drive(ctx, dohSession(req, h.exchange(req), conn.log))
	})
}

// h3Conn is the HTTP/3 client of a DoH3 session's connection.
//
// In 0-RTT mode a GET goes as early data: GET is safe (RFC 9110 §9.2.1), so a replay of
// the early data (RFC 8446 §8) changes nothing on the server (RFC 8470 §2.1). A POST
// waits for the handshake, as quic-go's client does for every method but its GET0RTT.
//
// When the server rejects the 0-RTT data, everything sent in it is lost (RFC 9001
// §4.6.2), the client's control stream and SETTINGS (RFC 9114 §6.2.1) included, and
// quic-go's HTTP/3 client of the connection is unusable: the request is sent once more,
// after the handshake (Conn.NextConnection), on a new HTTP/3 client of the same
// connection, which the later requests use too.
type h3Conn struct {
	tr   *http3.Transport
	conn *quic.Conn
	mu   sync.Mutex
	cc   *http3.ClientConn
}

func (h *h3Conn) client() *http3.ClientConn {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cc
}

// after0RTT returns the HTTP/3 client to use once the handshake is complete: a new one
// when failed is still the current one (concurrent requests renew it once).
func (h *h3Conn) after0RTT(ctx context.Context, failed *http3.ClientConn) (*http3.ClientConn, error) {
	if _, err := h.conn.NextConnection(ctx); err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cc == failed {
		h.cc = h.tr.NewClientConn(h.conn)
	}
	return h.cc, nil
}

// exchange is the session's dohExchange. sending runs right before the request's first
// send, so a request sent again after a 0-RTT rejection keeps the start of its first.
func (h *h3Conn) exchange(req *Request) dohExchange {
	return func(ctx context.Context, msg []byte, sending func()) ([]byte, time.Time, error) {
		if req.Mode == Mode0RTT {
			if !req.IsPOST() {
				body, err := h.earlyGet(ctx, req, msg, sending)
				return body, time.Time{}, h3ResponseError(ctx, err)
			}
			// The start is the POST's own, not the wait for the handshake.
			select {
			case <-h.conn.HandshakeComplete():
			case <-ctx.Done():
				return nil, time.Time{}, ctx.Err()
			}
		}
		body, err := h.roundTrip(ctx, req, msg, sending)
		return body, time.Time{}, h3ResponseError(ctx, err)
	}
}

// roundTrip sends the request on the connection's current HTTP/3 client. quic-go's
// client opens no request stream on a connection whose 0-RTT data was rejected
// (quic.Err0RTTRejected): the request then goes on a new client after the handshake.
func (h *h3Conn) roundTrip(ctx context.Context, req *Request, msg []byte, sending func()) ([]byte, error) {
	cc := h.client()
	hr, err := dohRequest(ctx, req, msg)
	if err != nil {
		return nil, err
	}
	sending()
	resp, err := cc.RoundTrip(hr)
	if errors.Is(err, quic.Err0RTTRejected) {
		if cc, err = h.after0RTT(ctx, cc); err != nil {
			return nil, err
		}
		if hr, err = dohRequest(ctx, req, msg); err != nil {
			return nil, err
		}
		resp, err = cc.RoundTrip(hr)
	}
	if err != nil {
		return nil, err
	}
	return dohResponse(resp, nil)
}

// earlyGet sends a GET as 0-RTT data on a request stream of its own and reads the answer
// once the handshake says whether the server took the early data. When it did not, the
// stream is left alone and the GET sent again (roundTrip): quic-go ended the stream with
// the rejection, but a stream whose sending side was finished would still send its reset
// if cancelled, on the stream ID the next request reuses, and so reset that request.
func (h *h3Conn) earlyGet(ctx context.Context, req *Request, msg []byte, sending func()) ([]byte, error) {
	hr, err := dohRequest(ctx, req, msg)
	if err != nil {
		return nil, err
	}
	cc := h.client()
	str, err := cc.OpenRequestStream(ctx)
	if err == nil {
		sending()
		sending = func() {}
		if err = str.SendRequestHeader(hr); err == nil {
			err = str.Close()
		}
	}
	if err == nil {
		select {
		case <-h.conn.HandshakeComplete():
		case <-ctx.Done():
			str.CancelRead(quic.StreamErrorCode(http3.ErrCodeRequestCanceled))
			return nil, ctx.Err()
		}
		if h.conn.ConnectionState().Used0RTT {
			return h.readResponse(ctx, str)
		}
	} else if !errors.Is(err, quic.Err0RTTRejected) {
		return nil, err
	}
	if _, err := h.after0RTT(ctx, cc); err != nil {
		return nil, err
	}
	return h.roundTrip(ctx, req, msg, sending)
}

// readResponse reads the answer on str, bounded by ctx.
func (h *h3Conn) readResponse(ctx context.Context, str *http3.RequestStream) ([]byte, error) {
	if d, ok := ctx.Deadline(); ok {
		_ = str.SetReadDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { _ = str.SetReadDeadline(time.Now()) })
	defer stop()
	resp, err := str.ReadResponse()
	if err != nil {
		return nil, err
	}
	return dohResponse(resp, nil)
}
