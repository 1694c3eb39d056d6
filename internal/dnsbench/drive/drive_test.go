package drive_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/doqscan/doqscan/internal/dnsbench/drive"
	"github.com/doqscan/doqscan/internal/dnsmsg"
	"github.com/doqscan/doqscan/internal/hostile"
	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/measure/measuretest"
	"github.com/doqscan/doqscan/internal/testsupport"
)

// names asks for the given names in turn (type A), rcodeOnly as given.
func names(rcodeOnly bool, ns ...string) func(context.Context, int) (dnsmsg.Query, bool) {
	return func(_ context.Context, seq int) (dnsmsg.Query, bool) {
		if seq >= len(ns) {
			return dnsmsg.Query{}, false
		}
		return dnsmsg.Query{Name: ns[seq], Type: dns.TypeA, RcodeOnly: rcodeOnly}, true
	}
}

// repeat asks for name n times.
func repeat(name string, n int) func(context.Context, int) (dnsmsg.Query, bool) {
	return func(_ context.Context, seq int) (dnsmsg.Query, bool) {
		return dnsmsg.Query{Name: name, Type: dns.TypeA, RcodeOnly: true}, seq < n
	}
}

// collector gathers the outcomes handed to Plan.Deliver and checks that none comes
// after Measure returned.
type collector struct {
	mu       sync.Mutex
	qs       []measure.Query
	returned bool
	late     int
}

func (c *collector) add(q measure.Query) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.returned {
		c.late++
	}
	c.qs = append(c.qs, q)
}

// measure runs req as a session of plan (c as its Deliver) on p and returns the result
// and the outcomes by seq.
func (c *collector) measure(t *testing.T, p measure.Protocol, req *measure.Request, plan drive.Plan) (*measure.Result, []measure.Query) {
	t.Helper()
	plan.Deliver = c.add
	m, err := drive.Measurer(p, nil, plan)
	if err != nil {
		t.Fatal(err)
	}
	res := m.Measure(context.Background(), req)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.returned = true
	qs := slices.Clone(c.qs)
	slices.SortFunc(qs, func(a, b measure.Query) int { return a.Seq - b.Seq })
	return res, qs
}

// Every protocol hands each query's outcome to Deliver, once, before Measure returns,
// and keeps none in Result.Queries; with one stream and with several.
func TestDeliversEveryOutcome(t *testing.T) {
	const total = 9
	s := measuretest.Start(t, measuretest.Config{Host: "127.0.0.5"})
	for _, p := range measure.Protocols {
		for _, streams := range []int{1, 3} {
			t.Run(string(p)+"/"+string(rune('0'+streams)), func(t *testing.T) {
				req := s.Request(p)
				req.Mode, req.Variant, req.Timeout = measure.ModePersistent, measure.VariantPOST, 10*time.Second
				var c collector
				res, qs := c.measure(t, p, req, drive.Plan{Streams: streams, Next: repeat("a.example", total)})
				if res.Status != measure.StatusOK || len(res.Queries) != 0 || len(qs) != total || c.late != 0 {
					t.Fatalf("status %s (%v), %d kept, %d delivered (%d late)", res.Status, res.Err, len(res.Queries), len(qs), c.late)
				}
				for i, q := range qs {
					if q.Seq != i || q.Status != measure.StatusOK || q.Resolve <= 0 {
						t.Errorf("query %d: %+v", i, q)
					}
				}
			})
		}
	}
}

// Delivered failures set the exchange's status: the lowest-seq failure (DoUDP: an
// answer for another question after an answer; with several streams a third query,
// cut at the pipeline's buffer, fails too).
func TestStatusIsFirstFailure(t *testing.T) {
	srv := measuretest.UDPAnswerer(t)
	for _, streams := range []int{1, 3} {
		req := &measure.Request{Addr: srv.LocalAddr().(*net.UDPAddr).AddrPort(), Timeout: 10 * time.Second,
			Mode: measure.ModePersistent}
		if streams == 1 {
			req.Timeout = 300 * time.Millisecond // a query on its own is bounded by the exchange
		}
		var c collector
		res, qs := c.measure(t, measure.DoUDP, req, drive.Plan{Streams: streams, QueryTimeout: 300 * time.Millisecond,
			Next: names(true, "ok.example", "wrong.example", "big.example")})
		want := []measure.Status{measure.StatusOK, measure.StatusBadResponse, measure.StatusBadResponse}
		if streams == 1 {
			want = want[:2] // the first failure ends a one-stream session
		}
		if len(qs) != len(want) {
			t.Fatalf("streams %d: %d delivered (%s %v)", streams, len(qs), res.Status, res.Err)
		}
		for i, q := range qs {
			if q.Seq != i || q.Status != want[i] {
				t.Errorf("streams %d: seq %d %s %v; want %s", streams, q.Seq, q.Status, q.Err, want[i])
			}
		}
		if res.Status != measure.StatusBadResponse || !errors.Is(res.Err, qs[1].Err) {
			t.Errorf("streams %d: exchange %s %v; want query 1's %v", streams, res.Status, res.Err, qs[1].Err)
		}
	}
}

// With RcodeOnly every protocol (one query, and three outstanding on a persistent
// session) reports the answer's status and rcode without unpacking it, and a server
// that answers garbage is still a bad response.
func TestRcodeOnly(t *testing.T) {
	s := measuretest.Start(t, measuretest.Config{Host: "127.0.0.2"})
	bad := measuretest.Start(t, measuretest.Config{Host: "127.0.0.2", Behavior: hostile.Garbage})
	for _, p := range measure.Protocols {
		t.Run(string(p), func(t *testing.T) {
			for _, streams := range []int{1, 3} {
				req := s.Request(p)
				n := 1
				if streams > 1 {
					req.Mode, n = measure.ModePersistent, 6
				}
				var c collector
				res, qs := c.measure(t, p, req, drive.Plan{Streams: streams, Next: repeat("test.com", n)})
				if res.Status != measure.StatusOK || len(qs) != n {
					t.Fatalf("streams %d: status %s (%v), %d queries", streams, res.Status, res.Err, len(qs))
				}
				for _, q := range qs {
					if q.Status != measure.StatusOK || q.Rcode != 0 || q.Resolve <= 0 || len(q.Answers) != 0 || q.KeepaliveTimeout != -1 {
						t.Fatalf("streams %d: query %+v", streams, q)
					}
				}
			}
			req := bad.Request(p)
			req.Timeout = 500 * time.Millisecond
			var c collector
			res, qs := c.measure(t, p, req, drive.Plan{Next: repeat("test.com", 1)})
			if res.Status != measure.StatusBadResponse && (len(qs) == 0 || qs[0].Status != measure.StatusBadResponse) {
				t.Fatalf("garbage: status %s (%v), %d queries", res.Status, res.Err, len(qs))
			}
		})
	}
}

// A load's QUIC sessions record no qlog and still answer and time their handshake;
// the measurement's (measure.For) record one.
func TestNoQlog(t *testing.T) {
	s := measuretest.Start(t, measuretest.Config{Host: "127.0.0.5"})
	for _, p := range []measure.Protocol{measure.DoQ, measure.DoH3} {
		for _, load := range []bool{false, true} {
			req := s.Request(p)
			req.Variant = measure.VariantPOST
			var res *measure.Result
			if load {
				var c collector
				res, _ = c.measure(t, p, req, drive.Plan{Next: repeat("a.example", 1)})
			} else {
				m, _ := measure.For(p)
				res = m.Measure(context.Background(), req)
			}
			if res.Status != measure.StatusOK || !res.HasHandshake || res.Handshake <= 0 {
				t.Fatalf("%s load=%v: %s %v handshake %v", p, load, res.Status, res.Err, res.Handshake)
			}
			if got := len(res.Qlog) > 0 && res.QlogAnalysis != nil; got == load {
				t.Errorf("%s load=%v: qlog of %d bytes, analysis %v", p, load, len(res.Qlog), res.QlogAnalysis != nil)
			}
		}
	}
}

// With several queries outstanding on one DoUDP socket, a datagram with another ID is
// skipped, and an answer cut at the receive buffer or for another question is a bad
// response once the query's time runs out; with and without RcodeOnly.
func TestUDPPipelineHostile(t *testing.T) {
	srv := measuretest.UDPAnswerer(t)
	ns := []string{"ok.example", "big.example", "wrong.example"}
	for _, rcodeOnly := range []bool{false, true} {
		req := &measure.Request{Addr: srv.LocalAddr().(*net.UDPAddr).AddrPort(), Timeout: 10 * time.Second, Mode: measure.ModePersistent}
		var c collector
		res, qs := c.measure(t, measure.DoUDP, req, drive.Plan{Streams: 3, QueryTimeout: 300 * time.Millisecond, Next: names(rcodeOnly, ns...)})
		if len(qs) != 3 {
			t.Fatalf("rcodeOnly %v: %d outcomes (%s %v)", rcodeOnly, len(qs), res.Status, res.Err)
		}
		want := []measure.Status{measure.StatusOK, measure.StatusBadResponse, measure.StatusBadResponse}
		for i, q := range qs {
			if q.Seq != i || q.Status != want[i] {
				t.Errorf("rcodeOnly %v, %s: seq %d %s %v; want %s", rcodeOnly, ns[i], q.Seq, q.Status, q.Err, want[i])
			}
		}
		if q := qs[0]; q.Resolve <= 0 || q.Resolve > 300*time.Millisecond {
			t.Errorf("resolve %v", q.Resolve)
		}
	}
}

// With Streams = N a load's persistent session keeps N queries outstanding on every
// protocol (DoUDP on its own pipeline): the servers hold every answer until N queries
// wait, so each protocol completes only if its N queries really are in flight together;
// Next is called in seq order.
func TestStreamsOutstandingAtOnce(t *testing.T) {
	const n, total = 3, 9
	s := measuretest.Start(t, measuretest.Config{Host: "127.0.0.5", Hold: n})
	for _, p := range measure.Protocols {
		for _, burst := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/burst=%v", p, burst), func(t *testing.T) {
				req := s.Request(p)
				req.Mode, req.Variant, req.Timeout = measure.ModePersistent, measure.VariantPOST, 10*time.Second
				var seqs []int
				next := func(_ context.Context, seq int) (dnsmsg.Query, bool) {
					seqs = append(seqs, seq) // one goroutine calls Next
					return dnsmsg.Query{Name: "a.example", Type: dns.TypeA}, seq < total
				}
				var c collector
				res, qs := c.measure(t, p, req, drive.Plan{Streams: n, Burst: burst, Next: next})
				if res.Status != measure.StatusOK || len(qs) != total {
					t.Fatalf("status %s (%v), %d queries", res.Status, res.Err, len(qs))
				}
				for i, q := range qs {
					if q.Seq != i || q.Status != measure.StatusOK || q.Resolve <= 0 || len(q.Answers) != 1 {
						t.Errorf("query %d: %+v", i, q)
					}
				}
				for i, sq := range seqs {
					if sq != i {
						t.Fatalf("Next called with %v", seqs)
					}
				}
			})
		}
	}
}

// allocsPerQuery runs DoUDP sessions of a few and of many queries with streams
// outstanding (1: one after another), as dnsbench's max load does, and returns the heap
// allocations per additional query (the whole process: the echo server allocates
// nothing per query).
func allocsPerQuery(t *testing.T, streams int) float64 {
	srv, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 7)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	testsupport.ServeUDP(srv, testsupport.ReflectQuery)
	answered := 0
	session := func(n int) uint64 {
		req := &measure.Request{Addr: srv.LocalAddr().(*net.UDPAddr).AddrPort(), Timeout: time.Minute, Mode: measure.ModePersistent}
		m, err := drive.Measurer(measure.DoUDP, nil, drive.Plan{Streams: streams, Burst: true, Next: repeat("a.example", n),
			Deliver: func(q measure.Query) {
				if q.Status == measure.StatusOK {
					answered++ // one goroutine (the session's, or the pipeline's receiver) delivers
				}
			}})
		if err != nil {
			t.Fatal(err)
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

// A DoUDP session of a load allocates (almost) nothing per query, one query at a time
// (kstamp's pooled read state) or pipelined (reused pending queries, messages and
// batch syscalls), and keeps no outcome. The bound leaves room for the runtime's own
// occasional allocations (timers, map growth).
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
