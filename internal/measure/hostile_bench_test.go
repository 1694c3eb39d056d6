package measure_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/measure/measuretest"
)

// floodServerEnv makes TestFloodServerProcess serve: the benchmark runs the flood
// servers in a child process so that their memory is not counted as the clients'.
const floodServerEnv = "DOQSCAN_FLOOD_SERVER"

// TestFloodServerProcess is BenchmarkHostileMemory's server process: it starts Flood
// servers, prints their addresses as JSON and serves until its stdin closes.
func TestFloodServerProcess(t *testing.T) {
	if os.Getenv(floodServerEnv) == "" {
		t.Skip("the server process of BenchmarkHostileMemory (runs only when it starts it)")
	}
	s := measuretest.Start(t, measuretest.Config{Host: "127.0.0.7", Behavior: measuretest.Flood})
	_ = json.NewEncoder(os.Stdout).Encode(map[string]string{"doq": s.DoQ.String(), "doh3": s.DoH3.String()})
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // EOF when the benchmark ends
}

// floodBenchTimeout is long enough for every flood to pass the qlog bound at conc=64.
const floodBenchTimeout = 3 * time.Second

// procStatusKB reads a "Name:  N kB" line of /proc/self/status.
func procStatusKB(name string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, name+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// BenchmarkHostileMemory prints the memory per in-flight exchange against Flood servers
// (DoQ: a message one byte per packet; DoH3: endless unknown HTTP/3 frames) with 64
// exchanges in flight, each running to its timeout: the peak of the Go heap's live
// objects and of the process's RSS (VmHWM, reset before each wave), each above the
// level before the wave, divided by 64; beyond-qlog-KB is the heap figure less the
// qlog bound (measure.QlogLimit), the rest of an exchange's memory.
// max-took/timeout is the slowest exchange's duration over its timeout.
func BenchmarkHostileMemory(b *testing.B) {
	const conc = 64
	cmd := exec.Command(os.Args[0], "-test.run=^TestFloodServerProcess$")
	cmd.Env = append(os.Environ(), floodServerEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
	var addrs map[string]string
	if err := json.NewDecoder(stdout).Decode(&addrs); err != nil {
		b.Fatalf("server process: %v", err)
	}
	for _, p := range []measure.Protocol{measure.DoQ, measure.DoH3} {
		b.Run(fmt.Sprintf("%s/conc=%d", p, conc), func(b *testing.B) {
			m, _ := measure.For(p)
			var peakHeap, peakRSS, qlogBytes, truncated, timeouts, exchanges int64
			var maxTook time.Duration
			sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
			for i := 0; i < b.N; i++ {
				runtime.GC()
				metrics.Read(sample)
				baseHeap := int64(sample[0].Value.Uint64())
				_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) // reset VmHWM
				baseRSS := procStatusKB("VmRSS") << 10
				stop := make(chan struct{})
				sampled := make(chan int64)
				go func() {
					var peak int64
					t := time.NewTicker(5 * time.Millisecond)
					defer t.Stop()
					for {
						metrics.Read(sample)
						peak = max(peak, int64(sample[0].Value.Uint64()))
						select {
						case <-stop:
							sampled <- peak
							return
						case <-t.C:
						}
					}
				}()
				var wg sync.WaitGroup
				var mu sync.Mutex
				for j := 0; j < conc; j++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						req := &measure.Request{Addr: mustAddrPort(b, addrs[string(p)]), Timeout: floodBenchTimeout, KeyShare: measure.KeyShareX25519}
						begin := time.Now()
						res := m.Measure(context.Background(), req)
						took := time.Since(begin)
						mu.Lock()
						maxTook = max(maxTook, took)
						defer mu.Unlock()
						exchanges++
						qlogBytes += int64(len(res.Qlog))
						if res.QlogTruncated {
							truncated++
						}
						if res.Status == measure.StatusTimeout {
							timeouts++
						}
					}()
				}
				wg.Wait()
				close(stop)
				peakHeap = max(peakHeap, <-sampled-baseHeap)
				peakRSS = max(peakRSS, procStatusKB("VmHWM")<<10-baseRSS)
			}
			b.ReportMetric(float64(peakHeap)/conc/1024, "peak-heap-KB/exch")
			b.ReportMetric(float64(peakRSS)/conc/1024, "peak-rss-KB/exch")
			b.ReportMetric(float64(peakHeap/conc-measure.QlogLimit)/1024, "beyond-qlog-KB")
			b.ReportMetric(float64(qlogBytes)/float64(exchanges)/1024, "qlog-KB/exch")
			b.ReportMetric(float64(truncated)/float64(exchanges), "truncated-ratio")
			b.ReportMetric(float64(timeouts)/float64(exchanges), "timeout-ratio")
			b.ReportMetric(maxTook.Seconds()/floodBenchTimeout.Seconds(), "max-took/timeout")
		})
	}
}

func mustAddrPort(tb testing.TB, s string) netip.AddrPort {
	a, err := netip.ParseAddrPort(s)
	if err != nil {
		tb.Fatalf("server address %q: %v", s, err)
	}
	return a
}
