package simdns

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	"github.com/doqscan/doqscan/internal/certs/certtest"
)

const (
	testServerName = "simdns.test"
	okTimeout      = 5 * time.Second        // an answer is due: generous under load
	silentTimeout  = 700 * time.Millisecond // how long a client waits on a silent server
)

// testCerts is a CertSource with one self-signed certificate for every address.
type testCerts struct {
	cert *tls.Certificate
	pool *x509.CertPool
}

func newTestCerts(t testing.TB) *testCerts {
	t.Helper()
	leaf, key := certtest.SelfSignedLeaf(t, certtest.ECDSA, testServerName)
	cert := certtest.TLS(leaf, key)
	return &testCerts{cert: &cert, pool: certtest.Pool(leaf)}
}

func (c *testCerts) Certificate(netip.Addr, Protocol, string) (*tls.Certificate, error) {
	return c.cert, nil
}

func (c *testCerts) client(alpn ...string) *tls.Config {
	return &tls.Config{RootCAs: c.pool, ServerName: testServerName, NextProtos: alpn,
		ClientSessionCache: tls.NewLRUClientSessionCache(16)}
}

var allProtocols = []Protocol{DoUDP, DoTCP, DoT, DoH}

// Test addresses: 127.0.1.(i+1) acts out Classes[i] on every protocol; 127.0.2.x carry
// the options; 127.0.3.1 offers nothing.
func classAddr(i int) netip.Addr { return netip.AddrFrom4([4]byte{127, 0, 1, byte(i + 1)}) }

var (
	addrTLS12     = netip.MustParseAddr("127.0.2.1")
	addrTickets   = netip.MustParseAddr("127.0.2.2")
	addrKeepalive = netip.MustParseAddr("127.0.2.3")
	addrFastOpen  = netip.MustParseAddr("127.0.2.4")
	addrHTTP1     = netip.MustParseAddr("127.0.2.5")
	addrAnswer2   = netip.MustParseAddr("127.0.2.6")
	addrNothing   = netip.MustParseAddr("127.0.3.1")
	otherAnswer   = netip.MustParseAddr("192.0.2.77")
)

func testTable() Table {
	t := Table{}
	for i, c := range Classes {
		t.Set(classAddr(i), Behaviour{Class: c}, allProtocols...)
	}
	t.Set(addrTLS12, Behaviour{Class: ClassAnswer, TLS12Only: true}, allProtocols...)
	t.Set(addrTickets, Behaviour{Class: ClassAnswer, SessionTickets: true}, allProtocols...)
	t.Set(addrKeepalive, Behaviour{Class: ClassAnswer, Keepalive: true}, allProtocols...)
	t.Set(addrFastOpen, Behaviour{Class: ClassAnswer, FastOpen: true}, allProtocols...)
	t.Set(addrHTTP1, Behaviour{Class: ClassAnswer, HTTP1Only: true}, allProtocols...)
	t.Set(addrAnswer2, Behaviour{Class: ClassAnswer, Answer: otherAnswer}, allProtocols...)
	return t
}

type testServer struct {
	*Server
	table Directory
	certs *testCerts
	// local maps a directory address to the address to send to (nil: identity).
	local func(netip.Addr) netip.Addr
}

func startTest(t testing.TB, lim Limits) *testServer {
	t.Helper()
	tab := testTable()
	certs := newTestCerts(t)
	if lim.HoldTimeout == 0 {
		lim.HoldTimeout = 30 * time.Second
	}
	s, err := Start(t.Context(), Config{Directory: tab, Certs: certs,
		Ports: Ports{UDP: -1, TCP: -1, DoT: -1, DoH: -1}, Limits: lim})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		if p := s.Stats().Panics; p != 0 {
			t.Errorf("server recovered %d panics", p)
		}
	})
	return &testServer{Server: s, table: tab, certs: certs}
}

func (s *testServer) target(p Protocol, a netip.Addr) string {
	var port int
	switch v := s.Addr(p).(type) {
	case *net.UDPAddr:
		port = v.Port
	case *net.TCPAddr:
		port = v.Port
	}
	if s.local != nil {
		a = s.local(a)
	}
	return net.JoinHostPort(a.String(), strconv.Itoa(port))
}

func query(name string) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), dns.TypeA)
	return m
}

// exchange sends one query with miekg/dns over UDP, TCP or DoT.
func (s *testServer) exchange(p Protocol, a netip.Addr, m *dns.Msg, timeout time.Duration) (*dns.Msg, error) {
	c := &dns.Client{Timeout: timeout}
	switch p {
	case DoUDP:
		c.Net = "udp"
	case DoTCP:
		c.Net = "tcp"
	case DoT:
		c.Net = "tcp-tls"
		c.TLSConfig = s.certs.client(alpnDoT)
	}
	r, _, err := c.Exchange(m, s.target(p, a))
	return r, err
}

// doh sends one query over DoH with GET or POST and returns the parsed reply.
func (s *testServer) doh(a netip.Addr, m *dns.Msg, post bool, http1 bool, timeout time.Duration) (*dns.Msg, *http.Response, error) {
	tr := &http.Transport{TLSClientConfig: s.certs.client(), ForceAttemptHTTP2: !http1}
	if http1 {
		tr.TLSClientConfig.NextProtos = []string{alpnHTTP1}
	}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: timeout}
	m.Id = 0 // RFC 8484 §4.1
	wire, err := m.Pack()
	if err != nil {
		return nil, nil, err
	}
	u := "https://" + s.target(DoH, a) + dohPath
	var resp *http.Response
	if post {
		resp, err = hc.Post(u, dohMediaType, bytes.NewReader(wire))
	} else {
		resp, err = hc.Get(u + "?" + dohParam + "=" + base64.RawURLEncoding.EncodeToString(wire))
	}
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, resp, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, resp, fmt.Errorf("http status %s", resp.Status)
	}
	r := new(dns.Msg)
	if err := r.Unpack(body); err != nil {
		return nil, resp, err
	}
	if r.Id != m.Id {
		return r, resp, dns.ErrId
	}
	return r, resp, nil
}

func (s *testServer) ask(p Protocol, a netip.Addr, timeout time.Duration) (*dns.Msg, error) {
	if p == DoH {
		r, _, err := s.doh(a, query("test.com"), false, false, timeout)
		return r, err
	}
	return s.exchange(p, a, query("test.com"), timeout)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded)
}

func isReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || err != nil && strings.Contains(err.Error(), "connection reset")
}

// checkAnswer asserts r is the fixed answer the table assigns to a for test.com.
func checkAnswer(t *testing.T, tab Directory, p Protocol, a netip.Addr, r *dns.Msg) {
	t.Helper()
	b, _ := tab.Behaviour(a, p)
	want := b.Answer
	if !want.IsValid() {
		want = DefaultAnswer
	}
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Fatalf("%s %s: rcode %s, %d answers; want NOERROR and 1", p, a, dns.RcodeToString[r.Rcode], len(r.Answer))
	}
	rr, ok := r.Answer[0].(*dns.A)
	if !ok || rr.Hdr.Name != "test.com." {
		t.Fatalf("%s %s: answer %v", p, a, r.Answer[0])
	}
	if got, _ := netip.AddrFromSlice(rr.A.To4()); got != want {
		t.Fatalf("%s %s: A %s, want %s", p, a, got, want)
	}
}

// silentFor reports whether class c on p sends nothing the client can parse in time.
func silentFor(c Class, p Protocol) bool {
	return c == ClassStall || c == ClassTLSStall || c == ClassEndless || (p == DoUDP && c == ClassReset)
}

// timeoutFor is how long a client waits on c over p.
func timeoutFor(c Class, p Protocol) time.Duration {
	if silentFor(c, p) || p == DoUDP && c == ClassWrongID {
		return silentTimeout
	}
	return okTimeout
}

// checkOutcome asserts the client-side outcome class c must produce on p for a test.com
// query to a (r and err are what s.ask returned).
func (s *testServer) checkOutcome(t *testing.T, c Class, p Protocol, a netip.Addr, r *dns.Msg, err error) {
	t.Helper()
	switch {
	case c == ClassAnswer:
		if err != nil {
			t.Fatal(err)
		}
		checkAnswer(t, s.table, p, a, r)
	case c == ClassRefused || c == ClassServfail:
		if err != nil {
			t.Fatal(err)
		}
		want := dns.RcodeRefused
		if c == ClassServfail {
			want = dns.RcodeServerFailure
		}
		if r.Rcode != want {
			t.Fatalf("rcode %s, want %s", dns.RcodeToString[r.Rcode], dns.RcodeToString[want])
		}
	case p == DoUDP && (c == ClassWrongID || c == ClassEndless):
		// miekg/dns's UDP client skips replies with a foreign ID (as it should, against
		// spoofing) and times out: look at the raw replies.
		if !isTimeout(err) {
			t.Fatalf("err %v, want a timeout", err)
		}
		want := 1
		if c == ClassEndless {
			want = wrongIDBurst
		}
		s.rawUDP(t, a, want)
	case c == ClassWrongID:
		if !errors.Is(err, dns.ErrId) {
			t.Fatalf("err %v, want %v", err, dns.ErrId)
		}
	case silentFor(c, p):
		if !isTimeout(err) {
			t.Fatalf("err %v, want a timeout", err)
		}
	case c == ClassReset:
		if !isReset(err) {
			t.Fatalf("err %v, want a connection reset", err)
		}
	case c == ClassGarbage || c == ClassTruncated:
		if err == nil || isTimeout(err) || isReset(err) || errors.Is(err, dns.ErrId) {
			t.Fatalf("err %v, want a DNS parse error", err)
		}
	case c == ClassWrongLength:
		if err == nil || isTimeout(err) {
			t.Fatalf("err %v, want a framing error", err)
		}
		if p == DoTCP || p == DoT {
			if !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
				t.Fatalf("err %v, want an unexpected EOF", err)
			}
		}
	default:
		t.Fatalf("class %s has no expectation", c)
	}
}

// TestClasses queries every class on every protocol and checks the client-side outcome
// each class must produce; then checks the server still answers.
func TestClasses(t *testing.T) {
	s := startTest(t, Limits{})
	for i, c := range Classes {
		a := classAddr(i)
		for _, p := range allProtocols {
			t.Run(fmt.Sprintf("%s/%s", p, c), func(t *testing.T) {
				t.Parallel()
				r, err := s.ask(p, a, timeoutFor(c, p))
				s.checkOutcome(t, c, p, a, r, err)
			})
		}
	}
	t.Run("survives", func(t *testing.T) {
		for _, p := range allProtocols {
			r, err := s.ask(p, classAddr(0), okTimeout)
			if err != nil {
				t.Fatalf("%s after the hostile classes: %v", p, err)
			}
			checkAnswer(t, s.table, p, classAddr(0), r)
		}
	})
}

func TestAnswerPerAddress(t *testing.T) {
	s := startTest(t, Limits{})
	for _, p := range allProtocols {
		r, err := s.ask(p, addrAnswer2, okTimeout)
		if err != nil {
			t.Fatal(err)
		}
		checkAnswer(t, s.table, p, addrAnswer2, r)
	}
}

// TestUDPSourceAddress checks the reply comes from the queried address with an
// unconnected socket (a connected one would hide a wrong source by dropping the reply).
func TestUDPSourceAddress(t *testing.T) {
	s := startTest(t, Limits{})
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, a := range []netip.Addr{classAddr(0), addrAnswer2, addrTLS12} {
		wire, _ := query("test.com").Pack()
		dst, _ := net.ResolveUDPAddr("udp4", s.target(DoUDP, a))
		if _, err := c.WriteToUDP(wire, dst); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(okTimeout))
		buf := make([]byte, 1500)
		n, from, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			t.Fatal(err)
		}
		if from.Addr() != a || int(from.Port()) != dst.Port {
			t.Fatalf("reply from %s, want %s", from, dst)
		}
		r := new(dns.Msg)
		if err := r.Unpack(buf[:n]); err != nil {
			t.Fatal(err)
		}
		checkAnswer(t, s.table, DoUDP, a, r)
	}
}

// rawUDP sends one query (ID 0x1234) from an unconnected socket and returns the first n
// replies, each checked to come from a.
func (s *testServer) rawUDP(t *testing.T, a netip.Addr, n int) []*dns.Msg {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m := query("test.com")
	m.Id = 0x1234
	wire, _ := m.Pack()
	dst, _ := net.ResolveUDPAddr("udp4", s.target(DoUDP, a))
	if _, err := c.WriteToUDP(wire, dst); err != nil {
		t.Fatal(err)
	}
	var out []*dns.Msg
	buf := make([]byte, 1500)
	c.SetReadDeadline(time.Now().Add(okTimeout))
	for len(out) < n {
		k, from, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			t.Fatalf("after %d of %d replies: %v", len(out), n, err)
		}
		if from.Addr() != dst.AddrPort().Addr().Unmap() {
			t.Fatalf("reply from %s, want %s", from, dst)
		}
		r := new(dns.Msg)
		if err := r.Unpack(buf[:k]); err != nil {
			t.Fatal(err)
		}
		if r.Id == m.Id {
			t.Fatalf("reply %d has the query's ID", len(out))
		}
		out = append(out, r)
	}
	return out
}

// TestUDPRandomPayload sends what a UDP RTT probe sends (random bytes, a header's worth
// or more) to every class: the classes that answer reply FORMERR with the payload's ID
// from the probed address (garbage replies garbage), the silent ones stay silent, and a
// payload with the QR bit set is never answered.
func TestUDPRandomPayload(t *testing.T) {
	s := startTest(t, Limits{})
	for i, class := range Classes {
		a := classAddr(i)
		for _, qr := range []bool{false, true} {
			c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			payload := make([]byte, 64)
			for {
				rand.Read(payload)
				payload[2] &^= 0x80
				if qr {
					payload[2] |= 0x80
				}
				if new(dns.Msg).Unpack(payload) != nil {
					break
				}
			}
			dst, _ := net.ResolveUDPAddr("udp4", s.target(DoUDP, a))
			if _, err := c.WriteToUDP(payload, dst); err != nil {
				t.Fatal(err)
			}
			// endless answers too: its burst starts with the FORMERR.
			silent := class == ClassReset || class == ClassStall || class == ClassTLSStall ||
				qr && class != ClassGarbage
			timeout := okTimeout
			if silent {
				timeout = silentTimeout
			}
			c.SetReadDeadline(time.Now().Add(timeout))
			buf := make([]byte, 1500)
			n, from, err := c.ReadFromUDPAddrPort(buf)
			if silent {
				if !isTimeout(err) {
					t.Fatalf("%s qr=%v: got %d bytes (%v), want silence", class, qr, n, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s qr=%v: %v", class, qr, err)
			}
			if from.Addr() != a {
				t.Fatalf("%s: reply from %s", class, from)
			}
			if class == ClassGarbage {
				continue
			}
			r := new(dns.Msg)
			if err := r.Unpack(buf[:n]); err != nil {
				t.Fatalf("%s: %v", class, err)
			}
			if r.Rcode != dns.RcodeFormatError || r.Id != uint16(payload[0])<<8|uint16(payload[1]) {
				t.Fatalf("%s: rcode %s id %d, want FORMERR with the payload's ID", class, dns.RcodeToString[r.Rcode], r.Id)
			}
		}
	}
}

func TestNoService(t *testing.T) {
	s := startTest(t, Limits{})
	for _, p := range allProtocols {
		_, err := s.ask(p, addrNothing, silentTimeout)
		if p == DoUDP {
			if !isTimeout(err) {
				t.Errorf("%s: %v, want a timeout", p, err)
			}
			continue
		}
		if err == nil || isTimeout(err) {
			t.Errorf("%s: %v, want the connection refused or reset", p, err)
		}
	}
}

func TestTLSVersions(t *testing.T) {
	s := startTest(t, Limits{})
	for _, tc := range []struct {
		a    netip.Addr
		want uint16
	}{{classAddr(0), tls.VersionTLS13}, {addrTLS12, tls.VersionTLS12}} {
		for _, p := range []Protocol{DoT, DoH} {
			c, err := tls.Dial("tcp", s.target(p, tc.a), s.certs.client())
			if err != nil {
				t.Fatal(err)
			}
			if v := c.ConnectionState().Version; v != tc.want {
				t.Errorf("%s %s: TLS %s, want %s", p, tc.a, tls.VersionName(v), tls.VersionName(tc.want))
			}
			c.Close()
		}
	}
}

// TestSessionTickets checks a second connection resumes where the class issues tickets
// and does not where it does not.
func TestSessionTickets(t *testing.T) {
	s := startTest(t, Limits{})
	for _, a := range []netip.Addr{classAddr(0), addrTickets} {
		b, _ := s.table.Behaviour(a, DoT)
		for _, p := range []Protocol{DoT, DoH} {
			cfg := s.certs.client()
			var resumed bool
			for range 2 {
				c, err := tls.Dial("tcp", s.target(p, a), cfg)
				if err != nil {
					t.Fatal(err)
				}
				// TLS 1.3 tickets arrive after the handshake: a read makes the client
				// process them (the server sends nothing else, so the read times out).
				c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
				c.Read(make([]byte, 1))
				resumed = c.ConnectionState().DidResume
				c.Close()
			}
			if resumed != b.SessionTickets {
				t.Errorf("%s %s: resumed %v, want %v", p, a, resumed, b.SessionTickets)
			}
		}
	}
}

func TestKeepalive(t *testing.T) {
	s := startTest(t, Limits{IdleTimeout: 7 * time.Second})
	for _, a := range []netip.Addr{classAddr(0), addrKeepalive} {
		b, _ := s.table.Behaviour(a, DoTCP)
		for _, p := range []Protocol{DoUDP, DoTCP, DoT} {
			for _, ask := range []bool{false, true} {
				m := query("test.com")
				m.SetEdns0(1232, false)
				if ask {
					o := m.IsEdns0()
					o.Option = append(o.Option, &dns.EDNS0_TCP_KEEPALIVE{Code: dns.EDNS0TCPKEEPALIVE})
				}
				r, err := s.exchange(p, a, m, okTimeout)
				if err != nil {
					t.Fatal(err)
				}
				var got *dns.EDNS0_TCP_KEEPALIVE
				if o := r.IsEdns0(); o != nil {
					for _, opt := range o.Option {
						if k, ok := opt.(*dns.EDNS0_TCP_KEEPALIVE); ok {
							got = k
						}
					}
				}
				want := b.Keepalive && ask && p != DoUDP
				if (got != nil) != want {
					t.Fatalf("%s %s asked=%v: keepalive %v, want present=%v", p, a, ask, got, want)
				}
				if got != nil && got.Timeout != 70 {
					t.Fatalf("%s %s: keepalive timeout %d, want 70 (7 s in 100 ms units)", p, a, got.Timeout)
				}
			}
		}
	}
}

// TestLargeQuery sends queries padded (RFC 7830) past 512 bytes on every protocol; the
// stream loop once sliced them out of a 512-byte buffer (found by FuzzStream).
func TestLargeQuery(t *testing.T) {
	s := startTest(t, Limits{})
	for _, pad := range []int{600, 3000} {
		for _, p := range []Protocol{DoUDP, DoTCP, DoT} {
			m := query("test.com")
			m.SetEdns0(4096, false)
			o := m.IsEdns0()
			o.Option = append(o.Option, &dns.EDNS0_PADDING{Padding: make([]byte, pad)})
			r, err := s.exchange(p, classAddr(0), m, okTimeout)
			if err != nil {
				t.Fatalf("%s with %d bytes of padding: %v", p, pad, err)
			}
			checkAnswer(t, s.table, p, classAddr(0), r)
		}
		m := query("test.com")
		m.SetEdns0(4096, false)
		m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_PADDING{Padding: make([]byte, pad)})
		r, _, err := s.doh(classAddr(0), m, true, false, okTimeout)
		if err != nil {
			t.Fatalf("doh with %d bytes of padding: %v", pad, err)
		}
		checkAnswer(t, s.table, DoH, classAddr(0), r)
	}
}

// TestPersistent sends several queries on one DoTCP and one DoT connection.
func TestPersistent(t *testing.T) {
	s := startTest(t, Limits{})
	for _, p := range []Protocol{DoTCP, DoT} {
		c := &dns.Client{Net: "tcp", Timeout: okTimeout}
		if p == DoT {
			c.Net = "tcp-tls"
			c.TLSConfig = s.certs.client()
		}
		conn, err := c.Dial(s.target(p, classAddr(0)))
		if err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			r, _, err := c.ExchangeWithConn(query(fmt.Sprintf("q%d.test.com", i)), conn)
			if err != nil {
				t.Fatalf("%s query %d: %v", p, i, err)
			}
			if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
				t.Fatalf("%s query %d: %v", p, i, r)
			}
		}
		conn.Close()
	}
}

func TestDoHMethodsAndVersions(t *testing.T) {
	s := startTest(t, Limits{})
	for _, a := range []netip.Addr{classAddr(0), addrHTTP1} {
		b, _ := s.table.Behaviour(a, DoH)
		for _, post := range []bool{false, true} {
			for _, http1 := range []bool{false, true} {
				r, resp, err := s.doh(a, query("test.com"), post, http1, okTimeout)
				if err != nil {
					t.Fatalf("%s post=%v http1=%v: %v", a, post, http1, err)
				}
				checkAnswer(t, s.table, DoH, a, r)
				wantMajor := 2
				if http1 || b.HTTP1Only {
					wantMajor = 1
				}
				if resp.ProtoMajor != wantMajor {
					t.Errorf("%s post=%v http1=%v: %s, want HTTP/%d", a, post, http1, resp.Proto, wantMajor)
				}
				if ct := resp.Header.Get("Content-Type"); ct != dohMediaType {
					t.Errorf("content type %q", ct)
				}
			}
		}
	}
	// Bad requests get HTTP errors, not crashes.
	tr := &http.Transport{TLSClientConfig: s.certs.client(), ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: okTimeout}
	base := "https://" + s.target(DoH, classAddr(0))
	for _, tc := range []struct {
		method, path, ctype, body string
		want                      int
	}{
		{"GET", dohPath + "?dns=!!!", "", "", http.StatusBadRequest},
		{"GET", dohPath, "", "", http.StatusBadRequest},
		{"GET", dohPath + "?dns=AAAA", "", "", http.StatusBadRequest},
		{"POST", dohPath, "text/plain", "x", http.StatusUnsupportedMediaType},
		{"POST", dohPath, dohMediaType, strings.Repeat("x", 70000), http.StatusRequestEntityTooLarge},
		{"PUT", dohPath, "", "", http.StatusMethodNotAllowed},
		{"GET", "/other", "", "", http.StatusNotFound},
	} {
		req, _ := http.NewRequest(tc.method, base+tc.path, strings.NewReader(tc.body))
		if tc.ctype != "" {
			req.Header.Set("Content-Type", tc.ctype)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.method, tc.path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s %s: %d, want %d", tc.method, tc.path, resp.StatusCode, tc.want)
		}
	}
}

// TestHostileClients throws bad input at every listener and checks the server survives.
func TestHostileClients(t *testing.T) {
	s := startTest(t, Limits{IdleTimeout: time.Second})
	a := classAddr(0)
	// UDP: random datagrams of every size class, a bare header, an empty datagram.
	u, err := net.Dial("udp4", s.target(DoUDP, a))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 1, 11, 12, 13, 100, 1500, 65000} {
		b := make([]byte, n)
		rand.Read(b)
		u.Write(b)
	}
	u.Close()
	// TCP and TLS: a zero length, a huge length, junk instead of a ClientHello, a
	// half-sent query followed by silence (bounded by IdleTimeout).
	for _, p := range []Protocol{DoTCP, DoT, DoH} {
		for _, junk := range [][]byte{{0, 0}, {0xff, 0xff, 1, 2, 3}, bytes.Repeat([]byte{0x16}, 300), {0, 40, 1, 2}} {
			c, err := net.Dial("tcp4", s.target(p, a))
			if err != nil {
				t.Fatal(err)
			}
			c.Write(junk)
			c.SetReadDeadline(time.Now().Add(okTimeout))
			t0 := time.Now()
			io.Copy(io.Discard, c) // the server must close (or reset) on its own
			t.Logf("%s %x: closed after %v", p, junk[:min(4, len(junk))], time.Since(t0))
			c.Close()
		}
	}
	for _, p := range allProtocols {
		r, err := s.ask(p, a, okTimeout)
		if err != nil {
			t.Fatalf("%s after hostile clients: %v", p, err)
		}
		checkAnswer(t, s.table, p, a, r)
	}
}

// TestConnectionLimit holds MaxConns stalled connections and checks the next one is
// refused with a reset while the held ones stay open.
func TestConnectionLimit(t *testing.T) {
	const limit = 3
	s := startTest(t, Limits{MaxConns: limit})
	stall := classAddr(indexOf(ClassStall))
	var held []net.Conn
	for range limit {
		c, err := net.Dial("tcp4", s.target(DoTCP, stall))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	// Wait until the server has taken all of them (a condition, not a sleep).
	deadline := time.Now().Add(okTimeout)
	for s.Stats().TCPConns < limit {
		if time.Now().After(deadline) {
			t.Fatalf("server accepted %d connections, want %d", s.Stats().TCPConns, limit)
		}
		time.Sleep(5 * time.Millisecond)
	}
	_, err := s.ask(DoTCP, classAddr(0), okTimeout)
	if err == nil || isTimeout(err) {
		t.Fatalf("query beyond the limit: %v, want a reset or EOF", err)
	}
	if s.Stats().Rejected == 0 {
		t.Fatal("no rejected connection counted")
	}
	for _, c := range held {
		c.Close()
	}
	// Once the held connections are gone, service resumes.
	deadline = time.Now().Add(okTimeout)
	for {
		r, err := s.ask(DoTCP, classAddr(0), okTimeout)
		if err == nil {
			checkAnswer(t, s.table, DoTCP, classAddr(0), r)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no service after the held connections closed: %v", err)
		}
	}
}

// TestCloseReleasesEverything opens held connections of every kind (stalls, endless
// streams, TLS stalls, DoH streams, idle keep-alives), closes the server and waits until
// the goroutine count is back to where it started: nothing outlives Close.
func TestCloseReleasesEverything(t *testing.T) {
	before := runtime.NumGoroutine()
	certs := newTestCerts(t)
	// Held connections would outlive a Close that waited for them: HoldTimeout far beyond
	// the test's patience makes that a failure, not a slow pass.
	srv, err := Start(t.Context(), Config{Directory: testTable(), Certs: certs,
		Ports: Ports{UDP: -1, TCP: -1, DoT: -1, DoH: -1}, Limits: Limits{HoldTimeout: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	s := &testServer{Server: srv, table: testTable(), certs: certs}
	var conns []net.Conn
	for _, c := range []Class{ClassStall, ClassEndless, ClassTLSStall, ClassAnswer} {
		for _, p := range []Protocol{DoTCP, DoT, DoH} {
			conn, err := net.Dial("tcp4", s.target(p, classAddr(indexOf(c))))
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, conn)
		}
	}
	// A DoH request left stalled mid-stream.
	go s.doh(classAddr(indexOf(ClassStall)), query("test.com"), false, false, okTimeout)
	deadline := time.Now().Add(okTimeout)
	for srv.Stats().TCPConns < uint64(len(conns)+1) {
		if time.Now().After(deadline) {
			t.Fatalf("server took %d connections, want %d", srv.Stats().TCPConns, len(conns)+1)
		}
		time.Sleep(5 * time.Millisecond)
	}
	closed := make(chan error, 1)
	go func() { closed <- srv.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(okTimeout):
		t.Fatal("Close still waiting for held connections")
	}
	for _, c := range conns {
		c.Close()
	}
	// Poll (a condition, bounded) until only the test's own goroutines remain; the
	// client's DoH goroutine ends when the server's close reaches it.
	deadline = time.Now().Add(okTimeout)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines after Close, %d before:\n%s", runtime.NumGoroutine(), before,
				buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func indexOf(c Class) int {
	for i, x := range Classes {
		if x == c {
			return i
		}
	}
	panic("unknown class " + c)
}

// TestFastOpen checks the TFO address gets a listener with TCP_FASTOPEN and, where this
// namespace lets servers use TFO, that a second connection's SYN carries the query.
func TestFastOpen(t *testing.T) {
	s := startTest(t, Limits{})
	var tfo, plain int
	for _, l := range s.listeners {
		tl, ok := l.(*net.TCPListener)
		if !ok {
			continue
		}
		rc, err := tl.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var v int
		rc.Control(func(fd uintptr) { v, _ = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_FASTOPEN) })
		if addrOf(tl.Addr()) == addrFastOpen {
			if v <= 0 {
				t.Errorf("TFO listener %s: TCP_FASTOPEN=%d", tl.Addr(), v)
			}
			tfo++
		} else {
			if v != 0 {
				t.Errorf("listener %s: TCP_FASTOPEN=%d, want 0", tl.Addr(), v)
			}
			plain++
		}
	}
	if tfo != 3 {
		t.Fatalf("%d TFO listeners, want 3 (DoTCP, DoT, DoH)", tfo)
	}
	// The TFO listener still answers like its behaviour says.
	for _, p := range allProtocols {
		r, err := s.ask(p, addrFastOpen, okTimeout)
		if err != nil {
			t.Fatal(err)
		}
		checkAnswer(t, s.table, p, addrFastOpen, r)
	}
	if !FastOpenServerEnabled() {
		// TestFastOpenNamespace checks TFO end to end in a private namespace, everywhere.
		t.Logf("%s lacks the server bit 0x2 in this namespace: the end-to-end TFO check is TestFastOpenNamespace's", fastOpenSysctl)
		return
	}
	got, err := tfoCheck(s.target)
	if err != nil {
		t.Fatal(err)
	}
	checkTFO(t, s.table, got)
}

// tfoCheck makes two DoTCP exchanges with TCP_FASTOPEN_CONNECT to a TFO address and to a
// plain one (the first fetches the cookie, the second may carry the query in its SYN) and
// returns, per address, whether the second SYN's data was acknowledged.
func tfoCheck(target func(Protocol, netip.Addr) string) (map[netip.Addr]bool, error) {
	got := map[netip.Addr]bool{}
	for _, a := range []netip.Addr{addrFastOpen, classAddr(0)} {
		for range 2 {
			syn, err := tfoExchange(target(DoTCP, a))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", a, err)
			}
			got[a] = syn
		}
	}
	return got, nil
}

func checkTFO(t *testing.T, dir Directory, got map[netip.Addr]bool) {
	t.Helper()
	for a, syn := range got {
		b, _ := dir.Behaviour(a, DoTCP)
		if syn != b.FastOpen {
			t.Errorf("%s: SYN data acknowledged %v, want %v (FastOpen)", a, syn, b.FastOpen)
		}
	}
}

// tfoExchange sends a DoTCP query with TCP_FASTOPEN_CONNECT, reads the reply and reports
// whether the server acknowledged data in the SYN (TCPI_OPT_SYN_DATA).
func tfoExchange(target string) (bool, error) {
	d := net.Dialer{Timeout: okTimeout, Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_FASTOPEN_CONNECT, 1)
		})
		return serr
	}}
	c, err := d.Dial("tcp4", target)
	if err != nil {
		return false, err
	}
	defer c.Close()
	wire, _ := query("test.com").Pack()
	out := append([]byte{byte(len(wire) >> 8), byte(len(wire))}, wire...)
	if _, err := c.Write(out); err != nil {
		return false, err
	}
	c.SetReadDeadline(time.Now().Add(okTimeout))
	var pfx [2]byte
	if _, err := io.ReadFull(c, pfx[:]); err != nil {
		return false, err
	}
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		return false, err
	}
	var info *unix.TCPInfo
	var ierr error
	rc.Control(func(fd uintptr) { info, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) })
	if ierr != nil {
		return false, ierr
	}
	const tcpiOptSynData = 32 // linux/tcp.h TCPI_OPT_SYN_DATA
	return info.Options&tcpiOptSynData != 0, nil
}

// envTFOChild marks the copy of the test binary that TestFastOpenNamespace runs inside
// a private user and network namespace.
const envTFOChild = "DOQSCAN_SIMDNS_TFO_CHILD"

// TestFastOpenNamespace runs the server and the client in a private network namespace
// (so the server bit of net.ipv4.tcp_fastopen can be set without touching the host's),
// through Config.EnableFastOpenSysctl as simserver does in the testbed's internet
// namespace, and checks TFO end to end: the FastOpen address acknowledges data in the
// SYN, the others do not. The namespace belongs to a new user namespace in which this
// user is root, so no privilege is needed: the test re-runs itself there.
func TestFastOpenNamespace(t *testing.T) {
	if os.Getenv(envTFOChild) == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestFastOpenNamespace$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), envTFOChild+"=1")
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}}}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Skipf("SKIP: cannot create a user and network namespace here (%v): the kernel or its policy forbids unprivileged user namespaces", err)
		}
		err := cmd.Wait()
		t.Logf("in a private user and network namespace:\n%s", out.String())
		if err != nil {
			t.Fatalf("the namespaced run failed: %v", err)
		}
		if !strings.Contains(out.String(), "--- PASS: TestFastOpenNamespace") {
			t.Fatal("the namespaced run did not run TestFastOpenNamespace")
		}
		return
	}
	if err := loopbackUp(); err != nil {
		t.Fatal(err)
	}
	certs := newTestCerts(t)
	tab := testTable()
	srv, err := Start(t.Context(), Config{Directory: tab, Certs: certs, EnableFastOpenSysctl: true,
		Ports: Ports{UDP: -1, TCP: -1, DoT: -1, DoH: -1}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if !FastOpenServerEnabled() {
		t.Fatal("EnableFastOpenSysctl did not set the server bit")
	}
	ts := &testServer{Server: srv, table: tab, certs: certs}
	got, err := tfoCheck(ts.target)
	if err != nil {
		t.Fatal(err)
	}
	checkTFO(t, tab, got)
	if !got[addrFastOpen] {
		t.Fatal("TFO address did not take data in the SYN")
	}
}

// loopbackUp sets lo up in the network namespace of the calling thread (SIOCSIFFLAGS).
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("SIOCGIFFLAGS lo: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("SIOCSIFFLAGS lo: %w", err)
	}
	return nil
}

func TestMain(m *testing.M) {
	os.Exit(m.Run())
}
