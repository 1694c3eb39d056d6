// Package simquic is the QUIC side of the testbed's multi-tenant server: one process
// answering on UDP 784, 853 and 8853 for every address of the simulated internet, each
// address with the QUIC/DoQ behaviour testbed/population.txt assigns it (ALPNs, QUIC
// versions, Retry, NEW_TOKEN handling, certificate, SNI requirement, DNS rcode, hostile
// behaviours). See demux.go for how one socket per port serves many behaviours, raw.go for
// the responders that are not QUIC at all, doq.go for the DoQ streams.
package simquic

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"golang.org/x/net/ipv4"

	"github.com/doqscan/doqscan/internal/doq"
	"github.com/doqscan/doqscan/internal/hostile"
	"github.com/doqscan/doqscan/internal/testbed/pki"
	"github.com/doqscan/doqscan/internal/testbed/population"
	"github.com/doqscan/doqscan/internal/testbed/sockopt"
)

// PortDoH3 is DNS over HTTPS over HTTP/3 (RFC 8484 on RFC 9114; HTTPS's port 443).
const PortDoH3 = 443

// DefaultPorts are the DoQ ports (RFC 9250 §8.2 and the drafts', internal/doq) and DoH3's.
var DefaultPorts = []uint16{doq.PortExperimental, doq.PortRFC9250, doq.PortDraft02, PortDoH3}

// tokenIgnoreAge is the MaxTokenAge of token=ignore Transports: quic-go still sends
// NEW_TOKEN after every handshake, but any token presented later is older than this, so it
// is ignored (server.go: "For invalid and expired non-retry tokens ... act as if there was
// no token") and the 3x anti-amplification limit applies again.
const tokenIgnoreAge = time.Nanosecond

// alertUnrecognizedName is the TLS alert of an SNI-requiring server when the client's
// SNI is missing or wrong (RFC 6066 §3); QUIC carries it as CRYPTO_ERROR 0x100+112
// (RFC 9001 §4.8).
const alertUnrecognizedName = tls.AlertError(112)

// Config configures a Server.
type Config struct {
	Population *population.Population
	PKI        *pki.PKI
	// Listen is the address the sockets bind; default 0.0.0.0 (every address, replies
	// from the address each datagram was sent to via IP_PKTINFO).
	Listen netip.Addr
	// Listen6 is the address the IPv6 sockets bind when the population has an IPv6 half;
	// default [::] (IPv6-only wildcard sockets, replies from the address each datagram was
	// sent to via IPV6_PKTINFO) when Listen is the IPv4 wildcard, none otherwise.
	Listen6 netip.Addr
	// NoIPv6 binds no IPv6 socket (the IPv6 records stay unserved).
	NoIPv6 bool
	// Ports maps each population port to the local port to bind; nil binds DefaultPorts
	// as themselves. A local port 0 takes any free port (tests; see Addr).
	Ports map[uint16]uint16
	// MapAddr maps the address a datagram was sent to onto the population address whose
	// behaviour answers it; nil is the identity. Tests on loopback map 127.19.x.y to
	// 198.19.x.y.
	MapAddr func(netip.Addr) netip.Addr
	// HoldTimeout bounds how long stalled and endless streams are held (default 30 s).
	HoldTimeout time.Duration
	Logger      *slog.Logger
}

// Stats counts what the server did.
type Stats struct {
	Datagrams, Dropped, Raw, Conns, Queries, Panics atomic.Uint64
}

// Server is a running simquic.
type Server struct {
	cfg       Config
	log       *slog.Logger
	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once

	sockets    map[sockKey]*net.UDPConn      // (population port, family) -> socket
	transports map[sockKey]map[string]*tport // (population port, family) -> profile key -> transport
	routes     map[uint16]map[*population.Record]*tport
	Stats      Stats
}

// sockKey names one socket: a population port in one address family. quic-go's
// Transport writes to one socket, so each family has its own Transports.
type sockKey struct {
	port uint16
	v6   bool
}

// profile is everything that makes two addresses' QUIC behaviour differ.
type profile struct {
	alpns    []string
	versions []quic.Version
	retry    bool
	token    string
	cert     string
	sni      string
	rcode    string
	hostile  hostile.Behaviour
	doh3     bool // this port is the host's DoH3 endpoint (HTTP/3 answers /dns-query)
	// Connection policy (population maxq=, idle=, streams=, 0rtt=).
	maxQueries int
	idle       time.Duration
	streams    int
	no0RTT     bool
	tokenAge   time.Duration // population tokenage= (0: quic-go's default)
}

// noALPN: the host accepts only connections offering no ALPN (population.ALPNNone).
func (p profile) noALPN() bool { return len(p.alpns) == 1 && p.alpns[0] == population.ALPNNone }

// noALPNRefusal is the one protocol an alpn=none server lists when the client offers any:
// a name no client offers, so crypto/tls answers no_application_protocol.
const noALPNRefusal = "doqscan-no-alpn-only"

func (p profile) key() string {
	return fmt.Sprintf("%s|%v|%v|%s|%s|%s|%s|%s|%v|%d|%v|%d|%v|%v", strings.Join(p.alpns, ","), p.versions, p.retry, p.token,
		p.cert, p.sni, p.rcode, p.hostile, p.doh3, p.maxQueries, p.idle, p.streams, p.no0RTT, p.tokenAge)
}

type tport struct {
	prof   profile
	wire   []uint32  // QUIC versions accepted, as on the wire (for Version Negotiation)
	vc     *vconn    // the demultiplexer's queue into tr (nil for ServeConn)
	closer io.Closer // tr's connection
	tr     *quic.Transport
	ln     *quic.EarlyListener
}

func profileOf(r *population.Record, port uint16) (profile, error) {
	p := profile{alpns: r.ALPNsOn(port), retry: r.Retry, token: r.Token, cert: r.Cert, sni: r.SNI, rcode: r.RCode,
		hostile: r.Hostile, doh3: r.DoH3 != 0 && port == r.DoH3,
		maxQueries: r.MaxQueries, idle: r.Idle, streams: r.Streams, no0RTT: r.No0RTT, tokenAge: r.TokenAge}
	for _, v := range r.Versions {
		switch v {
		case "v1":
			p.versions = append(p.versions, quic.Version1)
		case "v2":
			p.versions = append(p.versions, quic.Version2)
		default:
			return p, fmt.Errorf("line %d: quic-go cannot serve QUIC version %s (only peers can)", r.Line, v)
		}
	}
	if r.Token == population.TokenNone {
		return p, fmt.Errorf("line %d: quic-go always issues NEW_TOKEN; token=none needs a peer", r.Line)
	}
	return p, nil
}

// PortsOf returns the ports a server of pop binds: DefaultPorts and every other QUIC
// port a simserver host of pop serves (a DoQ port no scan probes, found through DDR).
func PortsOf(pop *population.Population) []uint16 {
	out := slices.Clone(DefaultPorts)
	for _, r := range pop.AllRecords() {
		if r.Peer != "" {
			continue
		}
		for _, p := range r.AllQUICPorts() {
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	return out
}

// ListenAddrs fills in the addresses a server of pop binds: listen defaults to the IPv4
// wildcard; listen6 is cleared when noIPv6 is set or pop has no IPv6 hosts, and defaults
// to the IPv6 wildcard when listen is the IPv4 one.
func ListenAddrs(pop *population.Population, listen, listen6 netip.Addr, noIPv6 bool) (netip.Addr, netip.Addr) {
	if !listen.IsValid() {
		listen = netip.IPv4Unspecified()
	}
	switch {
	case noIPv6 || len(pop.Records6) == 0:
		listen6 = netip.Addr{}
	case !listen6.IsValid() && listen == netip.IPv4Unspecified():
		listen6 = netip.IPv6Unspecified()
	}
	return listen, listen6
}

// Start binds every socket, builds one Transport per profile and port, and serves until
// ctx ends or Close is called. When it returns without error the server answers.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Population == nil || cfg.PKI == nil {
		return nil, errors.New("simquic: Config needs Population and PKI")
	}
	cfg.Listen, cfg.Listen6 = ListenAddrs(cfg.Population, cfg.Listen, cfg.Listen6, cfg.NoIPv6)
	if cfg.Ports == nil {
		cfg.Ports = map[uint16]uint16{}
		for _, p := range PortsOf(cfg.Population) {
			cfg.Ports[p] = p
		}
	}
	if cfg.MapAddr == nil {
		cfg.MapAddr = func(a netip.Addr) netip.Addr { return a }
	}
	if cfg.HoldTimeout <= 0 {
		cfg.HoldTimeout = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &Server{cfg: cfg, log: cfg.Logger, ctx: ctx, cancel: cancel,
		sockets: map[sockKey]*net.UDPConn{}, transports: map[sockKey]map[string]*tport{},
		routes: map[uint16]map[*population.Record]*tport{}}
	if err := s.setup(); err != nil {
		cancel()
		s.closeAll()
		return nil, err
	}
	for k, sock := range s.sockets {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.demux(k.port, sock)
		}()
	}
	go func() {
		<-ctx.Done()
		s.closeAll()
	}()
	return s, nil
}

func (s *Server) setup() error {
	listens := []netip.Addr{s.cfg.Listen}
	if s.cfg.Listen6.IsValid() {
		listens = append(listens, s.cfg.Listen6)
	}
	for popPort, localPort := range s.cfg.Ports {
		for _, listen := range listens {
			sock, err := sockopt.ListenUDP(netip.AddrPortFrom(listen, localPort))
			if err != nil {
				return fmt.Errorf("simquic: bind UDP [%s]:%d with packet info: %w", listen, localPort, err)
			}
			k := sockKey{popPort, listen.Is6()}
			s.sockets[k] = sock
			if err := sockopt.SetBuffers(sock, socketBuffer); err != nil {
				s.log.Warn("simquic: socket buffers", "err", err)
			}
			s.transports[k] = map[string]*tport{}
		}
		s.routes[popPort] = map[*population.Record]*tport{}
	}
	for _, r := range s.cfg.Population.AllRecords() {
		if r.Peer != "" || r.RawQUIC() || len(r.QUICPorts) == 0 {
			continue
		}
		for _, port := range r.AllQUICPorts() {
			k := sockKey{port, r.Prefix.Addr().Is6()}
			ts, ok := s.transports[k]
			if !ok {
				continue // a port (or family) this server does not listen on
			}
			prof, err := profileOf(r, port)
			if err != nil {
				return fmt.Errorf("simquic: %w", err)
			}
			t, ok := ts[prof.key()]
			if !ok {
				vc := newVconn(s.sockets[k])
				if t, err = s.newTransport(prof, vc, vc); err != nil {
					return err
				}
				t.vc = vc
				ts[prof.key()] = t
			}
			s.routes[port][r] = t
		}
	}
	return nil
}

// newTransport serves prof with a quic-go Transport reading and writing conn; closer
// closes conn with the server. Version Negotiation is not quic-go's: the demultiplexer
// (or ServeConn's vnConn) answers it, since quic-go queues at most 4 pending VN packets
// and drops the rest, which a ZMap sweep would notice.
func (s *Server) newTransport(prof profile, conn net.PacketConn, closer io.Closer) (*tport, error) {
	t := &tport{prof: prof, closer: closer}
	for _, v := range prof.versions {
		t.wire = append(t.wire, uint32(v))
	}
	t.tr = &quic.Transport{Conn: conn, DisableVersionNegotiationPackets: true}
	if prof.retry {
		t.tr.VerifySourceAddress = func(net.Addr) bool { return true }
	}
	switch {
	case prof.token == population.TokenIgnore:
		t.tr.MaxTokenAge = tokenIgnoreAge
	case prof.tokenAge > 0:
		// A token older than this is treated as none (validateToken), so the Retry or
		// the 3x limit applies again.
		t.tr.MaxTokenAge = prof.tokenAge
	}
	tlsConf, err := s.tlsConfig(prof)
	if err != nil {
		return nil, err
	}
	ln, err := t.tr.ListenEarly(tlsConf, &quic.Config{
		Versions:             prof.versions,
		Allow0RTT:            !prof.no0RTT,
		HandshakeIdleTimeout: 5 * time.Second,
		MaxIdleTimeout:       cmp.Or(prof.idle, population.SimIdle),
		MaxIncomingStreams:   int64(cmp.Or(prof.streams, population.SimStreams)),
	})
	if err != nil {
		return nil, fmt.Errorf("simquic: listen (%s): %w", prof.key(), err)
	}
	t.ln = ln
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.acceptLoop(t)
	}()
	return t, nil
}

func (s *Server) tlsConfig(prof profile) (*tls.Config, error) {
	cert, err := s.cfg.PKI.Certificate(prof.cert)
	if err != nil {
		return nil, fmt.Errorf("simquic: %w", err)
	}
	conf := &tls.Config{MinVersion: tls.VersionTLS13, NextProtos: slices.Clone(prof.alpns)}
	if prof.noALPN() {
		// alpn=none: crypto/tls takes a ClientHello without ALPN when NextProtos is empty,
		// and refuses an offered ALPN outside NextProtos with no_application_protocol (QUIC,
		// RFC 9001 §8.1): offered protocols meet a list none of them is on.
		conf.Certificates = []tls.Certificate{*cert}
		conf.NextProtos = nil
		refuse := conf.Clone()
		refuse.NextProtos = []string{noALPNRefusal}
		return &tls.Config{MinVersion: tls.VersionTLS13, GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			if len(hello.SupportedProtos) > 0 {
				return refuse, nil
			}
			return conf, nil
		}}, nil
	}
	if prof.sni == "" {
		conf.Certificates = []tls.Certificate{*cert}
		return conf, nil
	}
	sni := prof.sni
	conf.GetCertificate = func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
		if !strings.EqualFold(hello.ServerName, sni) {
			return nil, alertUnrecognizedName
		}
		return cert, nil
	}
	return conf, nil
}

// Addr returns the local IPv4 address serving a population port (the bound port when
// Ports asked for any free port).
func (s *Server) Addr(popPort uint16) net.Addr {
	if sock, ok := s.sockets[sockKey{popPort, false}]; ok {
		return sock.LocalAddr()
	}
	return nil
}

// Addr6 returns the local IPv6 address serving a population port; nil when the server
// does not listen on IPv6.
func (s *Server) Addr6(popPort uint16) net.Addr {
	if sock, ok := s.sockets[sockKey{popPort, true}]; ok {
		return sock.LocalAddr()
	}
	return nil
}

// Transports returns how many quic-go Transports (profiles x ports) serve the population.
func (s *Server) Transports() int {
	n := 0
	for _, ts := range s.transports {
		n += len(ts)
	}
	return n
}

// Close stops the server and waits for every goroutine.
func (s *Server) Close() error {
	s.cancel()
	s.closeAll()
	s.wg.Wait()
	return nil
}

// Wait blocks until the server's context ends and every goroutine is gone.
func (s *Server) Wait() error {
	<-s.ctx.Done()
	s.wg.Wait()
	return nil
}

func (s *Server) closeAll() {
	s.closeOnce.Do(s.doClose)
}

func (s *Server) doClose() {
	for _, ts := range s.transports {
		for _, t := range ts {
			if t.ln != nil {
				t.ln.Close()
			}
			t.tr.Close()
			t.closer.Close()
		}
	}
	for _, sock := range s.sockets {
		sock.Close()
	}
}

// guard runs f, turning a panic into a log line and a counter: a hostile client must never
// crash the server.
func (s *Server) guard(what string, f func()) {
	defer func() {
		if r := recover(); r != nil {
			s.Stats.Panics.Add(1)
			s.log.Error("simquic: recovered panic", "in", what, "panic", r)
		}
	}()
	f()
}

// demuxBatch is how many datagrams one recvmmsg(2) call may return.
const demuxBatch = 64

// demux reads one port's socket (recvmmsg, demuxBatch datagrams per call) and hands each
// datagram to the behaviour of the address it was sent to.
func (s *Server) demux(port uint16, sock *net.UDPConn) {
	pc := ipv4.NewPacketConn(sock)
	msgs := make([]ipv4.Message, demuxBatch)
	for i := range msgs {
		msgs[i].Buffers = [][]byte{make([]byte, maxDatagram+1)}
		msgs[i].OOB = make([]byte, oobSize)
	}
	for {
		n, err := pc.ReadBatch(msgs, 0)
		if err != nil {
			if errors.Is(err, net.ErrClosed) || s.ctx.Err() != nil {
				return
			}
			s.log.Warn("simquic: read", "port", port, "err", err)
			continue
		}
		for i := range n {
			m := &msgs[i]
			src, ok := m.Addr.(*net.UDPAddr)
			if !ok {
				continue
			}
			s.handle(port, sock, m.Buffers[0][:m.N], m.OOB[:m.NN], src)
		}
	}
}

func (s *Server) handle(port uint16, sock *net.UDPConn, b, oob []byte, src *net.UDPAddr) {
	s.Stats.Datagrams.Add(1)
	dst, ok := sockopt.PktinfoDst(oob)
	if !ok || len(b) > maxDatagram {
		s.Stats.Dropped.Add(1)
		return
	}
	r := s.cfg.Population.Lookup(s.cfg.MapAddr(dst))
	if r == nil || r.Peer != "" || !r.HasQUICPort(port) {
		s.Stats.Dropped.Add(1) // silent address, a peer's address, or a closed port
		return
	}
	if r.RawQUIC() {
		s.Stats.Raw.Add(1)
		s.guard("raw", func() { s.raw(sock, r, dst, src, b) })
		return
	}
	t := s.routes[port][r]
	if t == nil {
		s.Stats.Dropped.Add(1)
		return
	}
	if version, dcid, scid, ok := longHeaderIDs(b); ok && version != 0 && !slices.Contains(t.wire, version) {
		if len(b) >= minProbeSize { // RFC 9000 §6.1: VN only for datagrams a client could have sent as its first
			s.Stats.Raw.Add(1)
			vn := versionNegotiation(dcid, scid, append(slices.Clone(t.wire), greaseVersion(version)), false)
			if _, _, err := sock.WriteMsgUDP(vn, sockopt.PktinfoSrc(dst), src); err != nil {
				s.log.Debug("simquic: VN", "to", src, "err", err)
			}
		}
		return
	}
	d := datagram{data: append([]byte(nil), b...), oob: append([]byte(nil), oob...), src: src}
	if !t.vc.deliver(d) {
		s.Stats.Dropped.Add(1)
	}
}
