// Package benchpool holds what the benchmarks share to drive a function from a fixed
// pool of goroutines and print throughput, CPU and memory figures: Run, CPUTime,
// SamplePeakHeap, VmHWM and EnvInt.
package benchpool

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Result is one Run: calls per second, the calls that returned true, and the process's
// CPU (user+sys, whatever else runs in the process included) per call in ms.
type Result struct {
	Rate  float64
	OK    int
	CPUMS float64
}

// CPUTime is the process's user+system CPU time so far (0 if unknown).
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Run calls f(0) .. f(n-1) from conc goroutines and returns the figures.
func Run(n, conc int, f func(int) bool) Result {
	var next, ok atomic.Int64
	var wg sync.WaitGroup
	t0, c0 := time.Now(), CPUTime()
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
	return Result{Rate: float64(n) / time.Since(t0).Seconds(), OK: int(ok.Load()),
		CPUMS: float64(CPUTime()-c0) / float64(time.Millisecond) / float64(n)}
}

// VmHWM is the process's peak resident set size as /proc/self/status prints it, or "n/a".
func VmHWM() string {
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

// EnvInt is the positive integer in $k, else d.
func EnvInt(k string, d int) int {
	if n, err := strconv.Atoi(os.Getenv(k)); err == nil && n > 0 {
		return n
	}
	return d
}

// SamplePeakHeap collects garbage, takes the idle HeapInuse as the baseline and samples
// HeapInuse every 100 ms until the returned function is called, which returns the peak
// and the baseline.
func SamplePeakHeap() func() (peak, base uint64) {
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
