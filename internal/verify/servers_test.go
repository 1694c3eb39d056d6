package verify

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/miekg/dns"
	"github.com/quic-go/quic-go"

	"github.com/doqscan/doqscan/internal/certs/certtest"
	"github.com/doqscan/doqscan/internal/doq"
	"github.com/doqscan/doqscan/internal/hostile"
)

// Behaviours of in-process test servers. Each test server is a real quic-go server (or
// a raw UDP socket for what quic-go cannot be: draft-only, garbage datagrams, silence) on
// 127.0.0.0/8. Misbehaviour is named by hostile.Behaviours (servedHostile says which).
type behaviour struct {
	name     string
	alpns    []string          // offered by the server; default {"doq"}
	versions []quic.Version    // default v1, v2
	rcode    int               // DNS rcode of the answer
	hostile  hostile.Behaviour // quic-go: what the DoQ stream gets (one of servedHostile.Implements); raw: Garbage, DraftOnly or None (silent)
	tlsMode  string            // "" | sni-list (needs sniName) | sni-san (cert shown, client cert demanded without SNI) | client-cert
	sniName  string
	refuse   bool    // QUIC CONNECTION_REFUSED for every connection
	noALPN   bool    // accepts only a ClientHello without ALPN, refuses any offered one (alert 120), as rustls/quinn with no ALPN configured
	raw      bool    // a raw UDP socket instead of quic-go (datagrams get b.hostile)
	closed   bool    // nothing listens: the kernel answers ICMP port unreachable
	ipv6     bool    // listen on ::1 instead of a 127.0.x.y address
	want     Outcome // expected outcome (derived from the behaviour by its author)
}

type testServer struct {
	b    behaviour
	addr netip.AddrPort
	hits atomic.Int64
}

// testPKI is one CA for all test servers; the verifier gets its root as the pool.
type testPKI struct {
	root  *certtest.Issuer
	inter *certtest.Issuer
	pool  *x509.CertPool
}

func newPKI(t testing.TB) *testPKI {
	root := certtest.NewRoot(t, "doqscan test root")
	inter := root.Intermediate(t, "doqscan test intermediate")
	return &testPKI{root: root, inter: inter, pool: certtest.Pool(root.Cert)}
}

var nextIP atomic.Uint32

// loopbackAddr gives every server its own 127.0.x.y address (all of 127/8 is local).
func loopbackAddr() netip.Addr {
	n := nextIP.Add(1)
	return netip.AddrFrom4([4]byte{127, 0, byte(10 + n/250), byte(1 + n%250)})
}

func startServer(t testing.TB, pki *testPKI, b behaviour) *testServer {
	t.Helper()
	ip := loopbackAddr()
	if b.ipv6 {
		ip = netip.IPv6Loopback()
	}
	uc, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, 0)))
	if err != nil {
		t.Fatal(err)
	}
	s := &testServer{b: b, addr: uc.LocalAddr().(*net.UDPAddr).AddrPort()}
	switch {
	case b.closed:
		uc.Close() // nothing listens: the kernel answers ICMP port unreachable
		return s
	case b.raw:
		t.Cleanup(func() { uc.Close() })
		go s.serveRaw(uc)
		return s
	}
	leaf, key := pki.inter.Leaf(t, certtest.ECDSA, "doq.test", ip.String())
	full := certtest.TLS(leaf, key, pki.inter.Cert)
	alpns := b.alpns
	if alpns == nil {
		alpns = []string{"doq"}
	}
	base := &tls.Config{Certificates: []tls.Certificate{full}, NextProtos: alpns, MinVersion: tls.VersionTLS13}
	tlsConf := base
	switch b.tlsMode {
	case "sni-list":
		named, namedKey := pki.inter.Leaf(t, certtest.ECDSA, b.sniName)
		withName := &tls.Config{Certificates: []tls.Certificate{certtest.TLS(named, namedKey, pki.inter.Cert)}, NextProtos: alpns}
		tlsConf = &tls.Config{NextProtos: alpns, GetConfigForClient: func(chi *tls.ClientHelloInfo) (*tls.Config, error) {
			if chi.ServerName == b.sniName {
				return withName, nil
			}
			// No certificate for this name: crypto/tls sends unrecognized_name(112).
			return &tls.Config{NextProtos: alpns, MinVersion: tls.VersionTLS13}, nil
		}}
	case "sni-san":
		sanLeaf, sanKey := pki.inter.Leaf(t, certtest.ECDSA, b.sniName)
		named := &tls.Config{Certificates: []tls.Certificate{certtest.TLS(sanLeaf, sanKey, pki.inter.Cert)}, NextProtos: alpns}
		strict := named.Clone()
		strict.ClientAuth = tls.RequireAnyClientCert
		tlsConf = &tls.Config{NextProtos: alpns, GetConfigForClient: func(chi *tls.ClientHelloInfo) (*tls.Config, error) {
			if chi.ServerName == b.sniName {
				return named, nil
			}
			return strict, nil // shows the certificate, then wants a client certificate
		}}
	case "client-cert":
		tlsConf = base.Clone()
		tlsConf.ClientAuth = tls.RequireAnyClientCert
	}
	if b.noALPN {
		none := base.Clone()
		none.NextProtos = nil
		// crypto/tls refuses an offered ALPN outside NextProtos with no_application_protocol
		// (QUIC, RFC 9001 §8.1) and takes a ClientHello without ALPN when NextProtos is empty.
		refuse := base.Clone()
		refuse.NextProtos = []string{"doqscan-test-none-offered"}
		tlsConf = &tls.Config{GetConfigForClient: func(chi *tls.ClientHelloInfo) (*tls.Config, error) {
			if len(chi.SupportedProtos) > 0 {
				return refuse, nil
			}
			return none, nil
		}}
	}
	qconf := &quic.Config{Versions: b.versions}
	if b.refuse {
		qconf.GetConfigForClient = func(*quic.ClientInfo) (*quic.Config, error) { return nil, errors.New("refused") }
	}
	tr := &quic.Transport{Conn: uc}
	ln, err := tr.Listen(tlsConf, qconf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close(); tr.Close() })
	go func() {
		for {
			c, err := ln.Accept(context.Background())
			if err != nil {
				return
			}
			s.hits.Add(1)
			go s.serveConn(c)
		}
	}()
	return s
}

func (s *testServer) serveConn(c *quic.Conn) {
	defer c.CloseWithError(0, "")
	str, err := c.AcceptStream(context.Background())
	if err != nil {
		return
	}
	f, err := doq.FramingFor(c.ConnectionState().TLS.NegotiatedProtocol)
	if s.b.noALPN {
		f, err = doq.NoALPNFraming, nil
	}
	if err != nil {
		return
	}
	q, err := doq.ReadMessage(str, f, 0)
	if err != nil {
		c.CloseWithError(doq.CodeProtocolError, "bad query")
		return
	}
	m := new(dns.Msg)
	if err := m.Unpack(q); err != nil {
		c.CloseWithError(doq.CodeProtocolError, "bad query")
		return
	}
	r := new(dns.Msg)
	r.SetRcode(m, s.b.rcode)
	if s.b.rcode == dns.RcodeSuccess {
		rr, _ := dns.NewRR(m.Question[0].Name + " 60 IN A 192.0.2.53")
		r.Answer = append(r.Answer, rr)
	}
	switch s.b.hostile {
	case hostile.Stall:
		<-c.Context().Done()
		return
	case hostile.Endless:
		buf := make([]byte, 4096)
		for {
			if _, err := str.Write(buf); err != nil {
				return
			}
		}
	case hostile.WrongID:
		r.Id = 4711
	case hostile.Reset:
		str.CancelWrite(doq.CodeInternalError)
		<-c.Context().Done()
		return
	case hostile.CloseApp:
		c.CloseWithError(doq.CodeExcessiveLoad, "busy")
		return
	case hostile.Garbage:
		out, _ := doq.Frame(f, []byte("this is not DNS"))
		str.Write(out)
		str.Close()
		<-c.Context().Done()
		return
	}
	wire, _ := r.Pack()
	out, _ := doq.Frame(f, wire)
	str.Write(out)
	str.Close()
	// Keep the connection until the client closes it, so the reply is delivered.
	<-c.Context().Done()
}

// serveRaw answers datagrams as a non-quic-go peer would.
func (s *testServer) serveRaw(uc *net.UDPConn) {
	buf := make([]byte, 2048)
	for {
		n, from, err := uc.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		s.hits.Add(1)
		switch s.b.hostile {
		case hostile.Garbage:
			junk := make([]byte, 40+int(buf[0])%1000)
			rand.Read(junk)
			uc.WriteToUDPAddrPort(junk, from)
		case hostile.DraftOnly:
			if vn := versionNegotiation(buf[:n], 0xff00001d, 0xff000020); vn != nil {
				uc.WriteToUDPAddrPort(vn, from)
			}
		}
	}
}

// versionNegotiation builds the VN packet (RFC 9000 §17.2.1) a server speaking only
// the given versions sends in reply to a client's long-header packet.
func versionNegotiation(p []byte, versions ...uint32) []byte {
	if len(p) < 7 || p[0]&0x80 == 0 {
		return nil
	}
	dl := int(p[5])
	if len(p) < 6+dl+1 {
		return nil
	}
	dcid := p[6 : 6+dl]
	sl := int(p[6+dl])
	if len(p) < 7+dl+sl {
		return nil
	}
	scid := p[7+dl : 7+dl+sl]
	out := []byte{0x80 | 0x2a, 0, 0, 0, 0, byte(sl)}
	out = append(out, scid...)
	out = append(out, byte(dl))
	out = append(out, dcid...)
	for _, v := range versions {
		out = binary.BigEndian.AppendUint32(out, v)
	}
	return out
}

// behaviours is the in-process population: one server per behaviour that matters.
func behaviours() []behaviour {
	return []behaviour{
		{name: "rfc9250", want: OutcomeVerified},
		{name: "nxdomain", rcode: dns.RcodeNameError, want: OutcomeVerified},
		{name: "draft-i00-raw", alpns: []string{"doq-i00"}, want: OutcomeVerified},
		{name: "draft-i02-raw", alpns: []string{"doq-i02"}, want: OutcomeVerified},
		{name: "draft-i03-prefixed", alpns: []string{"doq-i03"}, want: OutcomeVerified},
		{name: "dq", alpns: []string{"dq"}, want: OutcomeVerified},
		{name: "drafts-and-rfc", alpns: []string{"doq", "doq-i11", "doq-i02"}, want: OutcomeVerified},
		{name: "server-prefers-draft", alpns: []string{"doq-i02", "doq"}, want: OutcomeVerified},
		{name: "v2-only", versions: []quic.Version{quic.Version2}, want: OutcomeVerified},
		{name: "refused", rcode: dns.RcodeRefused, want: OutcomeRefused},
		{name: "servfail", rcode: dns.RcodeServerFailure, want: OutcomeDNSError},
		{name: "stall-after-handshake", hostile: hostile.Stall, want: OutcomeTimeout},
		{name: "endless-stream", hostile: hostile.Endless, want: OutcomeProtocolError},
		{name: "bad-id", hostile: hostile.WrongID, want: OutcomeProtocolError},
		{name: "stream-reset", hostile: hostile.Reset, want: OutcomeProtocolError},
		{name: "close-app", hostile: hostile.CloseApp, want: OutcomeProtocolError},
		{name: "garbage-dns", hostile: hostile.Garbage, want: OutcomeProtocolError},
		{name: "h3-only", alpns: []string{"h3"}, want: OutcomeQUICNotDoQ},
		{name: "no-alpn-only", noALPN: true, want: OutcomeDoQNoALPN},
		{name: "no-alpn-only-refused", noALPN: true, rcode: dns.RcodeRefused, want: OutcomeDoQNoALPN},
		{name: "no-alpn-only-stall", noALPN: true, hostile: hostile.Stall, want: OutcomeQUICNotDoQ},
		{name: "sni-listed", tlsMode: "sni-list", sniName: "resolver.doq.test", want: OutcomeVerified},
		{name: "sni-unknown", tlsMode: "sni-list", sniName: "secret.doq.test", want: OutcomeSNIRequired},
		{name: "sni-from-san", tlsMode: "sni-san", sniName: "san-only.doq.test", want: OutcomeVerified},
		{name: "client-cert", tlsMode: "client-cert", want: OutcomeTLSError},
		{name: "connection-refused", refuse: true, want: OutcomeProtocolError},
		{name: "draft-only", raw: true, hostile: hostile.DraftOnly, want: OutcomeVersionMismatch},
		{name: "stall", raw: true, want: OutcomeTimeout},
		{name: "garbage", raw: true, hostile: hostile.Garbage, want: OutcomeTimeout},
		{name: "closed-port", closed: true, want: OutcomeUnreachable},
	}
}

// servedHostile is the part of hostile.Behaviours these servers act out, and why not
// the rest (TestServedHostile).
var servedHostile = hostile.Subset{
	Implements: []hostile.Behaviour{hostile.Stall, hostile.Endless, hostile.WrongID, hostile.Reset, hostile.CloseApp,
		hostile.Garbage, hostile.DraftOnly},
	Omits: map[hostile.Behaviour]string{
		hostile.Truncated:   "verified against the testbed's hostile=truncated hosts (verify/e2e)",
		hostile.WrongLength: "verified against the testbed's hostile=wrong-length hosts (verify/e2e)",
		hostile.BadVN:       "verified against the testbed's hostile=bad-vn hosts (verify/e2e)",
		hostile.TLSStall:    "DoT/DoH only (simdns); verify speaks QUIC",
		hostile.Flood:       "no verify test needs it yet: measuretest acts it out",
		hostile.Drip:        "HTTP only; verify speaks QUIC",
		hostile.HugeHeaders: "HTTP only; verify speaks QUIC",
	},
}

// TestServedHostile: the test servers' misbehaviours are exactly their declared part of
// hostile.Behaviours, each with a reason for the rest.
func TestServedHostile(t *testing.T) {
	if err := servedHostile.Check(); err != nil {
		t.Fatal(err)
	}
	used := map[hostile.Behaviour]bool{}
	for _, b := range behaviours() {
		if b.hostile != hostile.None && !slices.Contains(servedHostile.Implements, b.hostile) {
			t.Errorf("%s: %s is not in servedHostile", b.name, b.hostile)
		}
		used[b.hostile] = true
	}
	for _, b := range servedHostile.Implements {
		if !used[b] {
			t.Errorf("servedHostile implements %s, which no test server acts out", b)
		}
	}
}

// sniList is what the verifier is told to retry with in tests (the "sni-unknown"
// server's name is deliberately absent).
var sniList = []string{"other.doq.test", "resolver.doq.test"}

var _ = io.EOF
var _ sync.Mutex
