package verify

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/qlogwriter"

	"github.com/doqscan/doqscan/internal/measure/qlogana"
)

// UnknownALPN is the ALPN the identification probe offers: a protocol no server speaks,
// so every server refuses the ClientHello with no_application_protocol, each in its own
// words (the CONNECTION_CLOSE's reason and trigger frame, the packet's size).
const UnknownALPN = "doqscan-stack-probe"

// qlogTraceWait is how long a closed connection's trace may take to end.
const qlogTraceWait = 250 * time.Millisecond

// qlogCapture is a quic.Config.Tracer keeping what each connection attempt of a dial
// (quic-go starts a new trace after Version Negotiation) shows of the server: a
// qlogana.LiveView per attempt, read from quic-go's events without a qlog.
type qlogCapture struct {
	mu    sync.Mutex
	views []*qlogana.LiveView
}

func (q *qlogCapture) tracer(context.Context, bool, quic.ConnectionID) qlogwriter.Trace {
	v := qlogana.NewLiveView()
	q.mu.Lock()
	q.views = append(q.views, v)
	q.mu.Unlock()
	return v
}

// view waits (at most qlogTraceWait) for the traces of the closed connection and returns
// what the last attempt that heard the server showed; nil when none did.
func (q *qlogCapture) view() *qlogana.ServerView {
	q.mu.Lock()
	views := append([]*qlogana.LiveView(nil), q.views...)
	q.mu.Unlock()
	deadline := time.Now().Add(qlogTraceWait)
	var out *qlogana.ServerView
	for _, v := range views {
		if sv := v.View(max(time.Until(deadline), 0)); sv != nil {
			out = sv
		}
	}
	return out
}

// probeUnknownALPN offers UnknownALPN (and an X25519 key share only: one Initial) with
// no SNI and returns what the server showed; nil when it showed nothing (silent, not
// QUIC). It never completes a handshake with a server that follows RFC 7301.
func (v *Verifier) probeUnknownALPN(ctx context.Context, t Target) *qlogana.ServerView {
	return v.probeALPN(ctx, t, UnknownALPN)
}

// IdentifyALPN is the ALPN offered to a QUIC server that refused every DoQ ALPN, for
// its transport parameters: HTTP/3's, the protocol such servers speak most.
const IdentifyALPN = "h3"

// probeALPN makes one handshake offering alpn (X25519 only, no SNI), closes it at once
// if it completes, and returns what the server showed.
func (v *Verifier) probeALPN(ctx context.Context, t Target, alpn string) *qlogana.ServerView {
	raddr := net.UDPAddrFromAddrPort(t.Addr)
	uc, err := net.DialUDP("udp", nil, raddr)
	if err != nil {
		return nil
	}
	q := &qlogCapture{}
	tr := &quic.Transport{Conn: &connectedConn{c: uc, raddr: raddr}}
	tlsConf := &tls.Config{
		InsecureSkipVerify: true, //nolint:gosec // the probe reads how the server refuses, nothing is trusted
		NextProtos:         []string{alpn},
		MinVersion:         tls.VersionTLS13,
		ServerName:         t.Addr.Addr().Unmap().String(), // an IP literal: no SNI is sent
		CurvePreferences:   []tls.CurveID{tls.X25519},
	}
	qconf := &quic.Config{Versions: v.cfg.Versions, HandshakeIdleTimeout: v.cfg.HandshakeTimeout, Tracer: q.tracer}
	hctx, cancel := context.WithTimeout(ctx, v.cfg.HandshakeTimeout)
	conn, err := tr.Dial(hctx, raddr, tlsConf, qconf)
	cancel()
	if err == nil {
		conn.CloseWithError(0, "") //nolint:errcheck // a server that accepted an unknown ALPN: close at once
	}
	tr.Close()
	uc.Close() // the Transport leaves a socket it did not create open
	return q.view()
}
