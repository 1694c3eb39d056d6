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

// qlogLimit bounds a captured qlog: the server view needs the first flight and a few
// 1-RTT packets (a verification's whole connection logs 10-20 KB).
const qlogLimit = 96 << 10

// qlogTraceWait is how long a closed connection's qlog writer may take to finish.
const qlogTraceWait = 250 * time.Millisecond

// qlogCapture is a quic.Config.Tracer keeping the qlog of a connection (every attempt
// quic-go makes for one dial: a new trace after Version Negotiation) in memory, up to
// qlogLimit bytes; writes beyond it are dropped (qlogana reads a cut qlog).
type qlogCapture struct {
	mu     sync.Mutex
	buf    []byte
	closed []chan struct{}
}

type captureWriter struct {
	q    *qlogCapture
	done chan struct{}
	once sync.Once
}

func (w *captureWriter) Write(p []byte) (int, error) {
	w.q.mu.Lock()
	defer w.q.mu.Unlock()
	if room := qlogLimit - len(w.q.buf); room > 0 {
		w.q.buf = append(w.q.buf, p[:min(len(p), room)]...)
	}
	return len(p), nil
}

func (w *captureWriter) Close() error {
	w.once.Do(func() { close(w.done) })
	return nil
}

func (q *qlogCapture) tracer(_ context.Context, isClient bool, odcid quic.ConnectionID) qlogwriter.Trace {
	w := &captureWriter{q: q, done: make(chan struct{})}
	q.mu.Lock()
	q.closed = append(q.closed, w.done)
	q.mu.Unlock()
	fs := qlogwriter.NewConnectionFileSeq(w, isClient, odcid)
	go fs.Run()
	return fs
}

// view waits (at most qlogTraceWait) for the writers of the closed connection and reads
// the server's side of the qlog; nil when it holds nothing usable.
func (q *qlogCapture) view() *qlogana.ServerView {
	q.mu.Lock()
	closed := append([]chan struct{}(nil), q.closed...)
	q.mu.Unlock()
	timer := time.NewTimer(qlogTraceWait)
	defer timer.Stop()
	for _, c := range closed {
		select {
		case <-c:
		case <-timer.C:
		}
	}
	q.mu.Lock()
	b := append([]byte(nil), q.buf...)
	q.mu.Unlock()
	tr, err := qlogana.Parse(b)
	if err != nil {
		return nil
	}
	v := tr.Server()
	if viewEmpty(&v) {
		return nil
	}
	return &v
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
