package drive_test

import (
	"context"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/doqscan/doqscan/internal/dnsbench/drive"
	"github.com/doqscan/doqscan/internal/dnsmsg"
	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/testsupport"
)

// TestPipelineSendsBeforeNextWaits: without Burst (a paced Next), a query goes out as
// soon as Next returned it, before Next is asked for the next one: Next for seq 1 waits
// until the server has seen query 0, for DoUDP and pipelined DoTCP.
func TestPipelineSendsBeforeNextWaits(t *testing.T) {
	seen := make(chan struct{}, 16)
	uc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 7)})
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	tl, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 7)})
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Close()
	answer := func(b []byte) []byte {
		q := new(dns.Msg)
		if q.Unpack(b) != nil {
			return nil
		}
		seen <- struct{}{}
		m := new(dns.Msg)
		m.SetReply(q)
		out, _ := m.Pack()
		return out
	}
	testsupport.ServeUDP(uc, func(c *net.UDPConn, msg []byte, from netip.AddrPort) {
		if a := answer(msg); a != nil {
			_, _ = c.WriteToUDPAddrPort(a, from)
		}
	})
	go func() {
		for {
			c, err := tl.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				for {
					var l [2]byte
					if _, err := io.ReadFull(c, l[:]); err != nil {
						return
					}
					b := make([]byte, int(l[0])<<8|int(l[1]))
					if _, err := io.ReadFull(c, b); err != nil {
						return
					}
					if a := answer(b); a != nil {
						_, _ = c.Write(append([]byte{byte(len(a) >> 8), byte(len(a))}, a...))
					}
				}
			}()
		}
	}()
	for _, c := range []struct {
		p    measure.Protocol
		addr netip.AddrPort
	}{{measure.DoUDP, uc.LocalAddr().(*net.UDPAddr).AddrPort()}, {measure.DoTCP, tl.Addr().(*net.TCPAddr).AddrPort()}} {
		t.Run(string(c.p), func(t *testing.T) {
			for len(seen) > 0 {
				<-seen
			}
			waited := false
			req := &measure.Request{Addr: c.addr, Timeout: 10 * time.Second, Mode: measure.ModePersistent}
			next := func(_ context.Context, seq int) (dnsmsg.Query, bool) {
				if seq == 1 {
					select {
					case <-seen: // query 0 reached the server while Next waits
						waited = true
					case <-time.After(3 * time.Second):
					}
				}
				return dnsmsg.Query{Name: "a.example", Type: dns.TypeA}, seq < 2
			}
			var col collector
			res, qs := col.measure(t, c.p, req, drive.Plan{Streams: 4, Next: next})
			if !waited {
				t.Fatal("query 0 was held back until Next returned query 1")
			}
			if len(qs) != 2 || res.Status != measure.StatusOK {
				t.Fatalf("%s %v, %d outcomes", res.Status, res.Err, len(qs))
			}
		})
	}
}
