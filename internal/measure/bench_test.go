package measure_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/measure/measuretest"
)

// benchDelay is the known delay the benchmark servers add: DNS servers wait this long
// before answering (resolve = delay + loopback), QUIC servers delay every datagram they
// send (handshake and resolve = one delay each). The timing error is measured minus it.
const benchDelay = 10 * time.Millisecond

func percentile(v []time.Duration, p float64) time.Duration {
	if len(v) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), v...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(p * float64(len(s)-1))
	return s[i]
}

// BenchmarkTimingError prints the resolve-time error (measured minus the servers' known
// delay) at concurrency 1 and at full concurrency, per protocol; DoQ also its handshake
// error (the server's flight is delayed by benchDelay, so a 1-RTT handshake takes it).
func BenchmarkTimingError(b *testing.B) {
	// Two server sets: the DNS servers sleep before answering; the QUIC servers delay
	// their datagrams instead (a sleep there would add to the datagram delay).
	dns := measuretest.Start(b, measuretest.Config{Host: "127.0.0.30", Delay: benchDelay})
	quic := measuretest.Start(b, measuretest.Config{Host: "127.0.0.31", QUICDelay: benchDelay})
	for _, p := range []measure.Protocol{measure.DoUDP, measure.DoTCP, measure.DoT, measure.DoH, measure.DoQ, measure.DoH3} {
		s := dns
		if p == measure.DoQ || p == measure.DoH3 {
			s = quic
		}
		for _, conc := range []int{1, 8, 64} {
			b.Run(fmt.Sprintf("%s/conc=%d", p, conc), func(b *testing.B) {
				m, _ := measure.For(p)
				var mu sync.Mutex
				var resolveErr, hsErr []time.Duration
				failed := 0
				sem := make(chan struct{}, conc)
				var wg sync.WaitGroup
				n := max(b.N, conc)
				b.ResetTimer()
				for i := 0; i < n; i++ {
					sem <- struct{}{}
					wg.Add(1)
					go func() {
						defer func() { <-sem; wg.Done() }()
						req := s.Request(p)
						res := m.Measure(context.Background(), req)
						mu.Lock()
						defer mu.Unlock()
						if res.Status != measure.StatusOK {
							failed++
							return
						}
						// QUIC: the response datagram is delayed once; TCP-based: the
						// server sleeps once; both add exactly benchDelay.
						resolveErr = append(resolveErr, res.First().Resolve-benchDelay)
						if p == measure.DoQ || p == measure.DoH3 {
							hsErr = append(hsErr, res.Handshake-benchDelay)
						}
					}()
				}
				wg.Wait()
				b.StopTimer()
				b.ReportMetric(float64(percentile(resolveErr, 0.5).Microseconds()), "p50-err-µs")
				b.ReportMetric(float64(percentile(resolveErr, 0.95).Microseconds()), "p95-err-µs")
				if len(hsErr) > 0 {
					b.ReportMetric(float64(percentile(hsErr, 0.5).Microseconds()), "hs-p50-err-µs")
					b.ReportMetric(float64(percentile(hsErr, 0.95).Microseconds()), "hs-p95-err-µs")
				}
				b.ReportMetric(float64(failed), "failed")
			})
		}
	}
}
