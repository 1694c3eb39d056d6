package measure

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"

	"golang.org/x/net/http2"
)

// alpnH2 is HTTP/2 over TLS (RFC 9113 §3.2).
const alpnH2 = "h2"

// measureDoH is DNS over HTTPS (RFC 8484) over HTTP/2 and TLS: handshake = TCP + TLS
// (2 RTT with TLS 1.3), GET or POST per Request.Variant.
func measureDoH(ctx context.Context, req *Request, res *Result) *Result {
	return overTLS(ctx, req, res, []string{alpnH2}, func(c *timedConn, tc *tls.Conn) *Result {
		if res.ALPN != alpnH2 {
			return res.fail(fmt.Errorf("%w: server chose ALPN %q, want h2", errALPN, res.ALPN))
		}
		// The bounds are set through an http.Transport: x/net's http2.Transport takes its
		// receive windows only from there.
		tr, err := http2.ConfigureTransports(&http.Transport{
			MaxResponseHeaderBytes: dohMaxHeaderBytes,
			HTTP2:                  &http.HTTP2Config{MaxReceiveBufferPerConnection: dohReceiveBuffer, MaxReceiveBufferPerStream: dohReceiveBuffer},
		})
		if err != nil {
			return res.fail(fmt.Errorf("http2 transport: %w", err))
		}
		cc, err := tr.NewClientConn(tc)
		if err != nil {
			return res.fail(fmt.Errorf("http2 client: %w", err))
		}
		defer cc.Close()
		dohQueries(ctx, req, res, cc, c.log, true)
		return res.finish()
	})
}
