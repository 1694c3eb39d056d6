package measure

import (
	"context"
	"crypto/tls"
	"time"
)

// tlsConfig returns the client TLS configuration of req: TLS 1.2+ (TLS 1.3 preferred),
// no certificate verification (resolvers use self-signed certificates; the study did the
// same: it measures time, not trust), the request's key share, and the peer's session
// cache in resumed/0-RTT modes only.
func tlsConfig(req *Request, alpn []string) (*tls.Config, error) {
	curves, err := req.KeyShare.Curves()
	if err != nil {
		return nil, err
	}
	c := &tls.Config{
		ServerName:         req.ServerName,
		InsecureSkipVerify: true, //nolint:gosec // timing, not trust: the certificate is recorded by verify
		NextProtos:         alpn,
		MinVersion:         tls.VersionTLS12,
		CurvePreferences:   curves,
	}
	if req.Peer != nil && (req.Mode == ModeResumed || req.Mode == Mode0RTT) {
		c.ClientSessionCache = req.Peer.Sessions
	} else {
		c.SessionTicketsDisabled = true
	}
	return c, nil
}

// dialTLS sets up TCP + TLS and times both together as the handshake (DoT/DoH): the TCP
// handshake (see dialTCP) plus the TLS exchange from the ClientHello's write to the
// arrival of the server's last handshake flight. Our own processing between the two (the
// netpoller waking us after connect, building the ClientHello) is not the path's and is
// left out; on a busy measuring host it is most of the error.
func dialTLS(ctx context.Context, req *Request, res *Result, alpn []string) (*timedConn, *tls.Conn, error) {
	conf, err := tlsConfig(req, alpn)
	if err != nil {
		return nil, nil, err
	}
	c, start, tcpHS, err := dialTCP(ctx, req)
	res.StartedAt = start
	if err != nil {
		return nil, nil, err
	}
	tc := tls.Client(c, conf)
	c.log.Arm()
	before := time.Now()
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, nil, err
	}
	hello := c.log.SentAt(before)
	res.Local, res.TCPHandshake = AddrPortOf(c.LocalAddr()), tcpHS
	res.CryptoFrom, res.CryptoTo = hello, c.log.ArrivedBy(hello, time.Now())
	res.Handshake, res.HasHandshake = tcpHS+res.CryptoTo.Sub(hello), true
	st := tc.ConnectionState()
	res.TLSVersion, res.TLSCipher, res.ALPN = st.Version, tls.CipherSuiteName(st.CipherSuite), st.NegotiatedProtocol
	res.Resumed = boolp(st.DidResume)
	return c, tc, nil
}
