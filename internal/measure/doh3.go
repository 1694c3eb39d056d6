package measure

import (
	"context"

	"github.com/quic-go/quic-go/http3"
)

// alpnH3 is HTTP/3 (RFC 9114 §3.1).
const alpnH3 = "h3"

// measureDoH3 is DNS over HTTPS over HTTP/3 (RFC 8484 + RFC 9114), via quic-go's http3
// package on a connection we dial (and time) ourselves.
func measureDoH3(ctx context.Context, req *Request, res *Result) *Result {
	return overQUIC(ctx, req, res, []string{alpnH3}, func(conn *quicConn) {
		tr := &http3.Transport{MaxResponseHeaderBytes: dohMaxHeaderBytes}
		dohQueries(ctx, req, res, roundTripper(req, tr.NewClientConn(conn.Conn)), conn.log)
	})
}
