package e2e_test

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/testbed"
	"github.com/doqscan/doqscan/internal/testbed/wirecap"
)

// Wire ground truth for the timing benchmarks: packet captures (tcpdump, package
// wirecap) on both links of the router, the vantage's (ForVantage) and the internet's
// (ForInternet), say when each packet a measurement timed crossed them. Every duration
// then splits into three parts that add up to the error against the emulated path:
//
//	client = measured − wire(vantage link)   what the measuring side adds: its own error
//	server = the server's turns in the span  its processing, at the internet's link
//	                                          (wirecap.Index.Turns; a Retry handshake has two)
//	line   = wire − server − emulated − the client's own turns in the middle of the span
//	         (acknowledging, answering a Retry: real handshake time, but neither the
//	         path's nor an error)            the delay line and the forwarding path
//
// error = measured − emulated = client + server + line + the client's turns.

// wireSpans holds the results to check and their targets until the capture stops.
type wireSpans struct {
	mu    sync.Mutex
	items []wireItem
}

type wireItem struct {
	remote netip.AddrPort
	res    *measure.Result
	// wantHS, wantRes: the emulated durations (0: not predicted).
	wantHS, wantRes time.Duration
}

func (w *wireSpans) add(remote netip.AddrPort, res *measure.Result, wantHS, wantRes time.Duration) {
	w.mu.Lock()
	w.items = append(w.items, wireItem{remote, res, wantHS, wantRes})
	w.mu.Unlock()
}

// wireFigures are the per-duration figures of a set of results (see above).
type wireFigures struct {
	hsClient, hsServer, hsLine    []time.Duration
	resClient, resServer, resLine []time.Duration
	unmatched                     int // durations the captures could not place
	byProto                       map[measure.Protocol]*wireFigures
}

// of returns the figures of protocol p (created on first use).
func (f *wireFigures) of(p measure.Protocol) *wireFigures {
	if f.byProto == nil {
		f.byProto = map[measure.Protocol]*wireFigures{}
	}
	if f.byProto[p] == nil {
		f.byProto[p] = &wireFigures{}
	}
	return f.byProto[p]
}

// captures are the two links' indexes.
type captures struct{ vant, inet *wirecap.Index }

// span is one timed interval on the wire: its length at the vantage's link, the
// server's turns in it (at the internet's link) and the client's (at the vantage's).
type span struct{ wire, server, client time.Duration }

func (a span) plus(b span) span {
	return span{a.wire + b.wire, a.server + b.server, a.client + b.client}
}

// exchange places the client's from..to on both links: from the client's first payload
// packet to the server's packet that ended it (wirecap.Index.Exchange), and the same two
// packets at the server's link, where the server's turns between them are taken.
func (c captures) exchange(local, remote netip.AddrPort, proto uint8, from, to time.Time) (span, bool) {
	s, e, ok := c.vant.Exchange(local, remote, proto, from, to)
	if !ok {
		return span{}, false
	}
	return c.span(local, remote, proto, s, e)
}

// span is the wire span s..e (at the vantage's link) of the flow between local and
// remote, with the server's and the client's turns in it.
func (c captures) span(local, remote netip.AddrPort, proto uint8, s, e time.Time) (span, bool) {
	si, ok1 := c.vant.Across(c.inet, local, remote, proto, s)
	ei, ok2 := c.vant.Across(c.inet, remote, local, proto, e)
	if !ok1 || !ok2 {
		return span{}, false
	}
	srv, _ := c.inet.Turns(local, remote, proto, si, ei)
	_, cli := c.vant.Turns(local, remote, proto, s, e)
	return span{e.Sub(s), srv, cli}, true
}

// handshake is the handshake's span, composed as the measurer composes it (TCP: SYN to
// SYN-ACK; TLS: ClientHello to the server's last flight; QUIC: first Initial to the
// datagram that ended the server's handshake flight, told from the packet types on the
// wire, wirecap.Index.QUICHandshake, not from the stamp the client reported).
func (w *wireSpans) handshake(c captures, it wireItem) (span, bool) {
	res, local := it.res, it.res.Local
	var d span
	if res.TCPHandshake > 0 {
		vh, ok := c.vant.Handshake(local, it.remote, res.StartedAt)
		if !ok {
			return span{}, false
		}
		ih, ok := c.inet.Handshake(local, it.remote, vh.SYN)
		if !ok {
			return span{}, false
		}
		d = d.plus(span{vh.Duration(), ih.Reply.Sub(ih.LastSYN), 0})
	}
	if res.Protocol == measure.DoQ || res.Protocol == measure.DoH3 {
		s, e, ok := c.vant.QUICHandshake(local, it.remote, res.CryptoFrom)
		if !ok {
			return span{}, false
		}
		return c.span(local, it.remote, wirecap.ProtoUDP, s, e)
	}
	if !res.CryptoFrom.IsZero() {
		x, ok := c.exchange(local, it.remote, wirecap.ProtoTCP, res.CryptoFrom, res.CryptoTo)
		if !ok {
			return span{}, false
		}
		d = d.plus(x)
	}
	return d, true
}

// resolve is query q's span.
func (w *wireSpans) resolve(c captures, it wireItem, q measure.Query) (span, bool) {
	proto := uint8(wirecap.ProtoTCP)
	switch it.res.Protocol {
	case measure.DoUDP, measure.DoQ, measure.DoH3:
		proto = wirecap.ProtoUDP
	}
	return c.exchange(it.res.Local, it.remote, proto, q.StartedAt, q.StartedAt.Add(q.Resolve))
}

// figures matches every successful result against the captures.
func (w *wireSpans) figures(c captures) wireFigures {
	w.mu.Lock()
	defer w.mu.Unlock()
	var f wireFigures
	for _, it := range w.items {
		if it.res.Status != measure.StatusOK {
			continue
		}
		pf := f.of(it.res.Protocol)
		if it.res.HasHandshake && (it.res.TCPHandshake > 0 || !it.res.CryptoFrom.IsZero()) {
			if d, ok := w.handshake(c, it); ok {
				for _, g := range []*wireFigures{&f, pf} {
					g.hsClient = append(g.hsClient, it.res.Handshake-d.wire)
					g.hsServer = append(g.hsServer, d.server)
					if it.wantHS > 0 {
						g.hsLine = append(g.hsLine, d.wire-d.server-d.client-it.wantHS)
					}
				}
			} else {
				f.unmatched++
			}
		}
		for _, q := range it.res.Queries {
			if q.Status != measure.StatusOK {
				continue
			}
			d, ok := w.resolve(c, it, q)
			if !ok {
				f.unmatched++
				continue
			}
			for _, g := range []*wireFigures{&f, pf} {
				g.resClient = append(g.resClient, q.Resolve-d.wire)
				g.resServer = append(g.resServer, d.server)
				if it.wantRes > 0 {
					g.resLine = append(g.resLine, d.wire-d.server-d.client-it.wantRes)
				}
			}
		}
	}
	return f
}

// startWire starts the captures on both links; stop returns their indexes (failing the
// benchmark if a capture lost packets: the truth would have holes).
func startWire(b testing.TB, v *testbed.Vantage) (stop func() captures) {
	b.Helper()
	ctx := context.Background()
	vc, err := wirecap.ForVantage(ctx, v.Instance, v.Index)
	if err != nil {
		b.Fatalf("packet capture: %v", err)
	}
	ic, err := wirecap.ForInternet(ctx, v.Instance)
	if err != nil {
		_, _, _ = vc.Stop()
		b.Fatalf("packet capture: %v", err)
	}
	return func() captures {
		var out captures
		for _, x := range []struct {
			c  *wirecap.Capture
			ix **wirecap.Index
		}{{vc, &out.vant}, {ic, &out.inet}} {
			pkts, st, err := x.c.Stop()
			if err != nil {
				b.Fatalf("packet capture: %v", err)
			}
			if st.Dropped() > 0 || !st.Flushed {
				b.Fatalf("packet capture: %d of %d packets dropped (flushed: %v)", st.Dropped(), st.Captured, st.Flushed)
			}
			*x.ix = wirecap.NewIndex(pkts)
		}
		return out
	}
}

// reportWire adds the client/server split to a benchmark's metrics; perProto adds the
// client error's p95 per protocol.
func reportWire(b *testing.B, f wireFigures, perProto bool) {
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	for _, d := range []struct {
		what                 string
		client, server, line []time.Duration
	}{{"hs", f.hsClient, f.hsServer, f.hsLine}, {"res", f.resClient, f.resServer, f.resLine}} {
		if len(d.client) > 0 {
			b.ReportMetric(us(pct(d.client, 0.5)), d.what+"-p50-client-µs")
			b.ReportMetric(us(pct(d.client, 0.95)), d.what+"-p95-client-µs")
		}
		if len(d.server) > 0 {
			b.ReportMetric(us(pct(d.server, 0.95)), d.what+"-p95-server-µs")
		}
		if len(d.line) > 0 {
			b.ReportMetric(us(pct(d.line, 0.95)), d.what+"-p95-line-µs")
		}
	}
	b.ReportMetric(float64(f.unmatched), "unmatched")
	if !perProto {
		return
	}
	for p, pf := range f.byProto {
		if len(pf.hsClient) > 0 {
			b.ReportMetric(us(pct(pf.hsClient, 0.95)), string(p)+"-hs-p95-client-µs")
		}
		if len(pf.resClient) > 0 {
			b.ReportMetric(us(pct(pf.resClient, 0.95)), string(p)+"-res-p95-client-µs")
		}
	}
}

// clientErrorBounds: the measuring side's error (measured − wire) of one duration. Its
// start is stamped before the send syscall and its end is the kernel's receive stamp of
// a packet that crossed the router's link a few µs earlier, so it is never negative
// beyond clock-read granularity (a negative error is a stamp on the wrong packet or a
// span composed wrongly); the upper bound is loose because a loaded CI machine may
// preempt the client between its stamp and the syscall (the benchmarks print the real
// distribution: p95 22-87 µs); the median of each protocol's durations must meet the
// issue's goal (1 ms) outright.
const (
	minClientError       = -20 * time.Microsecond
	maxClientError       = 5 * time.Millisecond
	maxMedianClientError = time.Millisecond
)

// TestStampsAgreeWithTheWire measures a few endpoints of every protocol (DoH3 too)
// under packet captures on both router links and checks every handshake and resolve
// against the wire: each is placed on the captures (the stamps name the right client
// address and packets, the handshake is composed as the wire shows it) and the
// measuring side's error is within clientErrorBounds.
func TestStampsAgreeWithTheWire(t *testing.T) {
	v, pop := testbed.RequirePopulation(t)
	const perProtocol = 5
	wire := &wireSpans{}
	stop := startWire(t, v)
	n := 0
	for _, p := range measure.Protocols {
		eps := benchEndpoints(pop, p)
		if len(eps) == 0 {
			t.Fatalf("the population has no well-behaved %s endpoint on a lossless path", p)
		}
		m, _ := measure.For(p)
		for _, ep := range eps[:min(perProtocol, len(eps))] {
			req := measure.Request{Addr: netip.AddrPortFrom(ep.addr, ep.port), ServerName: ep.sni,
				KeyShare: measure.KeyShareX25519, Peer: measure.NewPeer(), Timeout: 5 * time.Second}
			if ep.alpn != "" {
				req.ALPN = []string{ep.alpn}
			}
			res := m.Measure(context.Background(), &req)
			if res.Status != measure.StatusOK {
				t.Errorf("%s %v: %s: %v", p, req.Addr, res.Status, res.Err)
				continue
			}
			wire.add(req.Addr, res, 0, 0)
			n++
		}
	}
	f := wire.figures(stop())
	if f.unmatched > 0 {
		t.Errorf("%d durations could not be placed on the captures", f.unmatched)
	}
	for _, p := range measure.Protocols {
		pf := f.byProto[p]
		if pf == nil {
			t.Errorf("%s: no duration placed", p)
			continue
		}
		for _, d := range []struct {
			what string
			errs []time.Duration
		}{{"handshake", pf.hsClient}, {"resolve", pf.resClient}} {
			if len(d.errs) == 0 {
				continue
			}
			lo, hi := d.errs[0], d.errs[0]
			for _, e := range d.errs {
				lo, hi = min(lo, e), max(hi, e)
			}
			med := pct(d.errs, 0.5)
			t.Logf("%-6s %-9s client error (measured - wire) %d durations: %v .. %v, median %v", p, d.what, len(d.errs), lo, hi, med)
			if lo < minClientError || hi > maxClientError || med > maxMedianClientError {
				t.Errorf("%s %s: client error %v .. %v (median %v), want within [%v, %v] (median <= %v)",
					p, d.what, lo, hi, med, minClientError, maxClientError, maxMedianClientError)
			}
		}
		if p != measure.DoUDP && len(pf.hsClient) == 0 {
			t.Errorf("%s: no handshake placed", p)
		}
	}
	if len(f.byProto) != len(measure.Protocols) {
		t.Errorf("figures for %d of %d protocols (%d exchanges measured)", len(f.byProto), len(measure.Protocols), n)
	}
}
