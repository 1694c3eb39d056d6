package verify

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
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
	perLevel := envInt("DOQSCAN_BENCH_TARGETS", 2000)
	fmt.Printf("\nverification throughput vs bare quic-go handshakes (%d targets per level, %d servers, GOMAXPROCS=%d)\n",
		perLevel, nServers, runtime.GOMAXPROCS(0))
	fmt.Printf("%-12s %14s %14s %8s %10s %10s %12s %12s %10s\n", "concurrency", "verify (t/s)", "bare hs (t/s)", "ratio",
		"verified", "bare ok", "verify cpu", "bare cpu", "cpu ratio")
	for i := 0; i < b.N; i++ {
		for li, conc := range []int{8, 32, 128, 256} {
			bareF := func() poolResult {
				return runPool(perLevel, conc, func(k int) bool { return bareHandshake(addrs[k%nServers]) == nil })
			}
			verF := func() poolResult {
				return runPool(perLevel, conc, func(k int) bool {
					return v.Verify(context.Background(), Target{Addr: addrs[k%nServers]}).Outcome == OutcomeVerified
				})
			}
			// Alternate which goes first per level, so neither always runs on a warmer
			// (or busier) machine.
			var bare, ver poolResult
			if li%2 == 0 {
				bare, ver = bareF(), verF()
			} else {
				ver, bare = verF(), bareF()
			}
			// cpu ratio = bare CPU per target / verify CPU per target: the throughput ratio a
			// CPU-bound machine would reach, and a figure the machine's load does not skew.
			fmt.Printf("%-12d %14.0f %14.0f %8.2f %10d %10d %9.2f ms %9.2f ms %10.2f\n", conc, ver.rate, bare.rate,
				ver.rate/bare.rate, ver.ok, bare.ok, ver.cpuMS, bare.cpuMS, bare.cpuMS/ver.cpuMS)
			b.ReportMetric(ver.rate/bare.rate, fmt.Sprintf("ratio@%d", conc))
			if ver.ok != perLevel || bare.ok != perLevel {
				// Not a failure of the code: on a loaded machine handshakes pass the 2 s
				// timeout. The counts are printed so the figures can be judged.
				b.Logf("concurrency %d: %d/%d verified, %d/%d bare handshakes (overloaded machine?)", conc, ver.ok, perLevel, bare.ok, perLevel)
			}
		}
	}
}

type poolResult struct {
	rate  float64
	ok    int
	cpuMS float64 // process CPU (user+sys, clients and servers) per target, ms
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func runPool(n, conc int, f func(int) bool) poolResult {
	var next, ok atomic.Int64
	var wg sync.WaitGroup
	t0, c0 := time.Now(), cpuTime()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k := int(next.Add(1)) - 1
				if k >= n {
					return
				}
				if f(k) {
					ok.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return poolResult{rate: float64(n) / time.Since(t0).Seconds(), ok: int(ok.Load()),
		cpuMS: float64(cpuTime()-c0) / float64(time.Millisecond) / float64(n)}
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
		peakHeap := samplePeakHeap()
		r := runPool(n, DefaultConcurrency, func(k int) bool {
			return v.Verify(context.Background(), Target{Addr: addrs[k%len(addrs)]}).Outcome == OutcomeVerified
		})
		peak, base := peakHeap()
		fmt.Printf("\n%d targets at concurrency %d: %.0f targets/s, %d verified\n", n, DefaultConcurrency, r.rate, r.ok)
		fmt.Printf("peak HeapInuse %.1f MiB (%.1f MiB above the idle baseline), VmHWM %s (whole process incl. servers)\n",
			float64(peak)/(1<<20), float64(peak-min(peak, base))/(1<<20), vmHWM())
		b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB/10k")
	}
}

func vmHWM() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "n/a"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmHWM:") {
			return strings.TrimSpace(strings.TrimPrefix(l, "VmHWM:"))
		}
	}
	return "n/a"
}

func envInt(k string, d int) int {
	if n, err := strconv.Atoi(os.Getenv(k)); err == nil && n > 0 {
		return n
	}
	return d
}

// samplePeakHeap collects garbage, takes the idle HeapInuse as the baseline and samples
// HeapInuse every 100 ms until the returned function is called, which returns the peak
// and the baseline.
func samplePeakHeap() func() (peak, base uint64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var peak atomic.Uint64
	stop, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		tk := time.NewTicker(100 * time.Millisecond)
		defer tk.Stop()
		var ms runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
				runtime.ReadMemStats(&ms)
				if ms.HeapInuse > peak.Load() {
					peak.Store(ms.HeapInuse)
				}
			}
		}
	}()
	return func() (uint64, uint64) {
		close(stop)
		<-sampled
		runtime.ReadMemStats(&ms) // one last sample: a run shorter than a tick has one
		return max(peak.Load(), ms.HeapInuse), base
	}
}
