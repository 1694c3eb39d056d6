package simquic

import (
	"net"
	"net/netip"
	"testing"

	"github.com/doqscan/doqscan/internal/testbed/sockopt"

	"time"

	"golang.org/x/net/ipv4"

	"github.com/doqscan/doqscan/internal/testbed/population"
)

// sweep sends one VN probe to every address of prefix on port (as fast as the socket
// takes them) and returns the population addresses that answered, waiting until want
// replies arrived or wait passed.
func sweep(t testing.TB, f *fixture, prefix netip.Prefix, port uint16, want int, wait time.Duration) (map[netip.Addr]bool, time.Duration) {
	c, err := net.ListenUDP("udp4", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = sockopt.SetBuffers(c, socketBuffer)
	pkt, _, _ := vnProbe()
	got := map[netip.Addr]bool{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		b := make([]byte, 1500)
		for {
			c.SetReadDeadline(time.Now().Add(wait))
			_, from, err := c.ReadFromUDPAddrPort(b)
			if err != nil {
				return
			}
			got[fromLoopback(from.Addr())] = true
			if len(got) == want {
				return
			}
		}
	}()
	// sendmmsg(2) in batches, so the sender is not what limits the rate.
	pc := ipv4.NewPacketConn(c)
	var batch []ipv4.Message
	start := time.Now()
	for a := prefix.Addr(); prefix.Contains(a); a = a.Next() {
		batch = append(batch, ipv4.Message{Buffers: [][]byte{pkt}, Addr: f.target(a, port)})
		if len(batch) == 64 || !prefix.Contains(a.Next()) {
			for len(batch) > 0 {
				n, err := pc.WriteBatch(batch, 0)
				if err != nil {
					t.Fatal(err)
				}
				batch = batch[n:]
			}
		}
	}
	sent := time.Since(start)
	<-done
	return got, sent
}

// A VN sweep of a /20 holding the bulk DoQ population, sent in one burst, gets a reply
// from exactly the addresses the population says answer on 784 (what zprobe must find).
func TestVNSweepIsExact(t *testing.T) {
	for _, p := range []string{"198.19.32.0/20", "198.19.0.0/16"} {
		t.Run(p, func(t *testing.T) { testSweep(t, netip.MustParsePrefix(p)) })
	}
}

func testSweep(t *testing.T, prefix netip.Prefix) {
	f := setup(t)
	var want []netip.Addr
	for _, a := range f.pop.UDPResponders(784) {
		if prefix.Contains(a) && f.pop.Lookup(a).Peer == "" { // peers are the peers package's processes, not running here
			want = append(want, a)
		}
	}
	if len(want) < 100 {
		t.Fatalf("only %d responders in %s: the population changed?", len(want), prefix)
	}
	got, sent := sweep(t, f, prefix, 784, len(want), 3*time.Second)
	for _, a := range want {
		if !got[a] {
			t.Errorf("%s: no reply (population: %s)", a, f.pop.VNReply(a, 784))
		}
	}
	for a := range got {
		if f.pop.VNReply(a, 784) == population.VNNone || f.pop.Lookup(a).Peer != "" {
			t.Errorf("%s answered, population says silent", a)
		}
	}
	st := &f.srv.Stats
	t.Logf("%d probes sent in %v, %d replies, %d expected (server totals: %d datagrams, %d dropped, %d raw/VN)",
		1<<(32-prefix.Bits()), sent, len(got), len(want), st.Datagrams.Load(), st.Dropped.Load(), st.Raw.Load())
}

// BenchmarkVNSweep prints the probe rate the server keeps up with: one iteration sweeps
// a /20 (4,096 probes) and counts replies against the population.
func BenchmarkVNSweep(b *testing.B) {
	f := setup(b)
	prefix := netip.MustParsePrefix("198.19.32.0/20")
	want := 0
	for _, a := range f.pop.UDPResponders(784) {
		if prefix.Contains(a) {
			want++
		}
	}
	var replies int
	start := time.Now()
	for b.Loop() {
		got, _ := sweep(b, f, prefix, 784, want, 3*time.Second)
		replies += len(got)
	}
	el := time.Since(start)
	probes := float64(b.N) * 4096
	b.ReportMetric(probes/el.Seconds(), "probes/s")
	b.ReportMetric(float64(replies)/float64(b.N*want), "replies/expected")
}
