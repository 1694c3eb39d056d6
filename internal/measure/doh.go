package measure

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"
	"time"
)

// alpnH2 is HTTP/2 over TLS (RFC 9113 §3.2).
const alpnH2 = "h2"

// measureDoH is DNS over HTTPS (RFC 8484) over HTTP/2 and TLS: handshake = TCP + TLS
// (2 RTT with TLS 1.3), GET or POST per Request.Variant, on the HTTP/2 client of h2.go.
func measureDoH(ctx context.Context, req *Request, res *Result) *Result {
	return overTLS(ctx, req, res, []string{alpnH2}, func(c *timedConn, tc *tls.Conn) *Result {
		if res.ALPN != alpnH2 {
			return res.fail(ctx, fmt.Errorf("%w: server chose ALPN %q, want h2", errALPN, res.ALPN))
		}
		h, err := newH2Client(tc)
		if err != nil {
			return res.fail(ctx, err)
		}
		defer h.close()
		authority, path := dohTarget(req)
		post := strings.EqualFold(req.Variant, VariantPOST)
		dohQueries(ctx, req, res, func(ctx context.Context, msg []byte, sending func()) ([]byte, time.Time, error) {
			return h.exchange(ctx, authority, path, post, msg, sending)
		}, c.log)
		res.PeerMaxStreams = h.peerMaxStreams()
		return res.finish()
	})
}
