package measure_test

import (
	"context"
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/testsupport"
)

// echoAnswerer answers every datagram on a loopback socket with itself, QR set (a valid
// answer without records), allocating nothing per datagram.
func echoAnswerer(t testing.TB) *net.UDPConn {
	return serveLoopbackUDP(t, testsupport.ReflectQuery)
}

// serveLoopbackUDP listens on 127.0.0.7 and serves it with answer
// (testsupport.ServeUDP, which allocates nothing per datagram) until the test ends.
func serveLoopbackUDP(t testing.TB, answer func(c *net.UDPConn, msg []byte, from netip.AddrPort)) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 7)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	testsupport.ServeUDP(c, answer)
	return c
}

// allocsPerQuery runs DoUDP sessions of a few and of many queries with streams
// outstanding (1: one after another) (what dnsbench's max load does) and returns the heap allocations per
// additional query (the whole process: the echo server allocates nothing per query).
func allocsPerQuery(t *testing.T, streams int) float64 {
	srv := echoAnswerer(t)
	m, _ := measure.For(measure.DoUDP)
	answered := 0
	session := func(n int) uint64 {
		req := &measure.Request{Addr: srv.LocalAddr().(*net.UDPAddr).AddrPort(), Timeout: time.Minute,
			Mode: measure.ModePersistent, Streams: streams, RcodeOnly: true, Burst: true}
		req.Next = func(_ context.Context, seq int) (string, uint16, bool) { return "a.example", 1, seq < n }
		req.OnQuery = func(q measure.Query) {
			if q.Status == measure.StatusOK {
				answered++ // one goroutine (the pipeline's receiver) delivers
			}
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		res := m.Measure(context.Background(), req)
		runtime.ReadMemStats(&after)
		if res.Status != measure.StatusOK {
			t.Fatalf("%d queries: %s %v", n, res.Status, res.Err)
		}
		return after.Mallocs - before.Mallocs
	}
	const few, many = 200, 5200
	session(few) // warm up (pools, the runtime's first timers)
	a, b := session(few), session(many)
	if answered != 2*few+many {
		t.Fatalf("answered %d of %d", answered, 2*few+many)
	}
	return (float64(b) - float64(a)) / (many - few)
}

// A DoUDP session with OnQuery allocates (almost) nothing per query, one query at a
// time (kstamp's pooled read state) or pipelined (reused pending queries, messages and
// batch syscalls), and keeps no outcome. The bound
// leaves room for the runtime's own occasional allocations (timers, map growth).
func TestUDPPipelineAllocsPerQuery(t *testing.T) {
	if raceDetector {
		t.Skip("SKIP: the race detector's instrumentation allocates on its own; run without -race")
	}
	for _, streams := range []int{1, 4, 16} {
		got := allocsPerQuery(t, streams)
		t.Logf("streams %d: %.2f allocations per query", streams, got)
		if got > 0.5 {
			t.Errorf("streams %d: %.2f allocations per query, want <= 0.5", streams, got)
		}
	}
}
