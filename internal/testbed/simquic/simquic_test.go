package simquic

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/quic-go/quic-go"

	"github.com/doqscan/doqscan/internal/doq"
	"github.com/doqscan/doqscan/internal/testbed/pki"
	"github.com/doqscan/doqscan/internal/testbed/population"
)

// The tests run the server on loopback: population address 198.19.c.d is reached at
// 127.19.c.d (all of 127/8 is local on Linux), on free ports mapped to 784/853/8853.

func toLoopback(a netip.Addr) netip.Addr {
	b := a.As4()
	return netip.AddrFrom4([4]byte{127, b[1], b[2], b[3]})
}

func fromLoopback(a netip.Addr) netip.Addr {
	b := a.As4()
	return netip.AddrFrom4([4]byte{198, b[1], b[2], b[3]})
}

type fixture struct {
	pop *population.Population
	pki *pki.PKI
	srv *Server
}

var (
	fixOnce sync.Once
	fix     fixture
	fixErr  error
)

func setup(t testing.TB) *fixture {
	t.Helper()
	fixOnce.Do(func() {
		fix.pop, fixErr = population.LoadDefault()
		if fixErr != nil {
			return
		}
		fix.pki, fixErr = pki.New(fix.pop)
		if fixErr != nil {
			return
		}
		ports := map[uint16]uint16{}
		for _, p := range PortsOf(fix.pop) {
			ports[p] = 0
		}
		fix.srv, fixErr = Start(context.Background(), Config{
			Population: fix.pop, PKI: fix.pki, Ports: ports, MapAddr: fromLoopback,
			HoldTimeout: 5 * time.Second,
		})
	})
	if fixErr != nil {
		t.Fatal(fixErr)
	}
	return &fix
}

func TestMain(m *testing.M) {
	code := m.Run()
	if fix.srv != nil {
		fix.srv.Close()
	}
	os.Exit(code)
}

// target returns the loopback UDP address of (population address, population port).
func (f *fixture) target(a netip.Addr, port uint16) *net.UDPAddr {
	local := f.srv.Addr(port).(*net.UDPAddr)
	return net.UDPAddrFromAddrPort(netip.AddrPortFrom(toLoopback(a), uint16(local.Port)))
}

func (f *fixture) first(t *testing.T, class string) *population.Record {
	t.Helper()
	rs := f.pop.ByClass(class)
	if len(rs) == 0 {
		t.Fatalf("population has no %s", class)
	}
	return rs[0]
}

// sniffConn wraps the client's socket: it delays every received datagram by delay (an
// emulated path, so round trips become countable on loopback) and records what arrived.
//
// It counts round trips by causality, not by time: a datagram's generation is one more
// than that of the client's latest send before it arrived on the socket, and a send's
// generation is the highest generation delivered before it. The handshake's round trips
// are then the highest generation delivered when the dial returns. Time enters only
// through the path delay itself: a datagram of one server flight counts as a later
// flight only if its arrival is stamped after a send that its own flight's delivery
// caused, that is, stamped more than the path delay late.
type sniffConn struct {
	net.PacketConn
	delay   time.Duration
	in      chan rcvd
	mu      sync.Mutex
	seen    [][]byte
	sentGen int // generation of the latest send
	gen     int // highest generation delivered
}

type rcvd struct {
	b    []byte
	from net.Addr
	at   time.Time
	gen  int
	err  error
}

func newSniffConn(t *testing.T, delay time.Duration) *sniffConn {
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &sniffConn{PacketConn: pc, delay: delay, in: make(chan rcvd, 1024)}
	go func() {
		for {
			b := make([]byte, 2048)
			n, from, err := pc.ReadFrom(b)
			c.mu.Lock()
			gen := c.sentGen + 1
			c.mu.Unlock()
			c.in <- rcvd{b[:n], from, time.Now(), gen, err}
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { pc.Close() })
	return c
}

func (c *sniffConn) ReadFrom(b []byte) (int, net.Addr, error) {
	r := <-c.in
	if r.err != nil {
		c.in <- r
		return 0, nil, r.err
	}
	if d := time.Until(r.at.Add(c.delay)); d > 0 {
		<-time.After(d) // the emulated path: hold the datagram until it "arrives"
	}
	c.mu.Lock()
	c.seen = append(c.seen, r.b)
	c.gen = max(c.gen, r.gen)
	c.mu.Unlock()
	return copy(b, r.b), r.from, nil
}

// WriteTo sends b; its generation is set before the send, so that every datagram it
// causes arrives stamped after it.
func (c *sniffConn) WriteTo(b []byte, addr net.Addr) (int, error) {
	c.mu.Lock()
	c.sentGen = max(c.sentGen, c.gen)
	c.mu.Unlock()
	return c.PacketConn.WriteTo(b, addr)
}

// roundTrips is the highest generation delivered so far: the round trips the client has
// waited for.
func (c *sniffConn) roundTrips() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// sawRetry reports whether a v1 Retry packet arrived (RFC 9000 §17.2.5: long header, type 0x3).
func (c *sniffConn) sawRetry() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range c.seen {
		if len(b) > 5 && b[0]&0x80 != 0 && binary.BigEndian.Uint32(b[1:5]) == 1 && (b[0]>>4)&0x3 == 0x3 {
			return true
		}
	}
	return false
}

// tokenLog is a token store that records what the server issued.
type tokenLog struct {
	quic.TokenStore
	mu   sync.Mutex
	puts int
}

func (l *tokenLog) Put(key string, tok *quic.ClientToken) {
	l.mu.Lock()
	l.puts++
	l.mu.Unlock()
	l.TokenStore.Put(key, tok)
}

type dialOpts struct {
	alpns    []string
	sni      string
	x25519   bool
	tokens   quic.TokenStore
	conn     net.PacketConn
	timeout  time.Duration
	versions []quic.Version
}

func dial(t *testing.T, f *fixture, a netip.Addr, port uint16, o dialOpts) (*quic.Conn, error) {
	t.Helper()
	if o.alpns == nil {
		o.alpns = doq.ALPNs()
	}
	if o.timeout == 0 {
		o.timeout = 2 * time.Second
	}
	if o.conn == nil {
		o.conn = newSniffConn(t, 0)
	}
	tc := &tls.Config{NextProtos: o.alpns, ServerName: o.sni, InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}
	if o.x25519 {
		tc.CurvePreferences = []tls.CurveID{tls.X25519}
	}
	qc := &quic.Config{HandshakeIdleTimeout: o.timeout, TokenStore: o.tokens, Versions: o.versions}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	return (&quic.Transport{Conn: o.conn}).Dial(ctx, f.target(a, port), tc, qc)
}

// query sends one DoQ query for test.com A and returns the response.
func query(conn *quic.Conn, timeout time.Duration) (*dns.Msg, error) {
	alpn := conn.ConnectionState().TLS.NegotiatedProtocol
	framing, err := doq.FramingFor(alpn)
	if alpn == "" { // a connection without ALPN (alpn=none hosts)
		framing, err = doq.NoALPNFraming, nil
	}
	if err != nil {
		return nil, err
	}
	q := new(dns.Msg)
	q.SetQuestion("test.com.", dns.TypeA)
	q.Id = 0 // RFC 9250 §4.2.1
	wire, _ := q.Pack()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	b, err := doq.Exchange(ctx, conn, framing, wire, doq.ExchangeOptions{})
	if err != nil {
		return nil, err
	}
	m := new(dns.Msg)
	if err := m.Unpack(b); err != nil {
		return nil, errDNS{err}
	}
	return m, nil
}

type errDNS struct{ error }

// classify is a minimal verifier (the real one is cmd/verify): the outcome class of a
// handshake plus one query, as population.ExpectVerify names them.
func classify(conn *quic.Conn, err error, f *fixture) string {
	if err != nil {
		var vn *quic.VersionNegotiationError
		var te *quic.TransportError
		var idle *quic.IdleTimeoutError
		var hs *quic.HandshakeTimeoutError
		switch {
		case errors.As(err, &vn):
			return population.OutcomeVersionMismatch
		case errors.As(err, &te) && te.ErrorCode == quic.TransportErrorCode(0x100+120):
			return population.OutcomeQUICNotDoQ // no_application_protocol (RFC 9001 §8.1)
		case errors.As(err, &te) && te.ErrorCode == quic.TransportErrorCode(0x100+112):
			return population.OutcomeSNIRequired // unrecognized_name
		case errors.As(err, &te) && te.ErrorCode >= 0x100 && te.ErrorCode < 0x200:
			return population.OutcomeTLSError
		case errors.As(err, &idle), errors.As(err, &hs), errors.Is(err, context.DeadlineExceeded):
			return population.OutcomeTimeout
		}
		return "unclassified: " + err.Error()
	}
	defer conn.CloseWithError(0, "")
	m, err := query(conn, 2*time.Second)
	var ne net.Error
	var se *quic.StreamError
	var de errDNS
	switch {
	case err == nil:
	case errors.As(err, &ne) && ne.Timeout():
		return population.OutcomeTimeout
	case errors.As(err, &se), errors.Is(err, doq.ErrBadLength), errors.Is(err, doq.ErrStreamTooLong),
		errors.As(err, &de), errors.Is(err, io.ErrUnexpectedEOF):
		return population.OutcomeProtocolError
	default:
		return "unclassified query: " + err.Error()
	}
	switch m.Rcode {
	case dns.RcodeRefused:
		return population.OutcomeDoQRefused
	case dns.RcodeSuccess:
		if len(m.Answer) != 1 || m.Answer[0].(*dns.A).A.String() != f.pop.Answer.String() {
			return "wrong answer: " + m.String()
		}
		return population.OutcomeDoQVerified
	}
	return population.OutcomeDoQDNSError
}

// Every QUIC endpoint of every behaviour class served by simquic (one address per class,
// every port) is classified by a quic-go client exactly as the population's ground truth says.
func TestEveryClassMatchesGroundTruth(t *testing.T) {
	f := setup(t)
	seen := map[string]bool{}
	for i := range f.pop.Records {
		r := &f.pop.Records[i]
		if r.Peer != "" || len(r.QUICPorts) == 0 || seen[r.Class] {
			continue
		}
		seen[r.Class] = true
		a := r.Prefix.Addr()
		for _, port := range r.AllQUICPorts() {
			want := f.pop.ExpectVerify(a, port)
			t.Run(r.Class+"/"+a.String()+"/"+itoa(port), func(t *testing.T) {
				t.Parallel()
				conn, err := dial(t, f, a, port, dialOpts{timeout: 3 * time.Second})
				got := classify(conn, err, f)
				if got == population.OutcomeQUICNotDoQ {
					// As the verifier does: one more attempt offering no ALPN at all; a DNS
					// reply over it makes doq-no-alpn.
					noALPN, err := dial(t, f, a, port, dialOpts{timeout: 3 * time.Second, alpns: []string{}})
					switch classify(noALPN, err, f) {
					case population.OutcomeDoQVerified, population.OutcomeDoQRefused, population.OutcomeDoQDNSError:
						got = population.OutcomeDoQNoALPN
					}
				}
				if got != want.NoSNIClass {
					t.Fatalf("without SNI: %s, ground truth %s (err %v)", got, want.NoSNIClass, err)
				}
				if want.SNI != "" {
					conn, err = dial(t, f, a, port, dialOpts{sni: want.SNI})
					got = classify(conn, err, f)
				}
				if got != want.Class {
					t.Fatalf("%s, ground truth %s", got, want.Class)
				}
				if conn != nil && err == nil && want.ALPN != "" {
					st := conn.ConnectionState()
					if st.TLS.NegotiatedProtocol != want.ALPN || st.Version.String() != wantVersion(want.Version) {
						t.Errorf("negotiated %s %s, ground truth %s %s", st.TLS.NegotiatedProtocol, st.Version, want.ALPN, want.Version)
					}
				}
			})
		}
	}
}

func wantVersion(v string) string {
	switch v {
	case "v1":
		return quic.Version1.String()
	case "v2":
		return quic.Version2.String()
	}
	return v
}

func itoa(p uint16) string { return strconv.Itoa(int(p)) }

// Silent addresses, peers' addresses and closed ports never answer.
func TestSilence(t *testing.T) {
	f := setup(t)
	silent := netip.MustParseAddr("198.19.0.9")
	if f.pop.Lookup(silent) != nil {
		t.Fatal("198.19.0.9 should be unlisted")
	}
	peer := f.first(t, "peer-coredns")
	dns853 := f.first(t, "doq-853") // QUIC on 853 only
	for _, tc := range []struct {
		a    netip.Addr
		port uint16
	}{{silent, 784}, {peer.Prefix.Addr(), peer.QUICPorts[0]}, {dns853.Prefix.Addr(), 784}} {
		_, err := dial(t, f, tc.a, tc.port, dialOpts{timeout: 300 * time.Millisecond})
		if got := classify(nil, err, f); got != population.OutcomeTimeout {
			t.Errorf("%s:%d: %s (%v), want timeout", tc.a, tc.port, got, err)
		}
	}
}
