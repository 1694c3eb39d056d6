package testbed

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"sort"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/testbed/netns"
)

// Measurement helpers shared by the tests and the benchmark.

var pingRE = regexp.MustCompile(`= ([0-9.]+)/([0-9.]+)/([0-9.]+)/([0-9.]+) ms`)

type pingResult struct{ min, avg, max, mdev time.Duration }

// ping runs iputils ping from vantage 0 (kernel timestamps, -U: full user-to-user time).
func ping(ctx context.Context, tb *Testbed, dst string, count int) (pingResult, error) {
	out, err := tb.Command(ctx, 0, "ping", "-n", "-q", "-c", strconv.Itoa(count), "-i", "0.05", "-W", "3", dst).CombinedOutput()
	if err != nil {
		return pingResult{}, fmt.Errorf("ping %s: %w\n%s", dst, err, out)
	}
	m := pingRE.FindSubmatch(out)
	if m == nil {
		return pingResult{}, fmt.Errorf("ping %s: no summary in %q", dst, out)
	}
	ms := func(b []byte) time.Duration {
		f, _ := strconv.ParseFloat(string(b), 64)
		return time.Duration(f * float64(time.Millisecond))
	}
	return pingResult{ms(m[1]), ms(m[2]), ms(m[3]), ms(m[4])}, nil
}

// tcpServer listens on 0.0.0.0:port in the internet namespace (AnyIP: every address).
func tcpServer(t testing.TB, tb *Testbed, port int) {
	t.Helper()
	var ln net.Listener
	err := netns.Do(tb.Inet(), func() (err error) {
		ln, err = net.Listen("tcp4", fmt.Sprintf("0.0.0.0:%d", port))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
}

// tcpConnect measures n TCP handshakes (connect() = one round trip) from vantage 0.
func tcpConnect(tb *Testbed, dst string, port, n int) ([]time.Duration, error) {
	var out []time.Duration
	for i := 0; i < n; i++ {
		var d time.Duration
		err := netns.Do(tb.Vantage(0), func() error {
			t0 := time.Now()
			c, err := net.DialTimeout("tcp4", net.JoinHostPort(dst, strconv.Itoa(port)), 5*time.Second)
			d = time.Since(t0)
			if err != nil {
				return err
			}
			return c.Close()
		})
		if err != nil {
			return out, err
		}
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, nil
}

func median(d []time.Duration) time.Duration { return d[len(d)/2] }

// udpSink counts datagrams arriving at 0.0.0.0:port in the internet namespace.
type udpSink struct {
	conn net.PacketConn
	n    atomic.Uint64
}

func newUDPSink(t testing.TB, tb *Testbed, port int) *udpSink {
	t.Helper()
	s := &udpSink{}
	err := netns.Do(tb.Inet(), func() (err error) {
		s.conn, err = net.ListenPacket("udp4", fmt.Sprintf("0.0.0.0:%d", port))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if uc, ok := s.conn.(*net.UDPConn); ok {
		_ = uc.SetReadBuffer(8 << 20)
	}
	t.Cleanup(func() { s.conn.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, _, err := s.conn.ReadFrom(buf); err != nil {
				return
			}
			s.n.Add(1)
		}
	}()
	return s
}

// flood sends UDP datagrams of size bytes from vantage 0 at rate packets/s until ctx is
// done, cycling over the 256 addresses of dst's /24 (many flows, like a scan; the line
// hashes flows onto its release threads), and returns how many it sent.
func flood(ctx context.Context, tb *Testbed, dst string, rate, size int) (uint64, error) {
	ap, err := netip.ParseAddrPort(dst)
	if err != nil {
		return 0, err
	}
	var conn *net.UDPConn
	err = netns.Do(tb.Vantage(0), func() (err error) {
		conn, err = net.ListenUDP("udp4", nil)
		return err
	})
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	base := ap.Addr().As4()
	dsts := make([]netip.AddrPort, 256)
	for i := range dsts {
		a := base
		a[3] = byte(i)
		dsts[i] = netip.AddrPortFrom(netip.AddrFrom4(a), ap.Port())
	}
	buf := make([]byte, size)
	var sent uint64
	t0 := time.Now()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return sent, nil
		case <-tick.C:
		}
		due := uint64(time.Since(t0).Seconds() * float64(rate))
		for sent < due {
			// Errors (ENOBUFS, ICMP-induced ECONNREFUSED) count as sent: keep pacing.
			_, _ = conn.WriteToUDPAddrPort(buf, dsts[sent%uint64(len(dsts))])
			sent++
		}
	}
}

// zmapUDP runs zmap's udp module from vantage 0 over prefix on port and returns the
// addresses that answered with UDP (success=1).
func zmapUDP(ctx context.Context, t testing.TB, tb *Testbed, prefix string, port int) (map[string]bool, error) {
	return zmapScan(ctx, t, tb, prefix, port, "text:doqscan-testbed", 10000)
}

// zmapScan runs zmap's udp module with a probe (--probe-args) from vantage 0.
func zmapScan(ctx context.Context, t testing.TB, tb *Testbed, prefix string, port int, probe string, rate int) (map[string]bool, error) {
	dir := t.TempDir()
	allow, block, out := dir+"/allow", dir+"/block", dir+"/out.csv"
	if err := writeFile(allow, prefix+"\n"); err != nil {
		return nil, err
	}
	if err := writeFile(block, BlocklistOutsideTestbed()); err != nil {
		return nil, err
	}
	cmd := tb.Command(ctx, 0, "zmap", "-M", "udp", "-p", strconv.Itoa(port), "--probe-args="+probe,
		"-i", tb.VantageIf(0), "-G", tb.GatewayMAC(0), "-S", tb.VantageAddr(0).String(),
		"-w", allow, "-b", block, "-r", strconv.Itoa(rate), "-c", "3", "--seed", "7",
		"-O", "csv", "-f", "saddr,success", "-o", out, "-q")
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("zmap: %w\n%s", err, b)
	}
	b, err := readFile(out)
	if err != nil {
		return nil, err
	}
	got := map[string]bool{}
	for _, line := range splitLines(b) {
		var addr, ok string
		if n, _ := fmt.Sscanf(replaceComma(line), "%s %s", &addr, &ok); n == 2 && ok == "1" {
			got[addr] = true
		}
	}
	return got, nil
}
