package e2e_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"testing"

	"github.com/miekg/dns"
	"github.com/quic-go/quic-go"

	"github.com/doqscan/doqscan/internal/benchpool"
	"github.com/doqscan/doqscan/internal/dnsmsg"
	"github.com/doqscan/doqscan/internal/doq"
	"github.com/doqscan/doqscan/internal/testbed"
	"github.com/doqscan/doqscan/internal/testbed/population"
	"github.com/doqscan/doqscan/internal/testsupport"
	"github.com/doqscan/doqscan/internal/verify"
)

// testbedBenchTargets returns the population's QUIC endpoints a verifier must verify
// (verdict doq-verified), third-party peers left out (one slow process each: they would
// measure aioquic, not the verifier).
func testbedBenchTargets(b *testing.B) []netip.AddrPort {
	b.Helper()
	v := testbed.Require(b)
	if v.Population == nil {
		b.Fatal("the testbed runs without a population file")
	}
	var out []netip.AddrPort
	for _, e := range v.Population.QUICEndpoints() {
		if v.Population.Lookup(e.Addr).Peer != "" {
			continue
		}
		if v.Population.ExpectVerify(e.Addr, e.Port).Class == population.OutcomeDoQVerified {
			out = append(out, netip.AddrPortFrom(e.Addr, e.Port))
		}
	}
	if len(out) == 0 {
		b.Fatal("no verifiable endpoint in the population")
	}
	return out
}

// bareTestbed is the ceiling on the testbed: quic-go's DialAddr offering every DoQ ALPN
// and QUIC v1 and v2 (as the verifier does), the handshake, optionally one DoQ query
// framed for the negotiated ALPN, then a close. No classification, no certificate
// work, no SNI logic.
func bareTestbed(a netip.AddrPort, query []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), verify.DefaultHandshakeTimeout+verify.DefaultQueryTimeout)
	defer cancel()
	hctx, hcancel := context.WithTimeout(ctx, verify.DefaultHandshakeTimeout)
	defer hcancel()
	c, err := quic.DialAddr(hctx, a.String(), &tls.Config{InsecureSkipVerify: true, NextProtos: doq.ALPNs()},
		&quic.Config{Versions: []quic.Version{quic.Version1, quic.Version2}})
	if err != nil {
		return err
	}
	defer c.CloseWithError(0, "")
	if query == nil {
		return nil
	}
	f, err := doq.FramingFor(c.ConnectionState().TLS.NegotiatedProtocol)
	if err != nil {
		return err
	}
	s, err := c.OpenStreamSync(ctx)
	if err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok {
		_ = s.SetDeadline(d)
	}
	w, err := doq.Frame(f, query)
	if err != nil {
		return err
	}
	if _, err := s.Write(w); err != nil {
		return err
	}
	_ = s.Close()
	msg, err := doq.ReadMessage(s, f, verify.MaxReply)
	if err != nil {
		return err
	}
	if len(msg) < 12 {
		return errors.New("short reply")
	}
	return nil
}

// BenchmarkTestbedThroughput prints verification throughput on the simulated internet
// (targets: the population's verifiable QUIC endpoints, 5-300 ms paths through the delay
// line, servers in their own processes) at rising concurrency, next to a bare quic-go
// handshake loop and a bare handshake+query loop against the same endpoints in the same
// run. verify does what the bare+query loop does (one more round trip than a handshake)
// plus classification and certificate work, so "ratio q" is the like-for-like figure.
//
//	go test ./internal/verify/e2e -run XXX -bench TestbedThroughput -benchtime 1x   # as root
func BenchmarkTestbedThroughput(b *testing.B) {
	targets := testbedBenchTargets(b)
	v, err := verify.New(verify.Config{})
	if err != nil {
		b.Fatal(err)
	}
	query, err := dnsmsg.Build(dnsmsg.Query{Name: dnsmsg.DefaultQueryName, Type: dns.TypeA, ID: 0})
	if err != nil {
		b.Fatal(err)
	}
	n := benchpool.EnvInt("DOQSCAN_BENCH_TARGETS", len(targets))
	fmt.Printf("\ntestbed: verification throughput vs bare quic-go (%d targets per level from %d endpoints, GOMAXPROCS=%d)\n",
		n, len(targets), runtime.GOMAXPROCS(0))
	fmt.Printf("%-12s %12s %12s %12s %8s %8s %9s %9s %9s %12s %12s %10s\n", "concurrency", "verify t/s", "bare hs t/s",
		"bare hs+q", "ratio", "ratio q", "verified", "bare ok", "bare q ok", "verify cpu", "bare q cpu", "cpu ratio")
	for i := 0; i < b.N; i++ {
		// Beyond 256 the 2-core machine (servers, delay line and client together) collapses:
		// every handshake misses 2 s (measured: 512 -> 1 of 1,940 verified, bare 23).
		for li, conc := range []int{16, 32, 64, 128, 256} {
			fs := []func() benchpool.Result{
				func() benchpool.Result {
					return benchpool.Run(n, conc, func(k int) bool {
						return v.Verify(context.Background(), verify.Target{Addr: targets[k%len(targets)]}).Outcome == verify.OutcomeVerified
					})
				},
				func() benchpool.Result {
					return benchpool.Run(n, conc, func(k int) bool { return bareTestbed(targets[k%len(targets)], nil) == nil })
				},
				func() benchpool.Result {
					return benchpool.Run(n, conc, func(k int) bool { return bareTestbed(targets[k%len(targets)], query) == nil })
				},
			}
			res := make([]benchpool.Result, len(fs))
			for j := range fs { // rotate the order per level: none always runs on a warmer machine
				k := (j + li) % len(fs)
				res[k] = fs[k]()
			}
			ver, bare, bareQ := res[0], res[1], res[2]
			fmt.Printf("%-12d %12.0f %12.0f %12.0f %8.2f %8.2f %9d %9d %9d %9.2f ms %9.2f ms %10.2f\n", conc, ver.Rate, bare.Rate,
				bareQ.Rate, ver.Rate/bare.Rate, ver.Rate/bareQ.Rate, ver.OK, bare.OK, bareQ.OK, ver.CPUMS, bareQ.CPUMS, bareQ.CPUMS/ver.CPUMS)
			b.ReportMetric(ver.Rate/bareQ.Rate, fmt.Sprintf("ratio-q@%d", conc))
		}
	}
}

// BenchmarkTestbedMemoryPer10k verifies 10,000 targets (the population's verifiable
// endpoints, cycled) at the default concurrency on the testbed and prints the peak Go
// heap in use and VmHWM. The servers run in other processes: the figures are the
// verifier's alone.
//
//	go test ./internal/verify/e2e -run XXX -bench TestbedMemoryPer10k -benchtime 1x   # as root
func BenchmarkTestbedMemoryPer10k(b *testing.B) {
	targets := testbedBenchTargets(b)
	v, err := verify.New(verify.Config{})
	if err != nil {
		b.Fatal(err)
	}
	const n = 10000
	for i := 0; i < b.N; i++ {
		peakHeap := benchpool.SamplePeakHeap()
		r := benchpool.Run(n, verify.DefaultConcurrency, func(k int) bool {
			return v.Verify(context.Background(), verify.Target{Addr: targets[k%len(targets)]}).Outcome == verify.OutcomeVerified
		})
		peak, base := peakHeap()
		fmt.Printf("\ntestbed: %d targets (%d endpoints cycled) at concurrency %d: %.0f targets/s, %d verified\n",
			n, len(targets), verify.DefaultConcurrency, r.Rate, r.OK)
		fmt.Printf("peak HeapInuse %.1f MiB (%.1f MiB above the idle baseline), VmHWM %s (verifier process only)\n",
			float64(peak)/(1<<20), float64(peak-min(peak, base))/(1<<20), benchpool.VmHWM())
		b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB/10k")
	}
}

// testbedPeerTargets returns the QUIC endpoints of the population's third-party peers
// that are not quic-go (aioquic, hickory-dns and lazydns on quinn, ngtcp2) and run on
// this testbed, with their library: identification handles these differently (the
// unknown-ALPN probe, the h3 handshake), so a benchmark of quic-go servers alone would
// never price it.
func testbedPeerTargets(b *testing.B) ([]netip.AddrPort, map[netip.AddrPort]string) {
	b.Helper()
	pop := testbed.Require(b).Population
	var out []netip.AddrPort
	lib := map[netip.AddrPort]string{}
	for _, e := range pop.QUICEndpoints() {
		r := pop.Lookup(e.Addr)
		l := pop.ExpectLibrary(e.Addr)
		if r.Peer == "" || l == population.LibQuicGo {
			continue
		}
		if err := testbed.PeerSilent(b, pop, r); err != nil {
			b.Logf("leaving out %s: %v", e.Addr, err)
			continue
		}
		a := netip.AddrPortFrom(e.Addr, e.Port)
		out = append(out, a)
		lib[a] = l
	}
	return out, lib
}

// BenchmarkTestbedIdentify prints verify's rate with the QUIC library identification
// (every attempt's qlog events read live, the handshake offering an unknown ALPN and the
// h3 handshake for servers it leaves undecided) against the same verifier without it.
// The targets are the population's verifiable endpoints (quic-go: simserver) with every
// DOQSCAN_BENCH_PEER_EVERY-th target (default 10; 0: none) one of the non-quic-go
// third-party peers (aioquic, quinn, ngtcp2) in turn, the servers that cost the extra
// handshakes. Per row: both rates and their ratio (goal >= 0.9), how many targets were
// identified, how many of the peer targets were labelled with their library, how many
// targets needed the unknown-ALPN probe, and the verifier's CPU per target. The two runs
// alternate order per level and repeat DOQSCAN_BENCH_ROUNDS times (default 2).
//
//	go test ./internal/verify/e2e -run XXX -bench TestbedIdentify -benchtime 1x   # as root
//	DOQSCAN_BENCH_TARGETS=300 DOQSCAN_BENCH_ROUNDS=2 go test ./internal/verify/e2e -run XXX -bench TestbedIdentify -benchtime 1x
func BenchmarkTestbedIdentify(b *testing.B) {
	simTargets := testbedBenchTargets(b)
	peerTargets, peerLib := testbedPeerTargets(b)
	every := benchpool.EnvInt("DOQSCAN_BENCH_PEER_EVERY", 10)
	if len(peerTargets) == 0 {
		b.Logf("no non-quic-go peer runs on this testbed: quic-go targets only")
		every = 0
	}
	target := func(k int) netip.AddrPort {
		if every > 0 && k%every == every-1 {
			return peerTargets[(k/every)%len(peerTargets)]
		}
		return simTargets[k%len(simTargets)]
	}
	on, err := verify.New(verify.Config{})
	if err != nil {
		b.Fatal(err)
	}
	off, err := verify.New(verify.Config{NoIdentify: true})
	if err != nil {
		b.Fatal(err)
	}
	// A peer target's verification is a success when its outcome is the population's.
	pop := testbed.Require(b).Population
	good := func(a netip.AddrPort, r verify.Result) bool {
		if _, ok := peerLib[a]; ok {
			return string(r.Outcome) == pop.ExpectVerify(a.Addr(), a.Port()).Class
		}
		return r.Outcome == verify.OutcomeVerified
	}
	n := benchpool.EnvInt("DOQSCAN_BENCH_TARGETS", len(simTargets))
	rounds := benchpool.EnvInt("DOQSCAN_BENCH_ROUNDS", 2)
	peersPerRun := 0
	for k := 0; k < n; k++ {
		if _, ok := peerLib[target(k)]; ok {
			peersPerRun++
		}
	}
	fmt.Printf("\ntestbed: verify with QUIC library identification vs without (%d targets per run: %d non-quic-go peer targets over %d peer endpoints %v, the rest simserver's; %d rounds, GOMAXPROCS=%d, load average %s)\n",
		n, peersPerRun, len(peerTargets), peerTargets, rounds, runtime.GOMAXPROCS(0), testsupport.LoadAverage())
	fmt.Printf("%-12s %6s %14s %14s %8s %12s %12s %8s %13s %12s %12s\n", "concurrency", "round", "identify t/s", "plain t/s", "ratio",
		"identified", "peers right", "probed", "as expected", "identify cpu", "plain cpu")
	for i := 0; i < b.N; i++ {
		for li, conc := range []int{16, 32, 64} {
			var sumOn, sumOff float64
			for r := 0; r < rounds; r++ {
				var mu sync.Mutex
				var identified, peersRight, probed int
				run := map[bool]func() benchpool.Result{
					true: func() benchpool.Result {
						return benchpool.Run(n, conc, func(k int) bool {
							a := target(k)
							res := on.Verify(context.Background(), verify.Target{Addr: a})
							mu.Lock()
							if st := res.Stack; st != nil {
								if st.Library != verify.LibraryUnknown {
									identified++
								}
								if l, ok := peerLib[a]; ok && st.Library == l {
									peersRight++
								}
								if st.Evidence.UnknownALPN != nil {
									probed++
								}
							}
							mu.Unlock()
							return good(a, res)
						})
					},
					false: func() benchpool.Result {
						return benchpool.Run(n, conc, func(k int) bool {
							a := target(k)
							return good(a, off.Verify(context.Background(), verify.Target{Addr: a}))
						})
					},
				}
				first := (li+r)%2 == 0
				res := map[bool]benchpool.Result{}
				res[first] = run[first]()
				res[!first] = run[!first]()
				sumOn, sumOff = sumOn+res[true].Rate, sumOff+res[false].Rate
				fmt.Printf("%-12d %6d %14.0f %14.0f %8.2f %12d %5d / %-5d %8d %6d / %-5d %9.2f ms %9.2f ms\n", conc, r+1, res[true].Rate, res[false].Rate,
					res[true].Rate/res[false].Rate, identified, peersRight, peersPerRun, probed, res[true].OK, res[false].OK, res[true].CPUMS, res[false].CPUMS)
			}
			fmt.Printf("%-12d %6s %14s %14s %8.2f   (rate ratio over the rounds; load average %s)\n", conc, "all", "", "", sumOn/sumOff, testsupport.LoadAverage())
			b.ReportMetric(sumOn/sumOff, fmt.Sprintf("ratio@%d", conc))
		}
	}
}
