package simdns

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/netip"
	"time"
)

// ALPN identifiers (IANA TLS ALPN registry).
const (
	alpnDoT   = "dot"      // RFC 7858 (registered in 2019 for DNS over TLS)
	alpnH2    = "h2"       // RFC 9113 §3.2
	alpnHTTP1 = "http/1.1" // RFC 7301 §6
)

type tlsKey struct {
	addr  netip.Addr
	proto Protocol
}

// tlsConfig returns the TLS configuration of addr on p, built once per (address,
// protocol) so session ticket keys stay stable across connections (resumption needs the
// same keys; RFC 8446 §4.6.1).
func (s *Server) tlsConfig(addr netip.Addr, p Protocol, b Behaviour) (*tls.Config, error) {
	if s.cfg.Certs == nil {
		return nil, fmt.Errorf("simdns: %s on %s needs a certificate and Config.Certs is nil", p, addr)
	}
	k := tlsKey{addr, p}
	s.tlsMu.Lock()
	defer s.tlsMu.Unlock()
	if c, ok := s.tlsCfg[k]; ok {
		return c, nil
	}
	certs := s.cfg.Certs
	c := &tls.Config{
		MinVersion: tls.VersionTLS12,
		MaxVersion: tls.VersionTLS13,
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			return certs.Certificate(addr, p, hello.ServerName)
		},
		SessionTicketsDisabled: !b.SessionTickets,
	}
	if b.TLS12Only {
		c.MaxVersion = tls.VersionTLS12
	}
	switch p {
	case DoT:
		c.NextProtos = []string{alpnDoT}
	case DoH:
		c.NextProtos = []string{alpnH2, alpnHTTP1}
		if b.HTTP1Only {
			c.NextProtos = []string{alpnHTTP1}
		}
	}
	s.tlsCfg[k] = c
	return c, nil
}

// handshake runs the server side of the TLS handshake on c within IdleTimeout.
func (s *Server) handshake(c net.Conn, local netip.Addr, p Protocol, b Behaviour) (*tls.Conn, error) {
	cfg, err := s.tlsConfig(local, p, b)
	if err != nil {
		return nil, err
	}
	tc := tls.Server(c, cfg)
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.Limits.IdleTimeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, err
	}
	c.SetDeadline(time.Time{})
	return tc, nil
}

// serveDoT answers DNS over TLS (RFC 7858 §3.3: the DoTCP framing inside TLS).
func (s *Server) serveDoT(c net.Conn, local netip.Addr, b Behaviour) {
	tc, err := s.handshake(c, local, DoT, b)
	if err != nil {
		s.log.Debug("simdns: dot handshake", "addr", local, "err", err)
		c.Close()
		return
	}
	s.serveStream(tc, b, DoT)
}
