package peers

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/miekg/dns"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/doqscan/doqscan/internal/doq"
	"github.com/doqscan/doqscan/internal/testbed/proc"
)

// Probe timing: each attempt is bounded by probeAttempt; failed attempts are retried
// every probeInterval until the caller's deadline.
const (
	probeAttempt  = 2 * time.Second
	probeInterval = 100 * time.Millisecond
)

// ALPNs the probes offer.
const (
	alpnDoQ = "doq" // RFC 9250 §4.1.1
	alpnH3  = "h3"  // RFC 9114 §3.1
	alpnH11 = "http/1.1"
)

// Service is one (transport, port) a spec serves.
type Service struct {
	Proto string // "udp", "tcp", "dot", "doh", "doh3", "doq", "doq-noalpn" (DoQ offering no ALPN), "quic"
	Port  uint16
}

// Services lists what s serves, in the order the probes check them.
func (s Spec) Services() []Service {
	var out []Service
	add := func(proto string, port uint16) {
		if port != 0 {
			out = append(out, Service{proto, port})
		}
	}
	add("udp", s.DNSPort)
	add("tcp", s.DNSPort)
	add("dot", s.DoTPort)
	add("doh", s.DoHPort)
	add("doh3", s.DoH3Port)
	for _, p := range s.QUICPorts {
		switch s.Kind {
		case Ngtcp2:
			add("quic", p)
		case LazyDNS:
			add("doq-noalpn", p)
		default:
			add("doq", p)
		}
	}
	return out
}

// waitReady probes every service of s from namespace ns until each answers correctly,
// the process exits, or ctx ends.
func waitReady(ctx context.Context, ns string, s Spec, answer netip.Addr, p *peerProc) error {
	for _, svc := range s.Services() {
		for {
			err := Probe(ctx, ns, s.Addr, svc, answer)
			if err == nil {
				break
			}
			if !p.running() {
				return fmt.Errorf("process exited while probing %s/%d: %w; log tail:\n%s", svc.Proto, svc.Port, err, proc.Tail(p.logPath, 15))
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s/%d: %w (last probe: %v)", svc.Proto, svc.Port, ctx.Err(), err)
			case <-p.exited():
			case <-time.After(probeInterval):
			}
		}
	}
	return nil
}

// Probe sends one real query (or, for non-DoQ QUIC, one handshake) to addr's service
// from namespace ns ("" = the caller's) and checks the answer: NOERROR with the A record
// answer for test.com. Certificates are not verified (the testbed's are self-issued).
func Probe(ctx context.Context, ns string, addr netip.Addr, svc Service, answer netip.Addr) error {
	ctx, cancel := context.WithTimeout(ctx, probeAttempt)
	defer cancel()
	target := netip.AddrPortFrom(addr, svc.Port).String()
	var resp *dns.Msg
	err := inNamespace(ns, func() error {
		var err error
		switch svc.Proto {
		case "udp", "tcp":
			c := &dns.Client{Net: svc.Proto, Timeout: probeAttempt}
			resp, _, err = c.ExchangeContext(ctx, query(), target)
		case "dot":
			c := &dns.Client{Net: "tcp-tls", Timeout: probeAttempt,
				TLSConfig: &tls.Config{InsecureSkipVerify: true, ServerName: strings.TrimSuffix(Zone, ".")}}
			resp, _, err = c.ExchangeContext(ctx, query(), target)
		case "doh":
			resp, err = probeDoH(ctx, target)
		case "doh3":
			resp, err = probeDoH3(ctx, target)
		case "doq":
			resp, err = probeDoQ(ctx, target, alpnDoQ)
		case "doq-noalpn":
			resp, err = probeDoQ(ctx, target, "")
		case "quic":
			err = probeQUIC(ctx, target, alpnH3)
		default:
			err = fmt.Errorf("unknown service %q", svc.Proto)
		}
		return err
	})
	if err != nil || svc.Proto == "quic" {
		return err
	}
	return checkAnswer(resp, answer)
}

func query() *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(Zone, dns.TypeA)
	m.RecursionDesired = true
	return m
}

func checkAnswer(m *dns.Msg, want netip.Addr) error {
	if m == nil {
		return errors.New("no response")
	}
	if m.Rcode != dns.RcodeSuccess {
		return fmt.Errorf("rcode %s", dns.RcodeToString[m.Rcode])
	}
	for _, rr := range m.Answer {
		if a, ok := rr.(*dns.A); ok {
			if got, _ := netip.AddrFromSlice(a.A.To4()); got == want {
				return nil
			}
			return fmt.Errorf("answer A %v, want %v", a.A, want)
		}
	}
	return fmt.Errorf("no A record in %d answers", len(m.Answer))
}

// probeDoH posts one query over HTTP/1.1 on a TLS connection dialled here (so the
// socket belongs to the probing namespace). RFC 8484 §4.1: POST, application/dns-message.
func probeDoH(ctx context.Context, target string) (*dns.Msg, error) {
	q := query()
	q.Id = 0 // RFC 8484 §4.1: SHOULD use 0 for cache friendliness
	wire, err := q.Pack()
	if err != nil {
		return nil, err
	}
	d := &tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true, NextProtos: []string{alpnH11},
		ServerName: strings.TrimSuffix(Zone, ".")}}
	conn, err := d.DialContext(ctx, "tcp", target)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	req, err := dohRequest(ctx, target, wire)
	if err != nil {
		return nil, err
	}
	if err := req.Write(conn); err != nil {
		return nil, err
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		return nil, err
	}
	return dohReply(res)
}

// dohRequest is the RFC 8484 §4.1 POST of wire to target's /dns-query.
func dohRequest(ctx context.Context, target string, wire []byte) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+target+"/dns-query", bytes.NewReader(wire))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/dns-message")
	req.Header.Set("Accept", "application/dns-message")
	return req, nil
}

// dohReply reads a DoH response: 200 and a DNS message, or an error. It closes the body.
func dohReply(res *http.Response) (*dns.Msg, error) {
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, dns.MaxMsgSize))
	if err != nil {
		return nil, err
	}
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %s", res.Status)
	}
	m := new(dns.Msg)
	return m, m.Unpack(body)
}

// probeDoQ opens a QUIC connection offering alpn (none when "") and sends one query on
// one stream with the DoQ exchange verify and measure use (RFC 9250 §4.2: 2-octet
// length prefix, message ID 0, FIN after the query; without ALPN framed as RFC 9250).
func probeDoQ(ctx context.Context, target, alpn string) (*dns.Msg, error) {
	conn, err := dialQUIC(ctx, target, alpn)
	if err != nil {
		return nil, err
	}
	defer conn.CloseWithError(quic.ApplicationErrorCode(doq.CodeNoError), "")
	q := query()
	q.Id = 0
	wire, err := q.Pack()
	if err != nil {
		return nil, err
	}
	framing, err := doq.FramingFor(conn.ConnectionState().TLS.NegotiatedProtocol)
	if alpn == "" {
		framing, err = doq.NoALPNFraming, nil
	}
	if err != nil {
		return nil, err
	}
	reply, err := doq.Exchange(ctx, conn, framing, wire, doq.ExchangeOptions{})
	if err != nil {
		return nil, err
	}
	m := new(dns.Msg)
	return m, m.Unpack(reply)
}

// probeDoH3 posts one query over HTTP/3 on a QUIC connection dialled here (RFC 8484
// §4.1 over RFC 9114).
func probeDoH3(ctx context.Context, target string) (*dns.Msg, error) {
	q := query()
	q.Id = 0
	wire, err := q.Pack()
	if err != nil {
		return nil, err
	}
	conn, err := dialQUIC(ctx, target, alpnH3)
	if err != nil {
		return nil, err
	}
	defer conn.CloseWithError(0, "")
	cc := (&http3.Transport{}).NewClientConn(conn)
	req, err := dohRequest(ctx, target, wire)
	if err != nil {
		return nil, err
	}
	res, err := cc.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	return dohReply(res)
}

func probeQUIC(ctx context.Context, target, alpn string) error {
	conn, err := dialQUIC(ctx, target, alpn)
	if err != nil {
		return err
	}
	return conn.CloseWithError(0, "")
}

// dialQUIC creates its UDP socket in the calling thread (hence in the probing
// namespace) and completes a QUIC handshake with one ALPN.
func dialQUIC(ctx context.Context, target, alpn string) (*quic.Conn, error) {
	raddr, err := net.ResolveUDPAddr("udp", target)
	if err != nil {
		return nil, err
	}
	udp, err := net.ListenUDP("udp", nil)
	if err != nil {
		return nil, err
	}
	tr := &quic.Transport{Conn: udp}
	var protos []string
	if alpn != "" {
		protos = []string{alpn}
	}
	conn, err := tr.Dial(ctx, raddr, &tls.Config{InsecureSkipVerify: true, NextProtos: protos,
		ServerName: strings.TrimSuffix(Zone, ".")}, &quic.Config{HandshakeIdleTimeout: probeAttempt})
	if err != nil {
		tr.Close()
		return nil, err
	}
	go func() {
		<-conn.Context().Done()
		tr.Close()
	}()
	return conn, nil
}
