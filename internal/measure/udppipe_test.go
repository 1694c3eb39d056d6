package measure_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/doqscan/doqscan/internal/measure"
)

// udpAnswerer answers every DNS query on a loopback socket by its name: ok.example with
// a datagram of another ID first, then the answer; big.example with an answer padded
// past 4096 bytes; wrong.example with an answer for another question.
func udpAnswerer(t *testing.T) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 7)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := c.ReadFromUDP(buf)
			if err != nil {
				return
			}
			q := new(dns.Msg)
			if q.Unpack(buf[:n]) != nil || len(q.Question) != 1 {
				continue
			}
			m := new(dns.Msg)
			m.SetReply(q)
			switch q.Question[0].Name {
			case "ok.example.":
				other := m.Copy()
				other.Id++
				b, _ := other.Pack()
				_, _ = c.WriteToUDP(b, from)
				b, _ = m.Pack()
				_, _ = c.WriteToUDP(b, from)
			case "big.example.":
				b, _ := m.Pack()
				_, _ = c.WriteToUDP(append(b, make([]byte, 5000)...), from)
			case "wrong.example.":
				m.Question[0].Name = "other.example."
				b, _ := m.Pack()
				_, _ = c.WriteToUDP(b, from)
			}
		}
	}()
	return c
}

// TestUDPPipelineHostile: with several queries outstanding on one DoUDP socket, a
// datagram with another ID is skipped, and an answer cut at the receive buffer or for
// another question is a bad response once the query's time runs out.
func TestUDPPipelineHostile(t *testing.T) {
	srv := udpAnswerer(t)
	m, _ := measure.For(measure.DoUDP)
	names := []string{"ok.example", "big.example", "wrong.example"}
	for _, rcodeOnly := range []bool{false, true} {
		req := &measure.Request{Addr: srv.LocalAddr().(*net.UDPAddr).AddrPort(), Timeout: 10 * time.Second,
			QueryTimeout: 300 * time.Millisecond, Mode: measure.ModePersistent, Streams: 3, RcodeOnly: rcodeOnly}
		req.Next = func(_ context.Context, seq int) (string, uint16, bool) {
			if seq >= len(names) {
				return "", 0, false
			}
			return names[seq], dns.TypeA, true
		}
		res := m.Measure(context.Background(), req)
		if len(res.Queries) != 3 {
			t.Fatalf("rcodeOnly %v: %d outcomes (%s %v)", rcodeOnly, len(res.Queries), res.Status, res.Err)
		}
		want := []measure.Status{measure.StatusOK, measure.StatusBadResponse, measure.StatusBadResponse}
		for i, q := range res.Queries {
			if q.Seq != i || q.Status != want[i] {
				t.Errorf("rcodeOnly %v, %s: seq %d %s %v; want %s", rcodeOnly, names[i], q.Seq, q.Status, q.Err, want[i])
			}
		}
		if q := res.Queries[0]; q.Resolve <= 0 || q.Resolve > 300*time.Millisecond {
			t.Errorf("resolve %v", q.Resolve)
		}
	}
}
