package verify

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/netip"
	"runtime"
	"testing"

	"github.com/quic-go/quic-go"

	"github.com/doqscan/doqscan/internal/benchpool"
)

// BenchmarkThroughput prints verification throughput (targets/s) at rising
// concurrency next to a bare quic-go handshake loop (dial, handshake, close: the
// ceiling of any QUIC verifier) against the same in-process servers in the same run,
// and their ratio (goal >= 0.9). Servers and clients share the machine's cores, so the
// figures are CPU-bound loopback figures, not network figures.
//
//	go test ./internal/verify -run XXX -bench Throughput -benchtime 1x
func BenchmarkThroughput(b *testing.B) {
	pki := newPKI(b)
	const nServers = 16
	var addrs []netip.AddrPort
	for range nServers {
		addrs = append(addrs, startServer(b, pki, behaviour{name: "rfc9250"}).addr)
	}
	v, err := New(Config{Roots: pki.pool, QueryName: "bench.doq.test"})
	if err != nil {
		b.Fatal(err)
	}
	perLevel := benchpool.EnvInt("DOQSCAN_BENCH_TARGETS", 2000)
	fmt.Printf("\nverification throughput vs bare quic-go handshakes (%d targets per level, %d servers, GOMAXPROCS=%d)\n",
		perLevel, nServers, runtime.GOMAXPROCS(0))
	fmt.Printf("%-12s %14s %14s %8s %10s %10s %12s %12s %10s\n", "concurrency", "verify (t/s)", "bare hs (t/s)", "ratio",
		"verified", "bare ok", "verify cpu", "bare cpu", "cpu ratio")
	for i := 0; i < b.N; i++ {
		for li, conc := range []int{8, 32, 128, 256} {
			bareF := func() benchpool.Result {
				return benchpool.Run(perLevel, conc, func(k int) bool { return bareHandshake(addrs[k%nServers]) == nil })
			}
			verF := func() benchpool.Result {
				return benchpool.Run(perLevel, conc, func(k int) bool {
					return v.Verify(context.Background(), Target{Addr: addrs[k%nServers]}).Outcome == OutcomeVerified
				})
			}
			// Alternate which goes first per level, so neither always runs on a warmer
			// (or busier) machine.
			var bare, ver benchpool.Result
			if li%2 == 0 {
				bare, ver = bareF(), verF()
			} else {
				ver, bare = verF(), bareF()
			}
			// cpu ratio = bare CPU per target / verify CPU per target: the throughput ratio a
			// CPU-bound machine would reach, and a figure the machine's load does not skew.
			fmt.Printf("%-12d %14.0f %14.0f %8.2f %10d %10d %9.2f ms %9.2f ms %10.2f\n", conc, ver.Rate, bare.Rate,
				ver.Rate/bare.Rate, ver.OK, bare.OK, ver.CPUMS, bare.CPUMS, bare.CPUMS/ver.CPUMS)
			b.ReportMetric(ver.Rate/bare.Rate, fmt.Sprintf("ratio@%d", conc))
			if ver.OK != perLevel || bare.OK != perLevel {
				// Not a failure of the code: on a loaded machine handshakes pass the 2 s
				// timeout. The counts are printed so the figures can be judged.
				b.Logf("concurrency %d: %d/%d verified, %d/%d bare handshakes (overloaded machine?)", conc, ver.OK, perLevel, bare.OK, perLevel)
			}
		}
	}
}

// bareHandshake is the ceiling: quic-go's own DialAddr with the same ALPN list, the
// handshake, and a close. No DNS, no classification, no certificate work.
func bareHandshake(a netip.AddrPort) error {
	ctx, cancel := context.WithTimeout(context.Background(), DefaultHandshakeTimeout)
	defer cancel()
	c, err := quic.DialAddr(ctx, a.String(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"doq"}}, &quic.Config{})
	if err != nil {
		return err
	}
	return c.CloseWithError(0, "")
}

// BenchmarkMemoryPer10k verifies 10,000 targets at the default concurrency and prints
// the peak Go heap in use (sampled) and the process's VmHWM. The servers run in the
// same process, so both figures include them: an upper bound for the verifier.
//
//	go test ./internal/verify -run XXX -bench MemoryPer10k -benchtime 1x
func BenchmarkMemoryPer10k(b *testing.B) {
	pki := newPKI(b)
	var addrs []netip.AddrPort
	for range 16 {
		addrs = append(addrs, startServer(b, pki, behaviour{name: "rfc9250"}).addr)
	}
	v, err := New(Config{Roots: pki.pool})
	if err != nil {
		b.Fatal(err)
	}
	const n = 10000
	for i := 0; i < b.N; i++ {
		peakHeap := benchpool.SamplePeakHeap()
		r := benchpool.Run(n, DefaultConcurrency, func(k int) bool {
			return v.Verify(context.Background(), Target{Addr: addrs[k%len(addrs)]}).Outcome == OutcomeVerified
		})
		peak, base := peakHeap()
		fmt.Printf("\n%d targets at concurrency %d: %.0f targets/s, %d verified\n", n, DefaultConcurrency, r.Rate, r.OK)
		fmt.Printf("peak HeapInuse %.1f MiB (%.1f MiB above the idle baseline), VmHWM %s (whole process incl. servers)\n",
			float64(peak)/(1<<20), float64(peak-min(peak, base))/(1<<20), benchpool.VmHWM())
		b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB/10k")
	}
}
