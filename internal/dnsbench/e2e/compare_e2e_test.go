package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/dnsbench"
	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/testbed"
	"github.com/doqscan/doqscan/internal/testbed/wirecap"
)

// wireLatency is the ground truth of a DoUDP run from a capture at the vantage's link:
// per client socket (flow), the queries to server and the answers from it.
type wireLatency struct {
	Mean     time.Duration   // (Σ answer stamps − Σ query stamps) / n over complete flows: exact whatever the pairing
	Each     []time.Duration // per query, pairing each flow's queries and answers in order (for percentiles)
	N        int             // queries of the complete flows
	Partial  int             // flows with fewer answers than queries (losses or timeouts): left out
	Queries  int             // every query captured
	Answered int             // every answer captured
}

// udpWire computes the wire latency of every exchange with server over UDP in pkts.
func udpWire(pkts []wirecap.Packet, server netip.AddrPort) wireLatency {
	type flow struct{ q, a []time.Time }
	flows := map[netip.AddrPort]*flow{}
	get := func(k netip.AddrPort) *flow {
		f := flows[k]
		if f == nil {
			f = &flow{}
			flows[k] = f
		}
		return f
	}
	var w wireLatency
	for _, p := range pkts {
		switch {
		case p.Proto != wirecap.ProtoUDP:
		case p.Dst == server:
			get(p.Src).q = append(get(p.Src).q, p.At)
			w.Queries++
		case p.Src == server:
			get(p.Dst).a = append(get(p.Dst).a, p.At)
			w.Answered++
		}
	}
	var sum time.Duration
	for _, f := range flows {
		if len(f.q) != len(f.a) || len(f.q) == 0 {
			w.Partial++
			continue
		}
		slices.SortFunc(f.q, func(a, b time.Time) int { return a.Compare(b) })
		slices.SortFunc(f.a, func(a, b time.Time) int { return a.Compare(b) })
		for i := range f.q {
			d := f.a[i].Sub(f.q[i])
			sum += d
			w.Each = append(w.Each, d)
		}
		w.N += len(f.q)
	}
	if w.N > 0 {
		w.Mean = sum / time.Duration(w.N)
	}
	slices.Sort(w.Each)
	return w
}

// pct is the p-quantile (0..1) of sorted durations, in ms (nearest rank).
func pct(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	i = max(0, min(i, len(sorted)-1))
	return msOf(sorted[i])
}

func msOf(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// TestUDPWire: the wire figures of a hand-made capture (two flows, one with a lost
// answer, and a packet of another server).
func TestUDPWire(t *testing.T) {
	srv := netip.MustParseAddrPort("198.19.3.7:53")
	a := netip.MustParseAddrPort("198.18.0.2:40000")
	c := netip.MustParseAddrPort("198.18.0.2:40001")
	other := netip.MustParseAddrPort("198.19.3.8:53")
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	pkts := []wirecap.Packet{
		{At: at(0), Src: a, Dst: srv, Proto: wirecap.ProtoUDP},
		{At: at(5), Src: a, Dst: srv, Proto: wirecap.ProtoUDP},
		{At: at(20), Src: srv, Dst: a, Proto: wirecap.ProtoUDP},
		{At: at(27), Src: srv, Dst: a, Proto: wirecap.ProtoUDP},
		{At: at(1), Src: c, Dst: srv, Proto: wirecap.ProtoUDP}, // lost answer
		{At: at(2), Src: a, Dst: other, Proto: wirecap.ProtoUDP},
		{At: at(3), Src: a, Dst: srv, Proto: wirecap.ProtoTCP},
	}
	w := udpWire(pkts, srv)
	if w.N != 2 || w.Partial != 1 || w.Queries != 3 || w.Answered != 2 {
		t.Fatalf("got %+v", w)
	}
	if w.Mean != 21*time.Millisecond || pct(w.Each, 0.5) != 20 || pct(w.Each, 0.99) != 22 {
		t.Fatalf("mean %v, p50 %v, p99 %v; want 21ms, 20, 22", w.Mean, pct(w.Each, 0.5), pct(w.Each, 0.99))
	}
}

// dnsperf -v prints one line per answer: "> RCODE NAME TYPE SECONDS".
var (
	dnsperfAnswer = regexp.MustCompile(`^> \S+ \S+ \S+ ([0-9]+\.[0-9]+)$`)
	dnsperfQPS    = regexp.MustCompile(`Queries per second:\s+([0-9.]+)`)
	dnsperfDone   = regexp.MustCompile(`Queries completed:\s+([0-9]+)`)
	dnsperfMean   = regexp.MustCompile(`(?m)^\s+Average Latency \(s\):\s+([0-9.]+)`)
)

// toolLatency is what a tool reported for its run (ms).
type toolLatency struct {
	Mean, P50, P99 float64
	N              int64
	QPS            float64
}

// errorRow is one tool's reported latency minus the wire's (ms).
func errorRow(b *testing.B, name string, r toolLatency, w wireLatency) (meanErr float64) {
	meanErr = r.Mean - msOf(w.Mean)
	b.Logf("%s: reported mean %.3f p50 %.3f p99 %.3f ms over %d answers (%.1f q/s); wire mean %.3f p50 %.3f p99 %.3f ms over %d (captured %d queries, %d answers, %d partial flows); error mean %+.3f p50 %+.3f p99 %+.3f ms",
		name, r.Mean, r.P50, r.P99, r.N, r.QPS, msOf(w.Mean), pct(w.Each, 0.5), pct(w.Each, 0.99), w.N,
		w.Queries, w.Answered, w.Partial, meanErr, r.P50-pct(w.Each, 0.5), r.P99-pct(w.Each, 0.99))
	return meanErr
}

// BenchmarkLatencyError: the client-side latency error of dnsperf and dnsbench. Inside
// the vantage namespace, both send DoUDP queries to AdGuard dnsproxy (a 20 ms path
// through the delay line) at the same fixed rate, well below saturation, with the same
// outstanding limit, while a packet capture runs on the router side of the vantage's
// link (wirecap.ForVantage). The truth is the capture's latency of the same run: per
// client socket, answer stamps minus query stamps (the mean is exact whatever the
// pairing; percentiles pair in order). Each tool's error is its reported latency minus
// that (mean, p50, p99). dnsperf runs twice: plainly (its summary has only the mean)
// and with -v (every answer's latency, for the percentiles). The ratio is |dnsbench's
// mean error| / |plain dnsperf's| (goal <= 1 at dnsbench QPS >= dnsperf's).
func BenchmarkLatencyError(b *testing.B) {
	v := testbed.Require(b)
	if v.Population == nil {
		b.Skip("SKIP: the testbed runs without a population file")
	}
	if _, err := exec.LookPath("dnsperf"); err != nil {
		b.Skip("SKIP: dnsperf not installed (apt-get install dnsperf, or ./dev install)")
	}
	addr := peerAddr(b, v.Population, "dnsproxy")
	server := netip.AddrPortFrom(addr, 53)
	qf := filepath.Join(b.TempDir(), "q.txt")
	if err := os.WriteFile(qf, []byte("a.example A\nb.example AAAA\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	const (
		rate    = 200 // q/s, both tools
		secs    = 5
		clients = 16 // sockets / workers, and the outstanding limit
		timeout = 2 * time.Second
	)
	capture := func(ctx context.Context, run func()) wireLatency {
		c, err := wirecap.ForVantage(ctx, v.Instance, v.Index)
		if err != nil {
			b.Fatalf("packet capture: %v", err)
		}
		run()
		pkts, st, err := c.Stop()
		if err != nil {
			b.Fatalf("packet capture: %v", err)
		}
		if st.Dropped() > 0 || !st.Flushed {
			b.Fatalf("packet capture: %d of %d packets dropped (flushed: %v): the truth would have holes", st.Dropped(), st.Captured, st.Flushed)
		}
		return udpWire(pkts, server)
	}
	// dnsperf's run: without -v its summary's mean only; with -v every answer's latency
	// too (printing them is work its receiving thread does between answers).
	dnsperf := func(ctx context.Context, verbose bool) (toolLatency, wireLatency) {
		args := []string{"-m", "udp", "-s", addr.String(), "-p", "53",
			"-d", qf, "-l", strconv.Itoa(secs), "-Q", strconv.Itoa(rate), "-c", strconv.Itoa(clients),
			"-q", strconv.Itoa(clients), "-t", strconv.Itoa(int(timeout / time.Second))}
		if verbose {
			args = append(args, "-v")
		}
		var out []byte
		var err error
		w := capture(ctx, func() { out, err = exec.CommandContext(ctx, "dnsperf", args...).Output() })
		if err != nil {
			b.Fatalf("dnsperf: %v (context: %v)\n%s", err, ctx.Err(), out)
		}
		qm, mm, dm := dnsperfQPS.FindSubmatch(out), dnsperfMean.FindSubmatch(out), dnsperfDone.FindSubmatch(out)
		if qm == nil || mm == nil || dm == nil {
			b.Fatalf("dnsperf printed no QPS, mean latency or completed count:\n%s", out)
		}
		done, _ := strconv.ParseInt(string(dm[1]), 10, 64)
		qps, _ := strconv.ParseFloat(string(qm[1]), 64)
		mean, _ := strconv.ParseFloat(string(mm[1]), 64)
		r := toolLatency{Mean: mean * 1000, P50: math.NaN(), P99: math.NaN(), QPS: qps, N: done}
		if !verbose {
			return r, w
		}
		var each []time.Duration
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			if m := dnsperfAnswer.FindStringSubmatch(sc.Text()); m != nil {
				s, _ := strconv.ParseFloat(m[1], 64)
				each = append(each, time.Duration(math.Round(s*1e9)))
			}
		}
		if len(each) == 0 {
			b.Fatalf("dnsperf -v printed no answers:\n%s", out)
		}
		slices.Sort(each)
		r.P50, r.P99 = pct(each, 0.5), pct(each, 0.99)
		return r, w
	}
	for range b.N {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		p, pw := dnsperf(ctx, false)
		pv, pvw := dnsperf(ctx, true)

		tg, err := dnsbench.ParseTarget("doudp://" + addr.String())
		if err != nil {
			b.Fatal(err)
		}
		var rs []*dnsbench.Report
		dw := capture(ctx, func() {
			rs, err = dnsbench.Run(ctx, dnsbench.Config{Targets: []dnsbench.Target{tg}, Workers: clients,
				Rate: rate, Duration: secs * time.Second, Timeout: timeout,
				Queries: []dnsbench.Question{{Name: "a.example", QType: 1}, {Name: "b.example", QType: 28}}}, nil, nil)
		})
		if err != nil {
			cancel()
			b.Fatal(err)
		}
		// The same outstanding limit on two sockets, queries pipelined (--streams): the
		// batched path (sendmmsg/recvmmsg, one kernel stamp per datagram).
		var srs []*dnsbench.Report
		sw := capture(ctx, func() {
			srs, err = dnsbench.Run(ctx, dnsbench.Config{Targets: []dnsbench.Target{tg}, Workers: 2, Streams: clients / 2,
				Policy: measure.ModePersistent, SessionQueries: 1 << 30,
				Rate: rate, Duration: secs * time.Second, Timeout: timeout,
				Queries: []dnsbench.Question{{Name: "a.example", QType: 1}, {Name: "b.example", QType: 28}}}, nil, nil)
		})
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		r := rs[0]
		d := toolLatency{Mean: r.Latency.Mean, P50: r.Latency.P50, P99: r.Latency.P99, N: r.Answered, QPS: r.QPS}
		sr := srs[0]
		sd := toolLatency{Mean: sr.Latency.Mean, P50: sr.Latency.P50, P99: sr.Latency.P99, N: sr.Answered, QPS: sr.QPS}
		if pw.N == 0 || pvw.N == 0 || dw.N == 0 || sw.N == 0 {
			b.Fatalf("a capture holds no complete exchange (dnsperf %d, dnsperf -v %d, dnsbench %d, dnsbench --streams %d)", pw.N, pvw.N, dw.N, sw.N)
		}
		pe := errorRow(b, fmt.Sprintf("dnsperf -Q %d", rate), p, pw)
		pve := errorRow(b, fmt.Sprintf("dnsperf -Q %d -v", rate), pv, pvw)
		de := errorRow(b, fmt.Sprintf("dnsbench --rate %d", rate), d, dw)
		se := errorRow(b, fmt.Sprintf("dnsbench --rate %d --workers 2 --streams %d", rate, clients/2), sd, sw)
		b.Logf("mean latency error: dnsbench %+.3f ms (streams %+.3f ms), dnsperf %+.3f ms (with -v %+.3f ms); |dnsbench| / |dnsperf| = %.2f (streams %.2f)",
			de, se, pe, pve, math.Abs(de)/math.Abs(pe), math.Abs(se)/math.Abs(pe))
		b.ReportMetric(se*1000, "dnsbench-streams-err-us")
		b.ReportMetric(de*1000, "dnsbench-err-us")
		b.ReportMetric(pe*1000, "dnsperf-err-us")
		b.ReportMetric(math.Abs(de)/math.Abs(pe), "err-ratio")
	}
}
