package udploop_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/doqscan/doqscan/internal/dnsbench/drive"
	"github.com/doqscan/doqscan/internal/dnsbench/udploop"
	"github.com/doqscan/doqscan/internal/dnsmsg"
	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/measure/measuretest"
	"github.com/doqscan/doqscan/internal/testsupport"
)

// hostileTimeout is the per-exchange timeout against hostile servers (as measure's
// hostile tests take it).
const hostileTimeout = 800 * time.Millisecond

// tooLate says whether an exchange with a short timeout took as long as the default
// timeout: it ended on some other deadline than its own.
func tooLate(took time.Duration) bool { return took >= measure.DefaultTimeout }

// serveLoopbackUDP serves answer on a UDP socket of 127.0.0.7.
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

func newLoop(t *testing.T) *udploop.Loop {
	t.Helper()
	l, err := udploop.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Error(err)
		}
	})
	return l
}

// names is a Plan.Next of the given names, one per query.
func names(ns ...string) func(context.Context, int) (dnsmsg.Query, bool) {
	return namesOf(false, ns...)
}

// namesOf is names with RcodeOnly as given.
func namesOf(rcodeOnly bool, ns ...string) func(context.Context, int) (dnsmsg.Query, bool) {
	return func(_ context.Context, seq int) (dnsmsg.Query, bool) {
		if seq >= len(ns) {
			return dnsmsg.Query{}, false
		}
		return dnsmsg.Query{Name: ns[seq], Type: dns.TypeA, RcodeOnly: rcodeOnly}, true
	}
}

// collect runs req as a session of next's queries on l (nil: measure's DoUDP client,
// through drive.Measurer) and returns its result with the outcomes delivered in
// Result.Queries, by seq.
func collect(t *testing.T, l *udploop.Loop, ctx context.Context, req *measure.Request,
	next func(context.Context, int) (dnsmsg.Query, bool)) *measure.Result {
	t.Helper()
	var mu sync.Mutex
	var qs []measure.Query
	plan := drive.Plan{Next: next, Deliver: func(q measure.Query) { mu.Lock(); qs = append(qs, q); mu.Unlock() }}
	var res *measure.Result
	if l != nil {
		res = l.Measure(ctx, req, plan)
	} else {
		m, err := drive.Measurer(measure.DoUDP, nil, plan)
		if err != nil {
			t.Fatal(err)
		}
		res = m.Measure(ctx, req)
	}
	mu.Lock()
	defer mu.Unlock()
	slices.SortFunc(qs, func(a, b measure.Query) int { return a.Seq - b.Seq })
	res.Queries = qs
	return res
}

// sameOutcomes fails unless a session on the loop and one on its own goroutine
// (measure's DoUDP client) ended alike: the same status and error presence, and query by query the
// same status, rcode, answers and keepalive; an answered query has a resolve time.
func sameOutcomes(t *testing.T, what string, plain, looped *measure.Result) {
	t.Helper()
	if plain.Status != looped.Status || (plain.Err == nil) != (looped.Err == nil) {
		t.Errorf("%s: loop %s (%v), own goroutine %s (%v)", what, looped.Status, looped.Err, plain.Status, plain.Err)
	}
	if len(plain.Queries) != len(looped.Queries) {
		t.Fatalf("%s: loop %d queries, own goroutine %d", what, len(looped.Queries), len(plain.Queries))
	}
	for i, p := range plain.Queries {
		l := looped.Queries[i]
		if l.Seq != p.Seq || l.Status != p.Status || l.Rcode != p.Rcode || fmt.Sprint(l.Answers) != fmt.Sprint(p.Answers) ||
			l.KeepaliveTimeout != p.KeepaliveTimeout {
			t.Errorf("%s, query %d: loop %+v, own goroutine %+v", what, i, l, p)
		}
		if l.Status == measure.StatusOK && (l.Resolve <= 0 || l.StartedAt.IsZero()) {
			t.Errorf("%s, query %d: resolve %v from %v", what, i, l.Resolve, l.StartedAt)
		}
	}
	if !looped.Local.IsValid() || looped.Local == plain.Local {
		t.Errorf("%s: local address %v (own goroutine's %v): not a socket of its own", what, looped.Local, plain.Local)
	}
}

// A DoUDP session on the loop ends as one on its caller's goroutine does, against a
// server that answers, each hostile server, a closed port, and datagrams that are not
// the answer.
func TestUDPLoopClassifiesAsUdpExchange(t *testing.T) {
	loop := newLoop(t)
	// both measures with and without the loop; the looped session ends on its own
	// timeout (not on another deadline, tooLate: the wall clock is no test here).
	both := func(t *testing.T, what string, mk func() (*measure.Request, func(context.Context, int) (dnsmsg.Query, bool))) *measure.Result {
		t.Helper()
		req, next := mk()
		plain := collect(t, nil, context.Background(), req, next)
		req, next = mk()
		begin := time.Now()
		looped := collect(t, loop, context.Background(), req, next)
		if took := time.Since(begin); tooLate(took) {
			t.Errorf("%s: the loop took %v with a timeout of %v: it ended on another deadline", what, took, req.Timeout)
		}
		sameOutcomes(t, what, plain, looped)
		return looped
	}

	s := measuretest.Start(t, measuretest.Config{Host: "127.0.0.4"})
	for _, rcodeOnly := range []bool{false, true} {
		res := both(t, fmt.Sprintf("answers, rcodeOnly %v", rcodeOnly), func() (*measure.Request, func(context.Context, int) (dnsmsg.Query, bool)) {
			return &measure.Request{Addr: s.UDP, Timeout: 3 * time.Second, Mode: measure.ModePersistent},
				namesOf(rcodeOnly, "a.example", "b.example", "c.example")
		})
		if res.Status != measure.StatusOK || len(res.Queries) != 3 {
			t.Errorf("answers: %s %v, %d queries", res.Status, res.Err, len(res.Queries))
		}
	}

	for _, b := range measuretest.Behaviors {
		h := measuretest.Start(t, measuretest.Config{Host: "127.0.0.4", Behavior: b})
		res := both(t, string(b), func() (*measure.Request, func(context.Context, int) (dnsmsg.Query, bool)) {
			return &measure.Request{Addr: h.UDP, Timeout: hostileTimeout, Mode: measure.ModePersistent}, names("a.example", "b.example")
		})
		if res.Status == measure.StatusOK {
			t.Errorf("%s: ok", b)
		}
	}

	res := both(t, "closed port", func() (*measure.Request, func(context.Context, int) (dnsmsg.Query, bool)) {
		return &measure.Request{Addr: measuretest.UnusedPort(t, "udp", "127.0.0.5"), Timeout: time.Second}, names("a.example")
	})
	if res.Status != measure.StatusConnRefused {
		t.Errorf("closed port: %s %v", res.Status, res.Err)
	}

	// ok.example: a datagram of another ID, then the answer; wrong.example: an answer to
	// another question only; big.example: an answer padded past 4,096 bytes.
	srv := measuretest.UDPAnswerer(t)
	for _, name := range []string{"ok.example", "wrong.example", "big.example"} {
		both(t, name, func() (*measure.Request, func(context.Context, int) (dnsmsg.Query, bool)) {
			return &measure.Request{Addr: srv.LocalAddr().(*net.UDPAddr).AddrPort(), Timeout: 300 * time.Millisecond,
				Mode: measure.ModePersistent}, names(name, name)
		})
	}
}

// Many sessions share the loop at once, each with its outcomes delivered through
// Plan.Deliver as they end; a session whose context is cancelled ends its query outstanding
// then, as a timeout; a session started after Close fails.
func TestUDPLoopManySessions(t *testing.T) {
	l, err := udploop.New()
	if err != nil {
		t.Fatal(err)
	}
	s := measuretest.Start(t, measuretest.Config{Host: "127.0.0.4"})
	const sessions, queries = 64, 50
	var answered atomic.Int64
	var wg sync.WaitGroup
	for range sessions {
		wg.Go(func() {
			req := &measure.Request{Addr: s.UDP, Timeout: 10 * time.Second, Mode: measure.ModePersistent}
			plan := drive.Plan{
				Next: func(_ context.Context, seq int) (dnsmsg.Query, bool) {
					return dnsmsg.Query{Name: "a.example", Type: dns.TypeA, RcodeOnly: true}, seq < queries
				},
				Deliver: func(q measure.Query) {
					if q.Status == measure.StatusOK && q.Rcode == dns.RcodeSuccess {
						answered.Add(1)
					}
				}}
			if res := l.Measure(context.Background(), req, plan); res.Status != measure.StatusOK || len(res.Queries) != 0 {
				t.Errorf("session: %s %v, %d queries kept", res.Status, res.Err, len(res.Queries))
			}
		})
	}
	wg.Wait()
	if n := answered.Load(); n != sessions*queries {
		t.Errorf("%d answers, want %d", n, sessions*queries)
	}

	// The server cancels the context when the second query reaches it, and leaves that
	// query unanswered.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := serveLoopbackUDP(t, func(c *net.UDPConn, msg []byte, from netip.AddrPort) {
		q := new(dns.Msg)
		if q.Unpack(msg) != nil || len(q.Question) != 1 {
			return
		}
		if q.Question[0].Name == "silent.example." {
			cancel()
			return
		}
		a := new(dns.Msg)
		a.SetReply(q)
		b, _ := a.Pack()
		_, _ = c.WriteToUDPAddrPort(b, from)
	})
	req := &measure.Request{Addr: srv.LocalAddr().(*net.UDPAddr).AddrPort(), Timeout: 30 * time.Second, Mode: measure.ModePersistent}
	begin := time.Now()
	res := collect(t, l, ctx, req, names("ok.example", "silent.example", "never.example"))
	if len(res.Queries) != 2 || res.Queries[0].Status != measure.StatusOK || res.Queries[1].Status != measure.StatusTimeout ||
		!errors.Is(res.Err, context.DeadlineExceeded) || time.Since(begin) > 10*time.Second {
		t.Errorf("cancelled: %s %v, queries %+v, after %v", res.Status, res.Err, res.Queries, time.Since(begin))
	}

	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	res = collect(t, l, context.Background(), &measure.Request{Addr: s.UDP, Timeout: time.Second}, names("a.example"))
	if res.Status == measure.StatusOK || res.Err == nil {
		t.Errorf("after Close: %s %v", res.Status, res.Err)
	}
}

// The loop gathers its sends until an eighth of its sessions were answered, but no
// longer than a bound: one session whose server answers goes through all its queries
// while the 15 others' queries stay unanswered (each waits out its own timeout only
// after the first one's end).
func TestUDPLoopSendsWithFewAnswered(t *testing.T) {
	l := newLoop(t)
	srv := serveLoopbackUDP(t, func(c *net.UDPConn, msg []byte, from netip.AddrPort) {
		q := new(dns.Msg)
		if q.Unpack(msg) != nil || len(q.Question) != 1 || q.Question[0].Name != "talk.example." {
			return
		}
		a := new(dns.Msg)
		a.SetReply(q)
		b, _ := a.Pack()
		_, _ = c.WriteToUDPAddrPort(b, from)
	})
	addr := srv.LocalAddr().(*net.UDPAddr).AddrPort()
	ctx, cancel := context.WithCancel(context.Background())
	var quietEnded atomic.Int64
	var wg sync.WaitGroup
	for range 15 {
		wg.Go(func() {
			res := collect(t, l, ctx, &measure.Request{Addr: addr, Timeout: time.Minute, Mode: measure.ModePersistent},
				names("quiet.example"))
			quietEnded.Add(1)
			if len(res.Queries) != 1 || res.Queries[0].Status != measure.StatusTimeout {
				t.Errorf("quiet session: %s %v, queries %+v", res.Status, res.Err, res.Queries)
			}
		})
	}
	const queries = 200
	res := collect(t, l, context.Background(), &measure.Request{Addr: addr, Timeout: time.Minute, Mode: measure.ModePersistent},
		func(_ context.Context, seq int) (dnsmsg.Query, bool) {
			return dnsmsg.Query{Name: "talk.example", Type: dns.TypeA}, seq < queries
		})
	ended := quietEnded.Load()
	cancel()
	wg.Wait()
	if res.Status != measure.StatusOK || len(res.Queries) != queries {
		t.Errorf("answered session: %s %v, %d queries", res.Status, res.Err, len(res.Queries))
	}
	if ended != 0 {
		t.Errorf("%d quiet sessions ended before the answered one: its queries waited for theirs", ended)
	}
}
