package measuretest

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/quic-go/quicvarint"
	"golang.org/x/net/http2"

	"github.com/doqscan/doqscan/internal/hostile"
	"github.com/doqscan/doqscan/internal/measure"
)

// Behaviors lists the hostile behaviours every server acts out (what each does on its
// transport: hostile.Behaviours). Config.Behavior hostile.None is a valid answer.
var Behaviors = []hostile.Behaviour{hostile.Stall, hostile.Garbage, hostile.Endless, hostile.WrongLength,
	hostile.Reset, hostile.Flood}

// HTTPBehaviors lists the hostile behaviours of the DoH and DoH3 servers only (the other
// servers answer normally): Drip over HTTP/2 and HTTP/3 alike (Flood's DoH body, which
// DoH3's Flood replaces with unknown frames); HugeHeaders, a HEADERS frame declaring 2^40
// bytes over HTTP/3, the longest frame HTTP/2 can declare (2^24-1) over HTTP/2.
var HTTPBehaviors = []hostile.Behaviour{hostile.Drip, hostile.HugeHeaders}

// Served is the part of hostile.Behaviours these servers act out, and why not the rest.
var Served = hostile.Subset{
	Implements: slices.Concat(Behaviors, HTTPBehaviors),
	Omits: map[hostile.Behaviour]string{
		hostile.Truncated: "measured against the testbed's hostile=truncated hosts (measure/e2e)",
		hostile.WrongID:   "no measure test needs it yet; simdns acts it out",
		hostile.CloseApp:  "acted out by verify's in-process DoQ servers only",
		hostile.TLSStall:  "no measure test needs it yet; simdns acts it out",
		hostile.BadVN:     "QUIC Version Negotiation: the testbed's raw responders (hostile=bad-vn)",
		hostile.DraftOnly: "QUIC Version Negotiation: the testbed's raw responders (hostile=draft-only)",
	},
}

// httpOnly says whether b is a behaviour of the HTTP servers only.
func httpOnly(b hostile.Behaviour) bool { return slices.Contains(HTTPBehaviors, b) }

// dripInterval paces Flood's one-byte writes (one packet each) and datagrams.
const dripInterval = 100 * time.Microsecond

// floodDatagrams bounds a DoUDP Flood, which has no signal that the client left.
const floodDatagrams = 1 << 15

// h3FrameUnknown is a reserved HTTP/3 frame type (0x1f*N+0x21, RFC 9114 §7.2.8) that a
// client must skip; h3FrameSettings and h3StreamControl open the control stream (§6.2.1).
const (
	h3FrameUnknown  = 0x21
	h3FrameSettings = 0x04
	h3FrameHeaders  = 0x01
	h3StreamControl = 0x00
)

// DoQ ALPN the test server speaks (RFC 9250 §4.1.1).
const alpnDoQ = "doq"

// Config configures one set of servers on one loopback address.
type Config struct {
	Host       string            // 127.0.0.x; default 127.0.0.1
	Answer     netip.Addr        // the A record answered; default 192.0.2.1
	Delay      time.Duration     // added before every answer (a known resolve time)
	Behavior   hostile.Behaviour // hostile.None: a valid answer
	ChainBytes int               // certificate chain size (0: one small certificate)
	Retry      bool              // DoQ/DoH3: force Retry (Transport.VerifySourceAddress)
	// IgnoreTokens makes NEW_TOKEN tokens useless (they expire at once): the server
	// issues them but does not honour them, as the study found resolvers doing.
	IgnoreTokens bool
	// TokenAge is the oldest NEW_TOKEN token the QUIC servers honour (quic-go's
	// Transport.MaxTokenAge; 0: its default, 24 h).
	TokenAge  time.Duration
	Allow0RTT bool
	// Reject0RTT (DoQ/DoH3) issues session tickets that allow 0-RTT, then resumes a
	// session but rejects its early data, as a server does whose ticket's 0-RTT state it
	// no longer holds (a restart with the same ticket keys, another server behind the
	// address): the client must send again in 1-RTT what it sent in 0-RTT.
	Reject0RTT bool
	// QUICVersions the QUIC servers speak (default quic-go's v1, v2); v2 alone makes a
	// v1-first client go through Version Negotiation.
	QUICVersions []quic.Version
	// DropDatagrams: indices (0-based) of the DoQ server's outgoing datagrams to drop.
	DropDatagrams []int
	// SplitFlight holds the second datagram the QUIC servers send to each client
	// address (and what follows it to that address) for this long: a server whose first
	// flight leaves as two datagrams apart (its own processing, a loaded host), with the
	// client's ACK of the first in between on a short path.
	SplitFlight time.Duration
	// QUICDelay delays every datagram the QUIC servers send: an emulated RTT on
	// loopback (the testbed's delay line does this for every protocol).
	QUICDelay time.Duration
	// EarlyDataWait is how long the QUIC servers hold their datagrams to a client whose
	// ClientHello offered early data (RFC 8446 §4.2.10; a 0-RTT dial) until a query from
	// that client has reached a DoQ or DoH3 handler. 0: DefaultEarlyDataWait on a server
	// that takes or rejects early data (Allow0RTT, Reject0RTT); negative: no hold. So a
	// query sent as early data is sent before the handshake can complete, however late
	// the client is scheduled: which comes first is decided by the client's code. It
	// also keeps the client from opening its stream while quic-go applies the server's
	// transport parameters, a data race inside quic-go that the race detector reports
	// (quic-go/quic-go#4303, open for v0.65.0). A client that waits for the handshake,
	// or whose early data is rejected, sees the handshake complete after the wait.
	EarlyDataWait time.Duration
	// IdleTimeout is the QUIC servers' max_idle_timeout (default 10 s): shorter than the
	// client's timeout, a silent connection idles out before the client's deadline.
	IdleTimeout time.Duration
	Cert        *tls.Certificate // reuse a certificate (generation is not free)
	// Hold, when > 1, holds every answer until Hold queries (over all six servers) are
	// waiting for one, then releases them together, and so on: a client that never has
	// Hold queries outstanding at once gets no answer. DoTCP/DoT then read a connection's
	// queries while earlier ones wait (pipelining, RFC 7766 §6.2.1.1).
	Hold int
	// Ports fixes the servers' ports (0: any free port): a server a command line names
	// by its port (dnsbench's help examples on 127.0.0.1).
	Ports Ports
}

// Ports are the ports of the six servers; DoUDP/DoTCP, DoT/DoQ and DoH/DoH3 may share a
// number (different transports).
type Ports struct {
	UDP, TCP, DoT, DoH, DoQ, DoH3 uint16
}

func (c Config) hostPort(p uint16) string { return net.JoinHostPort(c.Host, strconv.Itoa(int(p))) }

// Servers are the running servers' addresses.
type Servers struct {
	UDP, TCP, DoT, DoH, DoQ, DoH3 netip.AddrPort
	Cert                          tls.Certificate
	Answer                        netip.Addr
	mu                            sync.Mutex
	queries                       int
	held                          int           // queries waiting in the current Hold group
	release                       chan struct{} // closed when the current group is complete
	ctx                           context.Context
	offeredEarly                  map[string]bool          // client addresses whose ClientHello offered early data
	queried                       map[string]chan struct{} // per client address, closed at its first query
}

// queryChan is the channel closed when a query from the client at addr (ip:port) has
// reached a handler.
func (s *Servers) queryChan(addr string) chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.queried == nil {
		s.queried = map[string]chan struct{}{}
	}
	ch, ok := s.queried[addr]
	if !ok {
		ch = make(chan struct{})
		s.queried[addr] = ch
	}
	return ch
}

// queryFrom notes a query from the client at addr (EarlyDataWait).
func (s *Servers) queryFrom(addr string) {
	ch := s.queryChan(addr)
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// DefaultEarlyDataWait is Config.EarlyDataWait's default.
const DefaultEarlyDataWait = 500 * time.Millisecond

// extEarlyData is TLS's early_data extension (RFC 8446 §4.2).
const extEarlyData = 42

// noteHello records, from a ClientHello, whether its client offered early data.
func (s *Servers) noteHello(info *tls.ClientHelloInfo) {
	if info.Conn == nil || !slices.Contains(info.Extensions, extEarlyData) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.offeredEarly == nil {
		s.offeredEarly = map[string]bool{}
	}
	s.offeredEarly[info.Conn.RemoteAddr().String()] = true
}

// offeredEarlyData reports whether the client at addr offered early data.
func (s *Servers) offeredEarlyData(addr string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.offeredEarly[addr]
}

// OfferedEarlyData reports whether a ClientHello from a client socket of this port
// offered early data to the QUIC servers (what EarlyDataWait keys on).
func (s *Servers) OfferedEarlyData(port uint16) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for a := range s.offeredEarly {
		if ap, err := netip.ParseAddrPort(a); err == nil && ap.Port() == port {
			return true
		}
	}
	return false
}

// Request is a request to the server of protocol p (a 3 s timeout, the X25519 key
// share).
func (s *Servers) Request(p measure.Protocol) *measure.Request {
	addrs := map[measure.Protocol]netip.AddrPort{measure.DoUDP: s.UDP, measure.DoTCP: s.TCP, measure.DoT: s.DoT,
		measure.DoH: s.DoH, measure.DoQ: s.DoQ, measure.DoH3: s.DoH3}
	return &measure.Request{Addr: addrs[p], Timeout: 3 * time.Second, KeyShare: measure.KeyShareX25519}
}

// Queries returns how many queries the servers saw.
func (s *Servers) Queries() int { s.mu.Lock(); defer s.mu.Unlock(); return s.queries }

func (s *Servers) count() { s.mu.Lock(); s.queries++; s.mu.Unlock() }

// Start starts all six servers; they stop when the test ends.
func Start(tb testing.TB, cfg Config) *Servers {
	tb.Helper()
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	if !cfg.Answer.IsValid() {
		cfg.Answer = netip.MustParseAddr("192.0.2.1")
	}
	s := &Servers{Answer: cfg.Answer}
	if cfg.Cert != nil {
		s.Cert = *cfg.Cert
	} else {
		c, err := Certificate(cfg.ChainBytes)
		if err != nil {
			tb.Fatal(err)
		}
		s.Cert = c
	}
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	s.ctx = ctx
	s.startUDP(tb, ctx, cfg)
	s.startTCP(tb, ctx, cfg, false)
	s.startTCP(tb, ctx, cfg, true)
	s.startDoH(tb, ctx, cfg)
	s.startQUIC(tb, ctx, cfg, false)
	s.startQUIC(tb, ctx, cfg, true)
	return s
}

// answer builds the response to raw, or nil when raw is not a query.
func (s *Servers) answer(cfg Config, raw []byte) []byte {
	q := new(dns.Msg)
	if err := q.Unpack(raw); err != nil || len(q.Question) == 0 {
		return nil
	}
	s.count()
	s.hold(cfg.Hold)
	r := new(dns.Msg)
	r.SetReply(q)
	r.RecursionAvailable = true
	if q.Question[0].Qtype == dns.TypeA {
		r.Answer = append(r.Answer, &dns.A{
			Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 300},
			A:   cfg.Answer.AsSlice(),
		})
	}
	if o := q.IsEdns0(); o != nil {
		ro := r.SetEdns0(1232, false).IsEdns0()
		for _, opt := range o.Option {
			if _, ok := opt.(*dns.EDNS0_TCP_KEEPALIVE); ok {
				ro.Option = append(ro.Option, &dns.EDNS0_TCP_KEEPALIVE{Code: dns.EDNS0TCPKEEPALIVE, Timeout: 100})
			}
		}
	}
	b, err := r.Pack()
	if err != nil {
		return nil
	}
	return b
}

// hold waits until n queries wait here (Config.Hold), or the servers stop.
func (s *Servers) hold(n int) {
	if n <= 1 {
		return
	}
	s.mu.Lock()
	if s.release == nil {
		s.release = make(chan struct{})
	}
	ch := s.release
	s.held++
	if s.held == n {
		close(ch)
		s.release, s.held = nil, 0
	}
	s.mu.Unlock()
	select {
	case <-ch:
	case <-s.ctx.Done():
	}
}

func garbage(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	b[2] &^= 0x80 // never a valid response by chance: QR clear
	return b
}

func sleepCtx(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// ---- DoUDP ------------------------------------------------------------------------

func (s *Servers) startUDP(tb testing.TB, ctx context.Context, cfg Config) {
	pc, err := net.ListenPacket("udp", cfg.hostPort(cfg.Ports.UDP))
	if err != nil {
		tb.Fatal(err)
	}
	s.UDP = measure.AddrPortOf(pc.LocalAddr())
	if cfg.Behavior == hostile.None || httpOnly(cfg.Behavior) {
		serveMiekg(tb, &dns.Server{PacketConn: pc, Handler: s.miekgHandler(cfg)})
		return
	}
	buf := make([]byte, 65535)
	serveLoop(tb, func() { pc.Close() }, func() error {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return err
		}
		switch cfg.Behavior {
		case hostile.Garbage, hostile.WrongLength:
			_, _ = pc.WriteTo(garbage(40), from)
		case hostile.Endless:
			for i := 0; i < 16; i++ {
				_, _ = pc.WriteTo(garbage(1200), from)
			}
		case hostile.Flood:
			go func() {
				for i := 0; i < floodDatagrams && ctx.Err() == nil; i++ {
					if _, err := pc.WriteTo(garbage(40), from); err != nil {
						return
					}
					sleepCtx(ctx, dripInterval)
				}
			}()
		case hostile.Reset: // nothing like a reset in UDP: answer with a truncated message
			if a := s.answer(cfg, buf[:n]); a != nil {
				_, _ = pc.WriteTo(a[:len(a)/2], from)
			}
		}
		return nil
	})
}

// serveLoop calls next on its own goroutine until it fails (the socket is closed, at
// the latest by stop at cleanup).
func serveLoop(tb testing.TB, stop func(), next func() error) {
	tb.Cleanup(stop)
	go func() {
		for next() == nil {
		}
	}()
}

func (s *Servers) miekgHandler(cfg Config) dns.Handler {
	return dns.HandlerFunc(func(w dns.ResponseWriter, m *dns.Msg) {
		raw, err := m.Pack()
		if err != nil {
			return
		}
		sleepCtx(context.Background(), cfg.Delay)
		if a := s.answer(cfg, raw); a != nil {
			_, _ = w.Write(a)
		}
	})
}

// ---- DoTCP / DoT ------------------------------------------------------------------

func (s *Servers) startTCP(tb testing.TB, ctx context.Context, cfg Config, useTLS bool) {
	port := cfg.Ports.TCP
	if useTLS {
		port = cfg.Ports.DoT
	}
	ln, err := net.Listen("tcp", cfg.hostPort(port))
	if err != nil {
		tb.Fatal(err)
	}
	if useTLS {
		s.DoT = measure.AddrPortOf(ln.Addr())
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{s.Cert}, NextProtos: []string{"dot"}})
	} else {
		s.TCP = measure.AddrPortOf(ln.Addr())
	}
	if (cfg.Behavior == hostile.None || httpOnly(cfg.Behavior)) && cfg.Hold <= 1 {
		serveMiekg(tb, &dns.Server{Listener: ln, Handler: s.miekgHandler(cfg)})
		return
	}
	serveLoop(tb, func() { ln.Close() }, func() error {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		if cfg.Behavior == hostile.None || httpOnly(cfg.Behavior) {
			go s.pipelined(ctx, cfg, c)
			return nil
		}
		go s.hostileStream(ctx, cfg, c, func() {
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			} else if tl, ok := c.(*tls.Conn); ok {
				if tc, ok := tl.NetConn().(*net.TCPConn); ok {
					_ = tc.SetLinger(0)
				}
			}
			c.Close()
		})
		return nil
	})
}

// pipelined serves one DoTCP/DoT connection, answering each query from its own goroutine
// (in whatever order they complete) while reading the next.
func (s *Servers) pipelined(ctx context.Context, cfg Config, c net.Conn) {
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	var wmu sync.Mutex
	for {
		var l [2]byte
		if _, err := io.ReadFull(c, l[:]); err != nil {
			return
		}
		raw := make([]byte, binary.BigEndian.Uint16(l[:]))
		if _, err := io.ReadFull(c, raw); err != nil {
			return
		}
		go func() {
			sleepCtx(ctx, cfg.Delay)
			a := s.answer(cfg, raw)
			if a == nil {
				return
			}
			out := binary.BigEndian.AppendUint16(nil, uint16(len(a)))
			wmu.Lock()
			_, _ = c.Write(append(out, a...))
			wmu.Unlock()
		}()
	}
}

// hostileStream serves one length-prefixed stream with a hostile behaviour.
func (s *Servers) hostileStream(ctx context.Context, cfg Config, c io.ReadWriteCloser, reset func()) {
	defer c.Close()
	var l [2]byte
	if _, err := io.ReadFull(c, l[:]); err != nil {
		return
	}
	q := make([]byte, binary.BigEndian.Uint16(l[:]))
	if _, err := io.ReadFull(c, q); err != nil {
		return
	}
	s.count()
	switch cfg.Behavior {
	case hostile.Stall:
		<-ctx.Done()
	case hostile.Garbage:
		g := garbage(40)
		_, _ = c.Write(append([]byte{0, byte(len(g))}, g...))
	case hostile.Endless:
		chunk := garbage(4096)
		for ctx.Err() == nil {
			if _, err := c.Write(chunk); err != nil {
				return
			}
		}
	case hostile.WrongLength:
		a := s.answer(cfg, q)
		_, _ = c.Write(append([]byte{0xff, 0xff}, a...))
	case hostile.Reset:
		reset()
	case hostile.Flood:
		drip(ctx, c, []byte{0xff, 0xff})
	}
}

// drip writes head, then one byte per dripInterval until a write fails or ctx ends.
func drip(ctx context.Context, w io.Writer, head []byte) {
	if len(head) > 0 {
		if _, err := w.Write(head); err != nil {
			return
		}
	}
	for b := []byte{0}; ctx.Err() == nil; b[0]++ {
		if _, err := w.Write(b); err != nil {
			return
		}
		sleepCtx(ctx, dripInterval)
	}
}

// ---- DoH (HTTP/2) -----------------------------------------------------------------

func (s *Servers) dohHandler(ctx context.Context, cfg Config) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var raw []byte
		var err error
		if r.Method == http.MethodPost {
			raw, err = io.ReadAll(io.LimitReader(r.Body, 65535))
		} else {
			raw, err = base64.RawURLEncoding.DecodeString(r.URL.Query().Get("dns"))
		}
		if err != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		s.queryFrom(r.RemoteAddr)
		switch cfg.Behavior {
		case hostile.Stall:
			s.count()
			select {
			case <-r.Context().Done():
			case <-ctx.Done():
			}
			return
		case hostile.Garbage:
			s.count()
			w.Header().Set("Content-Type", "application/dns-message")
			_, _ = w.Write(garbage(40))
			return
		case hostile.Endless:
			s.count()
			w.Header().Set("Content-Type", "application/dns-message")
			chunk := garbage(4096)
			for ctx.Err() == nil && r.Context().Err() == nil {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
			return
		case hostile.WrongLength: // the HTTP analogue: an error status
			s.count()
			http.Error(w, "unavailable", http.StatusServiceUnavailable)
			return
		case hostile.Reset:
			s.count()
			panic(http.ErrAbortHandler)
		case hostile.Flood, hostile.Drip:
			s.count()
			w.Header().Set("Content-Type", "application/dns-message")
			w.WriteHeader(http.StatusOK)
			fctx, cancel := context.WithCancel(ctx)
			defer cancel()
			stop := context.AfterFunc(r.Context(), cancel)
			defer stop()
			drip(fctx, &flushWriter{w}, nil)
			return
		}
		sleepCtx(ctx, cfg.Delay)
		a := s.answer(cfg, raw)
		if a == nil {
			http.Error(w, "bad query", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/dns-message")
		_, _ = w.Write(a)
	})
}

func (s *Servers) startDoH(tb testing.TB, ctx context.Context, cfg Config) {
	ln, err := net.Listen("tcp", cfg.hostPort(cfg.Ports.DoH))
	if err != nil {
		tb.Fatal(err)
	}
	s.DoH = measure.AddrPortOf(ln.Addr())
	if cfg.Behavior == hostile.HugeHeaders {
		tl := tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{s.Cert}, NextProtos: []string{"h2"}})
		serveLoop(tb, func() { tl.Close() }, func() error {
			c, err := tl.Accept()
			if err != nil {
				return err
			}
			go s.hugeHeadersH2(ctx, c)
			return nil
		})
		return
	}
	srv := &http.Server{
		Handler:   s.dohHandler(ctx, cfg),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{s.Cert}, NextProtos: []string{"h2"}},
		ErrorLog:  nil,
	}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	tb.Cleanup(func() { _ = srv.Close() })
}

// ---- DoQ / DoH3 -------------------------------------------------------------------

// shapedConn drops the listed outgoing datagrams (0-based indices) and delays the others
// by a fixed one-way delay, in order: an emulated path for the QUIC servers on loopback.
// split holds each client address's second datagram (Config.SplitFlight).
type shapedConn struct {
	net.PacketConn
	mu    sync.Mutex
	n     int
	drop  map[int]bool
	delay time.Duration
	split time.Duration
	sent  map[string]int // datagrams sent to each address (split)
	queue chan delayed
	// earlyWait: how long a datagram to a client that offered early data (offered)
	// waits for a query from its address (queried: the channel closed when one arrived).
	earlyWait time.Duration
	offered   func(addr string) bool
	queried   func(addr string) chan struct{}
}

type delayed struct {
	due   time.Time
	b     []byte
	addr  net.Addr
	early <-chan struct{} // nil, or closed when a query from addr has arrived
}

func (c *shapedConn) WriteTo(b []byte, addr net.Addr) (int, error) {
	c.mu.Lock()
	i := c.n
	c.n++
	c.mu.Unlock()
	if c.drop[i] {
		return len(b), nil
	}
	due := time.Now().Add(c.delay)
	var early <-chan struct{}
	if c.earlyWait > 0 && c.offered(addr.String()) {
		early = c.queried(addr.String())
	}
	if c.split > 0 {
		// The address's second datagram waits; what follows it to the address goes
		// through the queue too, which is sent in order, so it stays behind.
		c.mu.Lock()
		k := addr.String()
		c.sent[k]++
		n := c.sent[k]
		c.mu.Unlock()
		switch {
		case n == 2:
			due = due.Add(c.split)
		case n < 2 && c.delay <= 0:
			return c.PacketConn.WriteTo(b, addr)
		}
	} else if c.delay <= 0 && early == nil {
		return c.PacketConn.WriteTo(b, addr)
	}
	c.queue <- delayed{due: due, b: append([]byte(nil), b...), addr: addr, early: early}
	return len(b), nil
}

func (c *shapedConn) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case d := <-c.queue:
			if d.early != nil {
				t := time.NewTimer(c.earlyWait)
				select {
				case <-d.early:
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
					return
				}
				t.Stop()
			}
			if w := time.Until(d.due); w > 0 {
				t := time.NewTimer(w)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
					return
				}
			}
			_, _ = c.PacketConn.WriteTo(d.b, d.addr)
		}
	}
}

func (s *Servers) startQUIC(tb testing.TB, ctx context.Context, cfg Config, h3 bool) {
	port := cfg.Ports.DoQ
	if h3 {
		port = cfg.Ports.DoH3
	}
	udp, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr(cfg.Host), port)))
	if err != nil {
		tb.Fatal(err)
	}
	var pc net.PacketConn = udp
	earlyWait := cfg.EarlyDataWait
	if earlyWait == 0 && (cfg.Allow0RTT || cfg.Reject0RTT) {
		earlyWait = DefaultEarlyDataWait
	}
	if len(cfg.DropDatagrams) > 0 || cfg.QUICDelay > 0 || cfg.SplitFlight > 0 || earlyWait > 0 {
		sc := &shapedConn{PacketConn: udp, drop: map[int]bool{}, delay: cfg.QUICDelay, split: cfg.SplitFlight,
			sent: map[string]int{}, queue: make(chan delayed, 4096),
			earlyWait: earlyWait, offered: s.offeredEarlyData, queried: s.queryChan}
		for _, i := range cfg.DropDatagrams {
			sc.drop[i] = true
		}
		go sc.run(ctx)
		pc = sc
	}
	tr := &quic.Transport{Conn: pc}
	if cfg.Retry {
		tr.VerifySourceAddress = func(net.Addr) bool { return true }
	}
	switch {
	case cfg.IgnoreTokens:
		tr.MaxTokenAge = time.Nanosecond
	case cfg.TokenAge > 0:
		tr.MaxTokenAge = cfg.TokenAge
	}
	alpn := alpnDoQ
	if h3 {
		alpn = http3.NextProtoH3
	}
	tconf := &tls.Config{Certificates: []tls.Certificate{s.Cert}, NextProtos: []string{alpn},
		GetConfigForClient: func(info *tls.ClientHelloInfo) (*tls.Config, error) {
			s.noteHello(info)
			return nil, nil
		}}
	if cfg.Reject0RTT {
		rejectEarlyData(tb, tconf)
	}
	idle := cfg.IdleTimeout
	if idle <= 0 {
		idle = 10 * time.Second
	}
	qconf := &quic.Config{Allow0RTT: cfg.Allow0RTT || cfg.Reject0RTT, MaxIdleTimeout: idle, Versions: cfg.QUICVersions}
	if h3 && cfg.Behavior != hostile.Flood && cfg.Behavior != hostile.HugeHeaders {
		s.DoH3 = measure.AddrPortOf(udp.LocalAddr())
		srv := &http3.Server{Handler: s.dohHandler(ctx, cfg), TLSConfig: tconf, QUICConfig: qconf}
		ln, err := tr.ListenEarly(http3.ConfigureTLSConfig(tconf), qconf)
		if err != nil {
			tb.Fatal(err)
		}
		go func() { _ = srv.ServeListener(ln) }()
		tb.Cleanup(func() { _ = srv.Close(); _ = tr.Close(); udp.Close() })
		return
	}
	// DoQ, or an HTTP/3 server framing by hand: each connection served on its own
	// goroutine.
	serve := func(conn *quic.Conn) { s.serveDoQ(ctx, cfg, conn) }
	if h3 {
		s.DoH3 = measure.AddrPortOf(udp.LocalAddr())
		serve = func(conn *quic.Conn) { s.rawH3(ctx, cfg, conn) }
	} else {
		s.DoQ = measure.AddrPortOf(udp.LocalAddr())
	}
	ln, err := tr.ListenEarly(tconf, qconf)
	if err != nil {
		tb.Fatal(err)
	}
	serveLoop(tb, func() { ln.Close(); _ = tr.Close(); udp.Close() }, func() error {
		conn, err := ln.Accept(ctx)
		if err != nil {
			return err
		}
		go serve(conn)
		return nil
	})
}

// rejectEarlyData makes tconf resume the sessions of the tickets it issued without their
// early data (RFC 8446 §4.2.10: the server then omits early_data from its
// EncryptedExtensions). The ticket keys are fixed so that the clones quic-go and http3
// make of tconf decrypt what tconf does.
func rejectEarlyData(tb testing.TB, tconf *tls.Config) {
	var key [32]byte
	if _, err := rand.Read(key[:]); err != nil {
		tb.Fatal(err)
	}
	tconf.SetSessionTicketKeys([][32]byte{key})
	tconf.UnwrapSession = func(identity []byte, cs tls.ConnectionState) (*tls.SessionState, error) {
		ss, err := tconf.DecryptTicket(identity, cs)
		if ss != nil {
			ss.EarlyData = false
		}
		return ss, err
	}
}

func (s *Servers) serveDoQ(ctx context.Context, cfg Config, conn *quic.Conn) {
	for {
		str, err := conn.AcceptStream(ctx)
		if err != nil {
			return
		}
		go func() {
			if cfg.Behavior != hostile.None && !httpOnly(cfg.Behavior) {
				s.hostileStream(ctx, cfg, &doqStream{str}, func() { str.CancelWrite(0x2) })
				return
			}
			defer str.Close()
			raw, err := io.ReadAll(io.LimitReader(str, 65537))
			if err != nil || len(raw) < 2 {
				str.CancelWrite(0x2)
				return
			}
			s.queryFrom(conn.RemoteAddr().String())
			sleepCtx(ctx, cfg.Delay)
			a := s.answer(cfg, raw[2:])
			if a == nil {
				str.CancelWrite(0x2)
				return
			}
			out := make([]byte, 2+len(a))
			binary.BigEndian.PutUint16(out, uint16(len(a)))
			copy(out[2:], a)
			_, _ = str.Write(out)
		}()
	}
}

// rawH3 is an HTTP/3 server that frames by hand what http3.Server cannot write: Flood
// answers every request with an endless stream of unknown frames (each 4 bytes), never a
// HEADERS frame; HugeHeaders with the header of a HEADERS frame declaring 2^40 bytes,
// then nothing until the client leaves.
func (s *Servers) rawH3(ctx context.Context, cfg Config, conn *quic.Conn) {
	if ctl, err := conn.OpenUniStream(); err == nil {
		_, _ = ctl.Write([]byte{h3StreamControl, h3FrameSettings, 0})
	}
	var chunk []byte
	if cfg.Behavior == hostile.HugeHeaders {
		chunk = quicvarint.Append([]byte{h3FrameHeaders}, 1<<40)
	} else {
		chunk = make([]byte, 0, 4096)
		for len(chunk)+4 <= cap(chunk) {
			chunk = append(chunk, h3FrameUnknown, 2, 0, 0)
		}
	}
	for {
		str, err := conn.AcceptStream(ctx)
		if err != nil {
			return
		}
		s.count()
		go func() {
			go func() { _, _ = io.Copy(io.Discard, str) }() // the request, unread
			if cfg.Behavior == hostile.HugeHeaders {
				_, _ = str.Write(chunk)
				<-str.Context().Done()
				return
			}
			for ctx.Err() == nil {
				if _, err := str.Write(chunk); err != nil {
					return
				}
			}
		}()
	}
}

// hugeHeadersH2 serves one HTTP/2 connection (HugeHeaders): its SETTINGS, then, for the
// client's first request, the header of a HEADERS frame declaring the longest payload
// a frame can (2^24-1 bytes), and nothing more until the client leaves.
func (s *Servers) hugeHeadersH2(ctx context.Context, c net.Conn) {
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(c, preface); err != nil {
		return
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		return
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		if h, ok := f.(*http2.HeadersFrame); ok {
			s.count()
			id := h.StreamID
			_, _ = c.Write([]byte{0xff, 0xff, 0xff, byte(http2.FrameHeaders), byte(http2.FlagHeadersEndHeaders),
				byte(id >> 24), byte(id >> 16), byte(id >> 8), byte(id)})
			_, _ = io.Copy(io.Discard, c)
			return
		}
	}
}

// flushWriter flushes an HTTP response after every write: one DATA frame each.
type flushWriter struct{ w http.ResponseWriter }

func (f *flushWriter) Write(b []byte) (int, error) {
	n, err := f.w.Write(b)
	if err == nil {
		err = http.NewResponseController(f.w).Flush()
	}
	return n, err
}

// doqStream closes only the send side on Close (the FIN), as a DoQ server does.
type doqStream struct{ *quic.Stream }

func (d *doqStream) Close() error { return d.Stream.Close() }

// serveMiekg starts srv on its socket, waits until it serves, and shuts it down at cleanup.
// A stream (DoTCP, DoT) is served until the client closes it or it idles: miekg's
// default closes it after 128 queries, which no resolver of the population does and
// which makes a pipelining client (dnsperf) wait out the queries it had in flight.
func serveMiekg(tb testing.TB, srv *dns.Server) {
	srv.MaxTCPQueries = -1
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go func() { _ = srv.ActivateAndServe() }()
	<-started
	tb.Cleanup(func() { _ = srv.Shutdown() })
}
