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
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/benchpool"
	"github.com/doqscan/doqscan/internal/hostile"
	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/measure/measuretest"
	"github.com/doqscan/doqscan/internal/testsupport"
)

// floodServerEnv makes TestFloodServerProcess serve: the benchmark runs the flood
// servers in a child process so that their memory is not counted as the clients'.
const floodServerEnv = "DOQSCAN_FLOOD_SERVER"

// TestFloodServerProcess is BenchmarkHostileMemory's server process when floodServerEnv
// is set: it starts Flood servers, prints their addresses as JSON and serves until its
// stdin closes. Otherwise it checks that process as the benchmark uses it: it starts,
// names an address for each flooded protocol, and exits cleanly once stdin closes.
func TestFloodServerProcess(t *testing.T) {
	if os.Getenv(floodServerEnv) != "" {
		s := measuretest.Start(t, measuretest.Config{Host: "127.0.0.7", Behavior: hostile.Flood})
		_ = json.NewEncoder(os.Stdout).Encode(map[string]string{"doq": s.DoQ.String(), "doh3": s.DoH3.String()})
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // EOF when the benchmark ends
		return
	}
	addrs, stop := startFloodServer(t)
	for _, p := range []measure.Protocol{measure.DoQ, measure.DoH3} {
		if a, err := netip.ParseAddrPort(addrs[string(p)]); err != nil || !a.Addr().IsLoopback() {
			t.Errorf("%s: address %q (%v), want a loopback address and port", p, addrs[string(p)], err)
		}
	}
	if err := stop(); err != nil {
		t.Errorf("the server process did not exit cleanly when its stdin closed: %v", err)
	}
}

// startFloodServer starts the flood server process (TestFloodServerProcess with
// floodServerEnv set) and returns its addresses by protocol and a stop function that
// closes its stdin and waits for it.
func startFloodServer(tb testing.TB) (map[string]string, func() error) {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestFloodServerProcess$")
	cmd.Env = append(os.Environ(), floodServerEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	var once sync.Once
	var waitErr error
	stop := func() error {
		once.Do(func() { stdin.Close(); waitErr = cmd.Wait() })
		return waitErr
	}
	tb.Cleanup(func() { _ = stop() })
	var addrs map[string]string
	if err := json.NewDecoder(stdout).Decode(&addrs); err != nil {
		tb.Fatalf("server process: %v", err)
	}
	return addrs, stop
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
// DOQSCAN_BENCH_CONCURRENCY sets the exchanges in flight (default 64; "64,256,512"
// runs each).
//
//	DOQSCAN_BENCH_CONCURRENCY=64,256,512 go test -run '^$' -bench HostileMemory -benchtime 2x ./internal/measure/
func BenchmarkHostileMemory(b *testing.B) {
	addrs, _ := startFloodServer(b)
	for _, conc := range testsupport.EnvInts(b, "DOQSCAN_BENCH_CONCURRENCY", 64) {
		for _, p := range []measure.Protocol{measure.DoQ, measure.DoH3} {
			hostileMemory(b, p, conc, addrs)
		}
	}
}

// hostileMemory is one cell of BenchmarkHostileMemory: conc exchanges of p in flight.
func hostileMemory(b *testing.B, p measure.Protocol, conc int, addrs map[string]string) {
	b.Run(fmt.Sprintf("%s/conc=%d", p, conc), func(b *testing.B) {
		m, _ := measure.For(p)
		var peakHeap, peakRSS, qlogBytes, truncated, timeouts, exchanges int64
		var maxTook time.Duration
		var phases exchangePhases
		var lastWave string
		phaseOf := map[*measure.Result]finishPhase{}
		restore := measure.SetFinishPhases(func(res *measure.Result, began time.Time, closing, qlogWait, analysis time.Duration) {
			phaseMu.Lock()
			phaseOf[res] = finishPhase{began, closing, qlogWait, analysis}
			phaseMu.Unlock()
		})
		defer restore()
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
			schedBefore := schedLatencies()
			cpuBefore, wallBefore := benchpool.CPUTime(), time.Now()
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
					phaseMu.Lock()
					ph := phaseOf[res]
					delete(phaseOf, res)
					phaseMu.Unlock()
					mu.Lock()
					maxTook = max(maxTook, took)
					phases.add(begin.Add(req.Timeout), ph, took)
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
			cpu := benchpool.CPUTime() - cpuBefore
			wall := time.Since(wallBefore)
			lastWave = fmt.Sprintf("last wave: process CPU %v over %v wall (%.0f%% of %d cores); Go scheduling latency %s",
				cpu.Round(time.Millisecond), wall.Round(time.Millisecond), 100*cpu.Seconds()/wall.Seconds()/float64(runtime.GOMAXPROCS(0)),
				runtime.GOMAXPROCS(0), schedLatencies().since(schedBefore))
			close(stop)
			peakHeap = max(peakHeap, <-sampled-baseHeap)
			peakRSS = max(peakRSS, procStatusKB("VmHWM")<<10-baseRSS)
		}
		b.ReportMetric(float64(peakHeap)/float64(conc)/1024, "peak-heap-KB/exch")
		b.ReportMetric(float64(peakRSS)/float64(conc)/1024, "peak-rss-KB/exch")
		b.ReportMetric(float64(peakHeap/int64(conc)-measure.QlogLimit)/1024, "beyond-qlog-KB")
		b.ReportMetric(float64(qlogBytes)/float64(exchanges)/1024, "qlog-KB/exch")
		b.ReportMetric(float64(truncated)/float64(exchanges), "truncated-ratio")
		b.ReportMetric(float64(timeouts)/float64(exchanges), "timeout-ratio")
		b.ReportMetric(maxTook.Seconds()/floodBenchTimeout.Seconds(), "max-took/timeout")
		fmt.Printf("%s N=%d %s\n", b.Name(), b.N, lastWave)
		phases.print(b.Name())
	})
}

// schedHist is the runtime's histogram of how long goroutines waited runnable.
type schedHist struct {
	counts  []uint64
	buckets []float64
}

func schedLatencies() schedHist {
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(s)
	h := s[0].Value.Float64Histogram()
	return schedHist{counts: slices.Clone(h.Counts), buckets: h.Buckets}
}

// since prints p50/p99/max of the waits after before (bucket upper bounds).
func (h schedHist) since(before schedHist) string {
	d := make([]uint64, len(h.counts))
	var n uint64
	for i := range d {
		d[i] = h.counts[i] - before.counts[i]
		n += d[i]
	}
	q := func(f float64) time.Duration {
		var c uint64
		for i, v := range d {
			c += v
			if float64(c) >= f*float64(n) {
				return time.Duration(h.buckets[i+1] * 1e9)
			}
		}
		return 0
	}
	maxAt := 0
	for i, v := range d {
		if v > 0 {
			maxAt = i
		}
	}
	return fmt.Sprintf("p50 < %v, p99 < %v, max < %v (n=%d)", q(0.5), q(0.99), time.Duration(h.buckets[maxAt+1]*1e9), n)
}

// phaseMu guards the finish hook's map (the hook is global to the package under test).
var phaseMu sync.Mutex

// finishPhase is what measure's finish hook reports of one QUIC exchange.
type finishPhase struct {
	began                       time.Time
	closing, qlogWait, analysis time.Duration
}

// exchangePhases splits each exchange's time: from its deadline to the start of closing
// (negative: it began before the deadline), closing the connection, waiting for the qlog
// writer, analysing the qlog, and from the end of that to Measure's return; and the
// whole, past the deadline.
type exchangePhases struct {
	toClose, closing, qlogWait, analysis, rest, overrun []time.Duration
}

func (e *exchangePhases) add(deadline time.Time, p finishPhase, took time.Duration) {
	if p.began.IsZero() {
		return
	}
	end := deadline.Add(took - floodBenchTimeout) // Measure's return
	e.toClose = append(e.toClose, p.began.Sub(deadline))
	e.closing = append(e.closing, p.closing)
	e.qlogWait = append(e.qlogWait, p.qlogWait)
	e.analysis = append(e.analysis, p.analysis)
	e.rest = append(e.rest, end.Sub(p.began.Add(p.closing+p.qlogWait+p.analysis)))
	e.overrun = append(e.overrun, end.Sub(deadline))
}

// print prints p50/p95/max of every phase (to stdout: a benchmark's log is cut at 10 lines).
func (e *exchangePhases) print(name string) {
	for _, ph := range []struct {
		name string
		d    []time.Duration
	}{
		{"deadline->close", e.toClose}, {"close", e.closing}, {"qlog wait", e.qlogWait},
		{"qlog analysis", e.analysis}, {"rest", e.rest}, {"deadline->return", e.overrun},
	} {
		if len(ph.d) == 0 {
			continue
		}
		slices.Sort(ph.d)
		q := func(f float64) time.Duration { return ph.d[min(int(f*float64(len(ph.d))), len(ph.d)-1)] }
		fmt.Printf("%s %-17s p50 %9v  p95 %9v  max %9v  (n=%d)\n", name, ph.name,
			q(0.5).Round(time.Millisecond/10), q(0.95).Round(time.Millisecond/10), ph.d[len(ph.d)-1].Round(time.Millisecond/10), len(ph.d))
	}
}

func mustAddrPort(tb testing.TB, s string) netip.AddrPort {
	a, err := netip.ParseAddrPort(s)
	if err != nil {
		tb.Fatalf("server address %q: %v", s, err)
	}
	return a
}
