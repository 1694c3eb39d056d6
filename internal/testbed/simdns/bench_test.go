package simdns

import (
	"errors"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/ipv4"
)

// benchClients is how many clients query at once (each its own socket, one query in
// flight, like a measurement worker).
const benchClients = 32

// runUDPClients sends queries to target from benchClients sockets until b.N replies have
// arrived, and returns the replies per second.
func runUDPClients(b *testing.B, targets []string) float64 {
	b.Helper()
	wire, _ := query("test.com").Pack()
	var left atomic.Int64
	left.Store(int64(b.N))
	errs := make(chan error, benchClients)
	b.ResetTimer()
	start := time.Now()
	for i := range benchClients {
		go func() {
			c, err := net.Dial("udp4", targets[i%len(targets)])
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			buf := make([]byte, 1500)
			for left.Add(-1) >= 0 {
				if _, err := c.Write(wire); err != nil {
					errs <- err
					return
				}
				c.SetReadDeadline(time.Now().Add(okTimeout))
				if _, err := c.Read(buf); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range benchClients {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	el := time.Since(start)
	b.StopTimer()
	return float64(b.N) / el.Seconds()
}

// BenchmarkDoUDP measures the DoUDP queries/s simdns sustains on loopback (answer class,
// queries spread over 16 addresses), next to the ceiling of a bare IP_PKTINFO echo server
// with the same number of reader goroutines on the same machine in the same run.
func BenchmarkDoUDP(b *testing.B) {
	tab := Table{}
	var addrs []netip.Addr
	for i := range 16 {
		a := netip.AddrFrom4([4]byte{127, 0, 4, byte(i + 1)})
		tab.Set(a, Behaviour{Class: ClassAnswer}, DoUDP)
		addrs = append(addrs, a)
	}
	srv, err := Start(b.Context(), Config{Directory: tab, Ports: Ports{UDP: -1, TCP: -1, DoT: -1, DoH: -1}})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	port := srv.Addr(DoUDP).(*net.UDPAddr).Port
	targets := hostPorts(addrs, port)
	b.Run("simdns", func(b *testing.B) {
		qps := runUDPClients(b, targets)
		b.ReportMetric(qps, "queries/s")
	})
	echo, stop := startEcho(b, srv.cfg.Limits.UDPWorkers)
	defer stop()
	echoTargets := hostPorts(addrs, echo)
	b.Run("echo-ceiling", func(b *testing.B) {
		qps := runUDPClients(b, echoTargets)
		b.ReportMetric(qps, "replies/s")
	})
}

// startEcho runs a bare UDP echo server on the wildcard address with IP_PKTINFO (the same
// socket path simdns uses, without DNS): the ceiling simdns is compared with.
func startEcho(b *testing.B, workers int) (port int, stop func()) {
	c, err := net.ListenUDP("udp4", &net.UDPAddr{})
	if err != nil {
		b.Fatal(err)
	}
	pc := ipv4.NewPacketConn(c)
	if err := pc.SetControlMessage(ipv4.FlagDst, true); err != nil {
		b.Fatal(err)
	}
	for range workers {
		go func() {
			buf := make([]byte, 1500)
			for {
				n, cm, src, err := pc.ReadFrom(buf)
				if errors.Is(err, net.ErrClosed) {
					return
				}
				if err != nil || cm == nil {
					continue
				}
				// Echo a valid reply so the client's work is identical.
				buf[2] |= 0x80
				pc.WriteTo(buf[:n], &ipv4.ControlMessage{Src: cm.Dst}, src)
			}
		}()
	}
	return c.LocalAddr().(*net.UDPAddr).Port, func() { c.Close() }
}

// BenchmarkRespond measures building one reply (parse, answer, pack) without the network.
func BenchmarkRespond(b *testing.B) {
	wire, _ := query("test.com").Pack()
	bh := Behaviour{Class: ClassAnswer}
	for b.Loop() {
		if _, ok := respond(wire, bh, DoUDP, 0); !ok {
			b.Fatal("no reply")
		}
	}
}

// hostPorts returns "addr:port" for every address.
func hostPorts(addrs []netip.Addr, port int) []string {
	out := make([]string, 0, len(addrs))
	for _, a := range addrs {
		out = append(out, netip.AddrPortFrom(a, uint16(port)).String())
	}
	return out
}
