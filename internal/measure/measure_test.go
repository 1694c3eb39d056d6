package measure_test

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"testing"

	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/measure/measuretest"
)

func TestEveryProtocolAnswers(t *testing.T) {
	s := measuretest.Start(t, measuretest.Config{Host: "127.0.0.2"})
	for _, p := range measure.Protocols {
		variants := []string{""}
		if p == measure.DoH || p == measure.DoH3 {
			variants = []string{measure.VariantGET, measure.VariantPOST}
		}
		for _, v := range variants {
			t.Run(string(p)+v, func(t *testing.T) {
				m, err := measure.For(p)
				if err != nil {
					t.Fatal(err)
				}
				req := s.Request(p)
				req.Variant = v
				req.Peer = measure.NewPeer()
				res := m.Measure(context.Background(), req)
				if res.Status != measure.StatusOK {
					t.Fatalf("status %s: %v", res.Status, res.Err)
				}
				q := res.First()
				if q.Rcode != 0 || len(q.Answers) != 1 || q.Answers[0] != s.Answer.String() {
					t.Fatalf("answer %+v, want %s", q, s.Answer)
				}
				if q.Resolve <= 0 {
					t.Fatalf("resolve %v", q.Resolve)
				}
				checkStamps(t, p, res)
				if p == measure.DoUDP {
					if res.HasHandshake {
						t.Fatal("DoUDP has no handshake")
					}
					return
				}
				if !res.HasHandshake || res.Handshake <= 0 {
					t.Fatalf("handshake %v", res.Handshake)
				}
				if p == measure.DoTCP {
					return
				}
				if res.TLSVersion != 0x0304 || res.TLSCipher == "" || res.ALPN == "" {
					t.Fatalf("tls %x %q alpn %q", res.TLSVersion, res.TLSCipher, res.ALPN)
				}
				if p == measure.DoQ || p == measure.DoH3 {
					if res.QUICVersion != 1 || len(res.Qlog) == 0 {
						t.Fatalf("quic version %x, qlog %d bytes", res.QUICVersion, len(res.Qlog))
					}
				}
			})
		}
	}
}

// checkStamps: the stamps behind the durations (what a packet capture checks them
// against) are there and add up to them.
func checkStamps(t *testing.T, p measure.Protocol, res *measure.Result) {
	t.Helper()
	if !res.Local.IsValid() || res.Local.Addr().IsUnspecified() || res.Local.Port() == 0 {
		t.Errorf("local address %v, want the address and port the packets carry", res.Local)
	}
	q := res.First()
	if q.StartedAt.Before(res.StartedAt) {
		t.Errorf("query started %v before the exchange (%v)", q.StartedAt, res.StartedAt)
	}
	crypto := res.CryptoTo.Sub(res.CryptoFrom)
	switch p {
	case measure.DoUDP:
		if res.TCPHandshake != 0 || !res.CryptoFrom.IsZero() {
			t.Errorf("DoUDP has handshake stamps: tcp %v, crypto %v", res.TCPHandshake, res.CryptoFrom)
		}
	case measure.DoTCP:
		if res.TCPHandshake != res.Handshake || !res.CryptoFrom.IsZero() {
			t.Errorf("DoTCP: tcp part %v, handshake %v, crypto from %v", res.TCPHandshake, res.Handshake, res.CryptoFrom)
		}
	case measure.DoT, measure.DoH:
		if res.TCPHandshake <= 0 || crypto <= 0 || res.TCPHandshake+crypto != res.Handshake {
			t.Errorf("%s: tcp %v + tls %v != handshake %v", p, res.TCPHandshake, crypto, res.Handshake)
		}
		if !q.StartedAt.After(res.CryptoTo) {
			t.Errorf("%s: query sent %v before the handshake ended %v", p, q.StartedAt, res.CryptoTo)
		}
	case measure.DoQ, measure.DoH3:
		if crypto <= 0 || crypto != res.Handshake || res.CryptoFrom.Before(res.StartedAt) {
			t.Errorf("%s: quic stamps %v..%v (%v), handshake %v, started %v", p, res.CryptoFrom, res.CryptoTo, crypto, res.Handshake, res.StartedAt)
		}
	}
}

// TestClassifyUnreachable: every ICMP and ICMPv6 destination-unreachable the kernel
// reports (as the errno Linux maps it to, also when no net.OpError wraps it, as quic-go
// returns a socket error) is a classified network outcome or a refusal, never "error".
func TestClassifyUnreachable(t *testing.T) {
	for _, c := range []struct {
		errno syscall.Errno
		want  measure.Status
	}{
		{syscall.ECONNREFUSED, measure.StatusConnRefused}, // port unreachable (ICMP code 3, ICMPv6 code 4)
		{syscall.EHOSTUNREACH, measure.StatusNetwork},     // host/address unreachable, ICMP filtered
		{syscall.ENETUNREACH, measure.StatusNetwork},      // net unreachable, ICMPv6 no route
		{syscall.EACCES, measure.StatusNetwork},           // ICMPv6 administratively prohibited
	} {
		err := fmt.Errorf("handshake: %w", os.NewSyscallError("recvmsg", c.errno))
		if got := measure.Classify(err); got != c.want {
			t.Errorf("%v: %s, want %s", c.errno, got, c.want)
		}
	}
}
