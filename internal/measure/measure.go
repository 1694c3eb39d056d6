// Package measure times DNS exchanges over DoUDP, DoTCP, DoT, DoH (HTTP/2), DoQ and DoH3
// behind one context-taking interface. Every exchange returns its phases timed
// separately, as the study defines them (Kosek et al., PAM 2022, Sect. 4):
//
//   - handshake time: first packet of the session establishment sent -> session
//     established (TCP: 3-way handshake; DoT/DoH: TCP + TLS; DoQ/DoH3: QUIC handshake
//     complete at the client);
//   - resolve time: first packet of the DNS query sent -> valid DNS response received.
//
// plus what was negotiated (TLS version and cipher, QUIC version, ALPN, token, Retry,
// Version Negotiation, resumption, 0-RTT, TFO) and a classified Status.
package measure

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/doqscan/doqscan/internal/dnsmsg"
	"github.com/doqscan/doqscan/internal/kstamp"
	"github.com/doqscan/doqscan/internal/measure/qlogana"
	"github.com/doqscan/doqscan/internal/measure/rtt"
	"github.com/doqscan/doqscan/internal/protocol"
)

// Protocol names a protocol of internal/protocol's table (schema.sql
// measurements.protocol).
type Protocol string

// The protocols (internal/protocol).
const (
	DoUDP Protocol = protocol.DoUDP
	DoTCP Protocol = protocol.DoTCP
	DoT   Protocol = protocol.DoT
	DoH   Protocol = protocol.DoH
	DoQ   Protocol = protocol.DoQ
	DoH3  Protocol = protocol.DoH3
)

// Default ports (internal/protocol).
const (
	PortDNS   = protocol.PortDNS
	PortDoT   = protocol.PortDoT
	PortHTTPS = protocol.PortHTTPS
	PortDoQ   = protocol.PortDoQ
)

// Spec is p's row of internal/protocol's table (the zero Spec for a name not in it).
func (p Protocol) Spec() protocol.Spec {
	s, _ := protocol.Lookup(string(p))
	return s
}

// DefaultPort is the port p uses where a target names none (its table row's first).
func (p Protocol) DefaultPort() uint16 { return p.Spec().DefaultPort() }

// Mode is how sessions are set up, as in schema.sql measurements.mode.
type Mode string

const (
	ModeFresh      Mode = protocol.ModeFresh
	ModeResumed    Mode = protocol.ModeResumed
	Mode0RTT       Mode = protocol.Mode0RTT
	ModePersistent Mode = protocol.ModePersistent
)

// Modes lists the valid modes (internal/protocol's Modes).
var Modes = func() []Mode {
	out := make([]Mode, len(protocol.Modes))
	for i, m := range protocol.Modes {
		out[i] = Mode(m)
	}
	return out
}()

// KeyShare names the ClientHello key share, as stored in measurements.key_share.
type KeyShare string

const (
	// KeyShareX25519 is what 2021-era clients sent: one Initial.
	KeyShareX25519 KeyShare = "x25519"
	// KeyShareMLKEM is Go's default hybrid X25519MLKEM768: the ClientHello spans two
	// Initials, which doubles the server's anti-amplification budget (RFC 9000 §8.1).
	KeyShareMLKEM KeyShare = "x25519mlkem768"
)

// Curves returns the tls.Config.CurvePreferences for k (nil: Go's default).
func (k KeyShare) Curves() ([]tls.CurveID, error) {
	switch k {
	case KeyShareX25519:
		return []tls.CurveID{tls.X25519}, nil
	case KeyShareMLKEM, "":
		return []tls.CurveID{tls.X25519MLKEM768, tls.X25519}, nil
	}
	return nil, fmt.Errorf("unknown key share %q", k)
}

// DoH variants (internal/protocol).
const (
	VariantGET  = protocol.VariantGET
	VariantPOST = protocol.VariantPOST
)

// DefaultTimeout is the per-exchange timeout (the study's 5 s).
const DefaultTimeout = 5 * time.Second

// Peer carries what a warm-up leaves for the measured exchange with the same resolver:
// TLS session tickets, QUIC NEW_TOKEN tokens (RFC 9000 §8.1.3) and the negotiated QUIC
// version. One Peer per (resolver, protocol, port): the measured connection then presents
// exactly its own warm-up's token.
type Peer struct {
	mu          sync.Mutex
	Sessions    tls.ClientSessionCache
	Tokens      quic.TokenStore
	QUICVersion quic.Version // 0 until a connection negotiated one
}

// NewPeer returns empty per-resolver state.
func NewPeer() *Peer {
	return &Peer{Sessions: tls.NewLRUClientSessionCache(4), Tokens: quic.NewLRUTokenStore(1, 4)}
}

func (p *Peer) version() quic.Version {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.QUICVersion
}

func (p *Peer) setVersion(v quic.Version) {
	p.mu.Lock()
	p.QUICVersion = v
	p.mu.Unlock()
}

// Request is one exchange to make: a session (unless DoUDP) and Queries queries on it.
type Request struct {
	Addr       netip.AddrPort
	ServerName string // SNI; empty: none (as the study)
	Name       string // query name (type A, the study's); dnsmsg.DefaultQueryName when empty
	Timeout    time.Duration
	Mode       Mode
	Queries    int // persistent mode: queries on the session (>= 1)
	KeyShare   KeyShare
	Variant    string   // DoH/DoH3: GET or POST
	ALPN       []string // DoQ: the ALPN(s) to offer (the verified one); default "doq"
	Path       string   // DoH: URL path; "/dns-query" when empty
	Peer       *Peer    // state shared between warm-up and measured exchange; nil: fresh
	// TCPKeepalive adds edns-tcp-keepalive to TCP-based queries (RFC 7828).
	TCPKeepalive bool
	// FastOpen asks for TCP Fast Open (RFC 7413) on TCP-based protocols.
	FastOpen bool
	// Next, when set, replaces Name and Queries: it is called before each query of
	// the session (seq from 0) and gives its name and type; ok false ends the session
	// there (before the first query: a session without queries). It may block, as a
	// check that waits between two queries does, and must return promptly once ctx is done.
	Next func(ctx context.Context, seq int) (name string, qtype uint16, ok bool)
	// Streams, persistent mode: how many of the session's queries may be outstanding at
	// once (<= 1: one after another). DoQ opens a stream per query (RFC 9250 §4.2), DoH
	// and DoH3 send concurrent requests on the connection, DoTCP and DoT pipeline
	// queries with distinct IDs and match answers by ID in any order (RFC 7766 §6.2.1.1);
	// DoUDP, which has no session, sends its queries one after another. Next is then
	// called from one goroutine, seq in order, while earlier queries are outstanding. A query's resolve
	// time starts just before its first write (not the kernel's write log, which cannot
	// tell concurrent queries apart) and ends at the kernel arrival of the last read
	// before its answer was seen.
	Streams int
	// QueryTimeout bounds each query when Streams > 1 (0: Timeout); Timeout still bounds
	// the whole exchange.
	QueryTimeout time.Duration
	// InitialPacketSize pads a DoQ/DoH3 client's Initial datagrams to this many bytes
	// (quic-go's Config.InitialPacketSize, 1200..1452; 0: quic-go's 1,280). The server's
	// anti-amplification budget is 3x what it receives (RFC 9000 §8.1).
	InitialPacketSize uint16
	// listenPacket, when set, opens a DoQ/DoH3 connection's socket in place of a
	// kernel-timestamped UDP socket (tests: an in-process link); the Log it returns stays
	// empty when the socket has no kernel timestamps, and the qlog's times are taken.
	listenPacket func(netip.AddrPort) (net.PacketConn, *kstamp.Log, error)
}

// NextQuery returns query seq's name and type, and whether that query runs (Next, or
// Queries of Name, type A).
func (r *Request) NextQuery(ctx context.Context, seq int) (string, uint16, bool) {
	if r.Next != nil {
		return r.Next(ctx, seq)
	}
	if seq >= r.queries() {
		return "", 0, false
	}
	return r.name(), 0, true // 0: dnsmsg.Query's default, type A
}

func (r *Request) name() string {
	if r.Name == "" {
		return dnsmsg.DefaultQueryName
	}
	return r.Name
}

func (r *Request) timeout() time.Duration {
	if r.Timeout <= 0 {
		return DefaultTimeout
	}
	return r.Timeout
}

func (r *Request) queries() int {
	if r.Mode == ModePersistent && r.Queries > 1 {
		return r.Queries
	}
	return 1
}

// Query is the outcome of one DNS query of an exchange.
type Query struct {
	Seq       int
	StartedAt time.Time
	Resolve   time.Duration // valid only when Status is ok
	Status    Status
	Err       error
	Rcode     int
	Answers   []string
	// KeepaliveTimeout: edns-tcp-keepalive timeout from the response, -1 if absent.
	KeepaliveTimeout int
}

// Result is the outcome of one exchange.
type Result struct {
	Protocol  Protocol
	StartedAt time.Time
	// Handshake is set for session protocols once the session is established.
	Handshake    time.Duration
	HasHandshake bool
	// HandshakeWall is the wall-clock handshake around the library call (DoQ/DoH3, where
	// Handshake comes from the qlog's packet timestamps); 0 when equal to Handshake.
	HandshakeWall time.Duration
	Status        Status // of the whole exchange: the first failure, or ok
	Err           error
	Queries       []Query

	TLSVersion    uint16
	TLSCipher     string
	QUICVersion   uint32
	ALPN          string
	TokenReceived *bool
	TokenUsed     *bool
	RetrySeen     *bool
	VNSeen        *bool
	Resumed       *bool
	Used0RTT      *bool
	TFO           *bool
	// PeerMaxStreams is the concurrent-stream limit the server announced (DoH: its
	// SETTINGS_MAX_CONCURRENT_STREAMS, RFC 9113 §6.5.2); nil when it announced none. DoQ's
	// (initial_max_streams_bidi) is in QlogTrace.Server().Params.
	PeerMaxStreams *uint32
	// Qlog is the client's qlog (JSON-SEQ) of a QUIC connection, uncompressed, at most
	// QlogLimit bytes. QlogTruncated: it reached the bound and was cut after its last
	// complete record (a qlogana.TruncatedEvent record says so in the qlog too).
	Qlog          []byte
	QlogTruncated bool
	// ODCID is the original destination connection ID of the dial's first connection
	// attempt (quic-go starts another, with its own, after Version Negotiation): the
	// group_id of Qlog's first trace.
	ODCID []byte
	// QlogTrace is Qlog parsed and QlogAnalysis its analysis without an RTT sample (nil
	// when the qlog could not be parsed): callers re-analyse the trace, not the bytes.
	QlogTrace    *qlogana.Trace
	QlogAnalysis *qlogana.Analysis

	// The stamps behind the durations, for checking them against a packet capture (the
	// testbed's timing benchmarks do: internal/testbed/wirecap). Local is the session's
	// client address (each Query ran from Query.StartedAt, just before the send syscall of
	// its first packet, to StartedAt+Resolve, the kernel receive time of the packet that
	// completed the answer). TCPHandshake is the TCP part of Handshake (DoTCP, DoT, DoH);
	// CryptoFrom..CryptoTo the TLS part (DoT, DoH: ClientHello write to the arrival of the
	// server's last flight) or the QUIC handshake (DoQ, DoH3), zero when not stamped.
	Local                netip.AddrPort
	TCPHandshake         time.Duration
	CryptoFrom, CryptoTo time.Time

	handshakeStamped bool // Handshake is from kernel timestamps (DoQ/DoH3)
}

// AddrPortOf is a UDP or TCP address as a netip.AddrPort (zero for other kinds).
func AddrPortOf(a net.Addr) netip.AddrPort {
	switch v := a.(type) {
	case *net.UDPAddr:
		return v.AddrPort()
	case *net.TCPAddr:
		return v.AddrPort()
	}
	return netip.AddrPort{}
}

// First returns the first query (a zero Query if none ran).
func (r *Result) First() Query {
	if len(r.Queries) == 0 {
		return Query{Status: r.Status, Err: r.Err}
	}
	return r.Queries[0]
}

// fail ends the exchange before its queries: setting up its session (socket, connect,
// handshake) under ctx failed with err.
func (r *Result) fail(ctx context.Context, err error) *Result {
	r.Status, r.Err = Failure(ctx, StepHandshake, err)
	return r
}

// finish sets the exchange status from its queries.
func (r *Result) finish() *Result {
	r.Status = StatusOK
	var first *Query
	for i := range r.Queries {
		if r.Queries[i].Status != StatusOK {
			first = &r.Queries[i]
			break
		}
	}
	if first != nil {
		r.Status, r.Err = first.Status, first.Err
	}
	return r
}

// Measurer is one protocol's client. Measure never returns without a classified Status
// and returns within the request's timeout (plus scheduling slack).
type Measurer interface {
	Protocol() Protocol
	Measure(ctx context.Context, req *Request) *Result
}

// measurer is the Measurer of one protocol: Measure bounds ctx by the request's timeout
// and hands run an empty Result of that protocol to fill in and return, with the
// client's options.
type measurer struct {
	proto Protocol
	run   runner
	c     client
}

// runner is one protocol's client.
type runner func(ctx context.Context, req *Request, res *Result, c *client) *Result

// client is how a measurer sets up its sessions and who runs their queries: For's
// measure Request's queries (drive) and record the qlog; Load's are a load generator's.
type client struct {
	drive  Driver
	noQlog bool
	h2     func(net.Conn) (HTTP2Conn, error) // DoH: the HTTP/2 client connection (nil: x/net's)
}

func (m measurer) Protocol() Protocol { return m.proto }

func (m measurer) Measure(ctx context.Context, req *Request) *Result {
	ctx, cancel := context.WithTimeout(ctx, req.timeout())
	defer cancel()
	return m.run(ctx, req, &Result{Protocol: m.proto}, &m.c)
}

// runners holds each protocol's client.
var runners = map[Protocol]runner{
	DoUDP: measureUDP,
	DoTCP: measureTCP,
	DoT:   measureDoT,
	DoH:   measureDoH,
	DoQ:   measureDoQ,
	DoH3:  measureDoH3,
}

// For returns the measurer of protocol p.
func For(p Protocol) (Measurer, error) {
	if run, ok := runners[p]; ok {
		return measurer{proto: p, run: run, c: client{drive: drive}}, nil
	}
	return nil, fmt.Errorf("unknown protocol %q", p)
}

// Protocols lists every protocol in measuring order (internal/protocol's table).
var Protocols = func() []Protocol {
	out := make([]Protocol, len(protocol.Table))
	for i, s := range protocol.Table {
		out[i] = Protocol(s.Name)
	}
	return out
}()

// Transport returns the transport whose RTT pairs with p's handshake (the study's
// Sect. 2; rtt_samples.transport): its table row's RTT.
func (p Protocol) Transport() rtt.Transport { return rtt.Transport(p.Spec().RTT) }

func boolp(b bool) *bool { return &b }

// shown is what a connection showed of something it may or may not have seen: true
// once seen; false only if the connection got far enough that it would have been
// (known); otherwise nil, unknown.
func shown(seen, known bool) *bool {
	if !seen && !known {
		return nil
	}
	return boolp(seen)
}
