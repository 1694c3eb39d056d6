// Package simdns is the testbed's own multi-tenant server for the DNS transports that are
// not QUIC: DoUDP (UDP/53), DoTCP (TCP/53), DoT (TCP/853, RFC 7858) and DoH (TCP/443,
// RFC 8484). One process answers for every address of the simulated internet through
// wildcard listeners and dispatches each packet or connection, by the address it was sent
// to, to the behaviour the population assigns that address: an honest resolver, a
// refusing one, or a hostile one (garbage, truncated replies, wrong IDs, wrong lengths,
// resets, stalls, endless streams).
//
// One file per protocol: udp.go, tcp.go, dot.go, doh.go; answer.go builds the replies
// every protocol shares; front.go is the TCP accept path (limits, connection-level
// hostile behaviours, TCP Fast Open listeners).
package simdns

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"github.com/doqscan/doqscan/internal/hostile"
	"github.com/doqscan/doqscan/internal/testbed/population"
)

// Protocol is one DNS transport simdns serves.
type Protocol uint8

const (
	DoUDP Protocol = iota + 1 // RFC 1035 §4.2.1, UDP/53
	DoTCP                     // RFC 1035 §4.2.2 and RFC 7766, TCP/53
	DoT                       // RFC 7858, TCP/853
	DoH                       // RFC 8484, TCP/443
)

func (p Protocol) String() string {
	switch p {
	case DoUDP:
		return "doudp"
	case DoTCP:
		return "dotcp"
	case DoT:
		return "dot"
	case DoH:
		return "doh"
	}
	return fmt.Sprintf("protocol(%d)", uint8(p))
}

// Standard ports (IANA; RFC 1035 §4.2, RFC 7858 §3.1, RFC 8484 §8 uses HTTPS's 443).
const (
	PortDNS = 53
	PortDoT = 853
	PortDoH = 443
)

// Class is what a server does with a query: answer, refuse, fail, or one of the hostile
// behaviours simdns acts out (Hostile), named as in hostile.Behaviours. The same classes
// apply to every protocol; where one makes no sense for a transport the nearest
// behaviour is used (documented per class).
type Class string

const (
	// ClassAnswer answers every query: A queries with the fixed Answer address, other
	// types with NOERROR and no records.
	ClassAnswer Class = "answer"
	// ClassRefused answers every query with RCODE REFUSED (RFC 1035 §4.1.1).
	ClassRefused Class = "refused"
	// ClassServfail answers every query with RCODE SERVFAIL (RFC 1035 §4.1.1).
	ClassServfail Class = "servfail"
)

// The hostile classes: the behaviours of hostile.Behaviours simdns acts out.
const (
	// ClassGarbage replies with random bytes that are not a DNS message (TCP: framed with
	// a correct length prefix; DoH: as an application/dns-message body).
	ClassGarbage = Class(hostile.Garbage)
	// ClassTruncated replies with the first half of a correct response (framed with the
	// length of the half, so only the DNS parser can notice).
	ClassTruncated = Class(hostile.Truncated)
	// ClassWrongID replies with a correct response whose message ID is not the query's.
	ClassWrongID = Class(hostile.WrongID)
	// ClassWrongLength frames a correct response with a 2-byte length prefix larger than
	// the message, then closes (TCP/DoT); DoH declares a Content-Length larger than the
	// body. On UDP it behaves like ClassTruncated.
	ClassWrongLength = Class(hostile.WrongLength)
	// ClassReset reads the first bytes of a connection (the query, or the TLS ClientHello)
	// and resets it (RST). On UDP nothing is sent.
	ClassReset = Class(hostile.Reset)
	// ClassStall accepts and reads but never answers; TLS transports complete the
	// handshake first. On UDP nothing is sent.
	ClassStall = Class(hostile.Stall)
	// ClassTLSStall accepts a connection, reads the ClientHello and never answers it
	// (DoT/DoH); on DoTCP and DoUDP it behaves like ClassStall.
	ClassTLSStall = Class(hostile.TLSStall)
	// ClassEndless sends a reply that never ends: TCP/DoT a length prefix of 65535 followed
	// by a trickle of bytes; DoH a response body that never ends. On UDP it sends a burst
	// of wrong-ID replies (bounded) instead.
	ClassEndless = Class(hostile.Endless)
)

// Hostile is the part of hostile.Behaviours simdns acts out, each as the Class of the
// same name.
var Hostile = hostile.Subset{
	Implements: []hostile.Behaviour{hostile.Garbage, hostile.Truncated, hostile.WrongID, hostile.WrongLength,
		hostile.Reset, hostile.Stall, hostile.TLSStall, hostile.Endless},
	Omits: map[hostile.Behaviour]string{
		hostile.BadVN:       "QUIC only (Version Negotiation): simquic's raw responder",
		hostile.DraftOnly:   "QUIC only (Version Negotiation): simquic's raw responder",
		hostile.CloseApp:    "QUIC only (an application CONNECTION_CLOSE)",
		hostile.Flood:       "acted out by measuretest's in-process servers only",
		hostile.Drip:        "acted out by measuretest's in-process servers only",
		hostile.HugeHeaders: "acted out by measuretest's in-process servers only",
	},
}

// HostileClass returns the class acting out b, false if simdns does not act it out.
func HostileClass(b hostile.Behaviour) (Class, bool) {
	if !slices.Contains(Hostile.Implements, b) {
		return "", false
	}
	return Class(b), true
}

// Classes lists every class, for tables and tests.
var Classes = []Class{ClassAnswer, ClassRefused, ClassServfail, ClassGarbage, ClassTruncated, ClassWrongID,
	ClassWrongLength, ClassReset, ClassStall, ClassTLSStall, ClassEndless}

// Behaviour is what one address does on one protocol.
type Behaviour struct {
	Class Class
	// Answer is the address A queries are answered with (ClassAnswer and the hostile
	// classes that start from a correct reply). Zero: DefaultAnswer.
	Answer netip.Addr
	// TTL of the answer record (seconds). Zero: DefaultTTL.
	TTL uint32
	// TLS12Only limits DoT/DoH to TLS 1.2 (default: TLS 1.2 and 1.3, so 1.3 is negotiated).
	TLS12Only bool
	// SessionTickets lets DoT/DoH clients resume with a session ticket (RFC 8446 §2.2).
	SessionTickets bool
	// Keepalive adds edns-tcp-keepalive (RFC 7828 §3.3.2) to DoTCP/DoT replies to queries
	// that carry the option.
	Keepalive bool
	// FastOpen enables TCP Fast Open (RFC 7413) on this address's TCP listeners (DoTCP,
	// DoT, DoH): a dedicated listener bound to the address with TCP_FASTOPEN set.
	FastOpen bool
	// HTTP1Only offers only http/1.1 in DoH's ALPN (default: h2 and http/1.1).
	HTTP1Only bool
	// MaxQueries > 0: a DoTCP/DoT connection is closed after this many answers.
	MaxQueries int
	// Idle > 0 replaces Limits.IdleTimeout for this address's DoTCP/DoT connections.
	Idle time.Duration
	// DDR are the SVCB records answering _dns.resolver.arpa SVCB (RFC 9462 §4; empty:
	// NOERROR without records, like any other type).
	DDR []dns.RR
}

// DefaultAnswer is the A record every answering server returns (RFC 5737 TEST-NET-1:
// data only, never a packet destination).
var DefaultAnswer = netip.AddrFrom4([4]byte{192, 0, 2, 1})

// DefaultTTL is the TTL of the answer record when Behaviour.TTL is zero.
const DefaultTTL = 300

// Directory says what each address does. It must be safe for concurrent use.
type Directory interface {
	// Behaviour returns the behaviour of addr on p; ok false when addr does not offer p
	// (UDP: the query is dropped; TCP: the connection is reset at once, the closest a
	// wildcard listener gets to a closed port).
	Behaviour(addr netip.Addr, p Protocol) (b Behaviour, ok bool)
	// FastOpen lists the addresses whose TCP listeners have TCP Fast Open for p (they
	// get their own listeners, bound before the server reports ready).
	FastOpen(p Protocol) []netip.Addr
}

// CertSource gives the certificate an address presents on DoT/DoH. serverName is the
// ClientHello's SNI ("" without). A nil certificate with a nil error means "no certificate
// for this name": the handshake fails with the unrecognized_name alert (RFC 6066 §3), what
// an SNI-requiring server sends.
type CertSource interface {
	Certificate(addr netip.Addr, p Protocol, serverName string) (*tls.Certificate, error)
}

// Ports are the ports simdns listens on; zero fields take the standard port. Tests use
// -1 for "any free port" (see Server.Addr).
type Ports struct {
	UDP, TCP, DoT, DoH int
}

// Limits bound what a hostile client (or a hostile behaviour held open) can cost.
type Limits struct {
	MaxConns     int           // concurrent TCP connections over all protocols (default 4096)
	IdleTimeout  time.Duration // a connection with no complete query for this long is closed (default 10 s)
	HoldTimeout  time.Duration // stalls and endless streams end after this long (default 60 s)
	UDPWorkers   int           // goroutines reading the UDP socket (default 4)
	MaxQueryTCP  int           // largest query accepted on a stream (default 4096 bytes)
	TrickleEvery time.Duration // ClassEndless: one byte per this interval (default 100 ms)
}

func (l *Limits) defaults() {
	if l.MaxConns <= 0 {
		l.MaxConns = 4096
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = population.SimDNSIdle
	}
	if l.HoldTimeout <= 0 {
		l.HoldTimeout = 60 * time.Second
	}
	if l.UDPWorkers <= 0 {
		l.UDPWorkers = 4
	}
	if l.MaxQueryTCP <= 0 {
		l.MaxQueryTCP = 4096
	}
	if l.TrickleEvery <= 0 {
		l.TrickleEvery = 100 * time.Millisecond
	}
}

// Config configures Start.
type Config struct {
	Directory Directory
	Certs     CertSource // required when any address offers DoT or DoH
	// Listen is the wildcard (or single) address to bind; default 0.0.0.0.
	Listen netip.Addr
	// Listen6, when set, is bound too: the IPv6 wildcard [::] (IPv6-only sockets, replies
	// from the address each datagram was sent to via IPV6_PKTINFO) or one IPv6 address.
	Listen6 netip.Addr
	Ports   Ports
	Limits  Limits
	// MapAddr maps the local address a query arrived on to the directory address whose
	// behaviour answers it; LocalAddr is its inverse (used to bind TCP Fast Open
	// listeners). Nil: identity. Tests on loopback map 127.19.x.y <-> 198.19.x.y.
	MapAddr, LocalAddr func(netip.Addr) netip.Addr
	// EnableFastOpenSysctl sets the server bit of net.ipv4.tcp_fastopen in the current
	// network namespace (Linux requires it for TCP_FASTOPEN listeners to accept data in
	// SYNs). Only for the testbed's internet namespace; never on the host.
	EnableFastOpenSysctl bool
	Logger               *slog.Logger
}

// Server is a running simdns. All its listeners are bound when Start returns.
type Server struct {
	cfg    Config
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	conns  chan struct{} // semaphore of open TCP connections

	udp       []*net.UDPConn
	listeners []net.Listener
	addrs     map[Protocol]net.Addr // IPv4 listener of each protocol
	addrs6    map[Protocol]net.Addr // IPv6 listener of each protocol (Listen6)

	mu                             sync.Mutex
	errs                           []error
	nUDP, nTCP, nRejected, nPanics atomic.Uint64
	doh                            *connListener
	tlsMu                          sync.Mutex
	tlsCfg                         map[tlsKey]*tls.Config
}

// Stats counts what the server did (for logs and tests).
type Stats struct {
	UDPQueries, TCPConns, Rejected, Panics uint64
}

// Start binds every listener and serves in goroutines until ctx ends. When it returns
// without error, every listener is bound.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Directory == nil {
		return nil, errors.New("simdns: Config.Directory is nil")
	}
	if !cfg.Listen.IsValid() {
		cfg.Listen = netip.IPv4Unspecified()
	}
	if cfg.MapAddr == nil {
		cfg.MapAddr = func(a netip.Addr) netip.Addr { return a }
	}
	if cfg.LocalAddr == nil {
		cfg.LocalAddr = func(a netip.Addr) netip.Addr { return a }
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.Limits.defaults()
	ctx, cancel := context.WithCancel(ctx)
	s := &Server{cfg: cfg, log: cfg.Logger, ctx: ctx, cancel: cancel,
		conns: make(chan struct{}, cfg.Limits.MaxConns), addrs: map[Protocol]net.Addr{}, addrs6: map[Protocol]net.Addr{},
		tlsCfg: map[tlsKey]*tls.Config{}}
	if cfg.EnableFastOpenSysctl {
		if err := enableFastOpenSysctl(); err != nil {
			cancel()
			return nil, err
		}
	}
	if err := s.bind(); err != nil {
		cancel()
		s.closeAll()
		return nil, err
	}
	go func() {
		<-ctx.Done()
		s.closeAll()
	}()
	return s, nil
}

// Run starts the server and blocks until ctx ends; ready (if not nil) is closed once every
// listener is bound.
func Run(ctx context.Context, cfg Config, ready chan<- struct{}) error {
	s, err := Start(ctx, cfg)
	if err != nil {
		return err
	}
	if ready != nil {
		close(ready)
	}
	return s.Wait()
}

// Wait blocks until the server has stopped (its context ended) and every goroutine is
// gone.
func (s *Server) Wait() error {
	<-s.ctx.Done()
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	return errors.Join(s.errs...)
}

// Close stops the server and waits for it.
func (s *Server) Close() error {
	s.cancel()
	return s.Wait()
}

// Addr is the bound address of p's wildcard listener (to learn ephemeral ports in tests).
func (s *Server) Addr(p Protocol) net.Addr { return s.addrs[p] }

// Addr6 is the bound address of p's IPv6 listener; nil without Listen6.
func (s *Server) Addr6(p Protocol) net.Addr { return s.addrs6[p] }

// listens are the addresses every protocol binds: Listen, then Listen6 if set.
func (s *Server) listens() []netip.Addr {
	if s.cfg.Listen6.IsValid() {
		return []netip.Addr{s.cfg.Listen, s.cfg.Listen6}
	}
	return []netip.Addr{s.cfg.Listen}
}

// setAddr records a bound listener's address under its family.
func (s *Server) setAddr(p Protocol, a net.Addr) {
	var ip net.IP
	switch a := a.(type) {
	case *net.UDPAddr:
		ip = a.IP
	case *net.TCPAddr:
		ip = a.IP
	}
	if ip.To4() == nil {
		s.addrs6[p] = a
		return
	}
	s.addrs[p] = a
}

// Stats returns a snapshot of the counters.
func (s *Server) Stats() Stats {
	return Stats{UDPQueries: s.nUDP.Load(), TCPConns: s.nTCP.Load(), Rejected: s.nRejected.Load(),
		Panics: s.nPanics.Load()}
}

func (s *Server) bind() error {
	p := s.cfg.Ports
	port := func(v, def int) int {
		switch {
		case v == 0:
			return def
		case v < 0:
			return 0
		}
		return v
	}
	s.startDoH() // before the DoH listener can accept
	if err := s.bindUDP(port(p.UDP, PortDNS)); err != nil {
		return err
	}
	for _, l := range []struct {
		proto Protocol
		port  int
	}{{DoTCP, port(p.TCP, PortDNS)}, {DoT, port(p.DoT, PortDoT)}, {DoH, port(p.DoH, PortDoH)}} {
		if err := s.bindTCP(l.proto, l.port); err != nil {
			return err
		}
	}
	return nil
}

func (s *Server) closeAll() {
	for _, c := range s.udp {
		c.Close()
	}
	for _, l := range s.listeners {
		l.Close()
	}
}

// guard runs f, turning a panic into a logged, counted event: a hostile peer must never
// take the process down.
func (s *Server) guard(what string, f func()) {
	defer func() {
		if r := recover(); r != nil {
			s.nPanics.Add(1)
			s.log.Error("simdns: recovered panic", "in", what, "panic", r)
		}
	}()
	f()
}

func addrOf(a net.Addr) netip.Addr {
	switch v := a.(type) {
	case *net.TCPAddr:
		ip, _ := netip.AddrFromSlice(v.IP)
		return ip.Unmap()
	case *net.UDPAddr:
		ip, _ := netip.AddrFromSlice(v.IP)
		return ip.Unmap()
	}
	if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
}
