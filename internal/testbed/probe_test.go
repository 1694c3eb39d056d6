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
	"golang.org/x/net/ipv4"
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

// udpSink counts datagrams arriving at 0.0.0.0:port in the internet namespace. It reads
// in recvmmsg batches paced by a 1 ms ticker (one wake-up per tick, not per packet), so
// counting 100,000 packets/s costs the machine little next to the line it measures; the
// 8 MiB receive buffer holds far more than one tick of a flood. Every count is a datagram
// the internet side's UDP socket received.
type udpSink struct {
	conn *net.UDPConn
	n    atomic.Uint64
}

// sinkBatch is how many datagrams one recvmmsg may return.
const sinkBatch = 256

func newUDPSink(t testing.TB, tb *Testbed, port int) *udpSink {
	t.Helper()
	s := &udpSink{}
	err := netns.Do(tb.Inet(), func() (err error) {
		s.conn, err = net.ListenUDP("udp4", &net.UDPAddr{Port: port})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = s.conn.SetReadBuffer(8 << 20)
	t.Cleanup(func() { s.conn.Close() })
	go func() {
		pc := ipv4.NewPacketConn(s.conn)
		msgs := make([]ipv4.Message, sinkBatch)
		for i := range msgs {
			msgs[i].Buffers = [][]byte{make([]byte, 2048)}
		}
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			n, err := pc.ReadBatch(msgs, 0)
			if err != nil {
				return
			}
			s.n.Add(uint64(n))
			if n < len(msgs) {
				<-tick.C // let the next tick's packets gather
			}
		}
	}()
	return s
}

// floodBatch bounds the datagrams of one sendmmsg.
const floodBatch = 256

// flood sends UDP datagrams of size bytes from vantage 0 at rate packets/s until ctx is
// done, cycling over the 256 addresses of dst's /24 (many flows, like a scan; the line
// hashes flows onto its queues), and returns how many it sent. Packets leave in sendmmsg
// batches paced by a 1 ms ticker (the count due is computed from the elapsed time, so a
// late tick sends a bigger batch, never fewer packets).
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
	_ = conn.SetWriteBuffer(8 << 20)
	pc := ipv4.NewPacketConn(conn)
	base := ap.Addr().As4()
	buf := make([]byte, size)
	msgs := make([]ipv4.Message, 256) // one per address of the /24
	for i := range msgs {
		a := base
		a[3] = byte(i)
		msgs[i] = ipv4.Message{Buffers: [][]byte{buf}, Addr: &net.UDPAddr{IP: net.IP(a[:]), Port: int(ap.Port())}}
	}
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
			i := int(sent % uint64(len(msgs)))
			j := min(len(msgs), i+int(min(due-sent, floodBatch)))
			n, err := pc.WriteBatch(msgs[i:j], 0)
			if err != nil && n <= 0 {
				// ENOBUFS and the like: count the batch as sent and keep pacing (the
				// receiver side shows what arrived).
				n = j - i
			}
			sent += uint64(n)
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
