package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/testbed"
	"github.com/doqscan/doqscan/internal/testbed/wirecap"
)

// BenchmarkWireSpans: a minimal client (one connected UDP socket per worker, kernel
// receive stamps, a stamp right before the send syscall) runs DNS exchanges to the
// population's first well-behaved server on a jitter-free lossless 20 ms path at
// concurrency 1 and 64 while wirecap captures; it prints the distribution of
//
//	client - wire  (what even the thinnest client adds: the floor for measure's error)
//	wire - RTT     (the delay line and simserver under that load)
//
// Run: go test -run '^$' -bench WireSpans -benchtime 1x ./internal/testbed/wirecap/e2e/
// DOQSCAN_BENCH_EXCHANGES sets the exchanges per worker (default 20).
func BenchmarkWireSpans(b *testing.B) {
	v := testbed.Require(b)
	if v.Population == nil {
		b.Skip("SKIP: the testbed runs without a population file")
	}
	if _, err := exec.LookPath("tcpdump"); err != nil {
		b.Skip("SKIP: tcpdump not installed")
	}
	per := 20
	if s := os.Getenv("DOQSCAN_BENCH_EXCHANGES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			b.Fatalf("DOQSCAN_BENCH_EXCHANGES=%q: want a positive integer", s)
		}
		per = n
	}
	var tg target
	for _, t := range targets(v.Population) {
		if t.path.Jitter == 0 && t.path.RTT == 20*time.Millisecond {
			tg = t
			break
		}
	}
	if !tg.addr.IsValid() {
		b.Skip("SKIP: no jitter-free lossless 20 ms path with a DNS server in the population")
	}
	for _, c := range []int{1, 64} {
		b.Run(fmt.Sprintf("c=%d", c), func(b *testing.B) {
			for range b.N {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				capture, err := wirecap.ForVantage(ctx, v.Instance, v.Index)
				if err != nil {
					cancel()
					b.Fatal(err)
				}
				samples := make([][]udpSample, c)
				errs := make([]error, c)
				var wg sync.WaitGroup
				for w := range c {
					wg.Go(func() { samples[w], errs[w] = udpExchanges(tg, per) })
				}
				wg.Wait()
				pkts, st, err := capture.Stop()
				cancel()
				if err != nil {
					b.Fatal(err)
				}
				if err := errors.Join(errs...); err != nil {
					b.Fatal(err)
				}
				ix := wirecap.NewIndex(pkts)
				var over, path []time.Duration
				missing := 0
				for _, ws := range samples {
					for _, s := range ws {
						start, end, ok := ix.Exchange(s.local, s.remote, wirecap.ProtoUDP, s.from, s.to)
						if !ok {
							missing++
							continue
						}
						wire := end.Sub(start)
						over = append(over, s.to.Sub(s.from)-wire)
						path = append(path, wire-tg.path.RTT)
					}
				}
				b.Logf("c=%d %v (%s, rtt %v): %d exchanges, %d without a wire span; capture %d packets, flushed %v, dropped %d",
					c, tg.addr, tg.path.Name, tg.path.RTT, len(over)+missing, missing, st.Packets, st.Flushed, st.Dropped())
				b.Logf("c=%d client-wire ms: p50 %.3f  p95 %.3f  max %.3f   wire-rtt ms: p50 %+.3f  p95 %+.3f  max %+.3f",
					c, ms(pct(over, 50)), ms(pct(over, 95)), ms(pct(over, 100)), ms(pct(path, 50)), ms(pct(path, 95)), ms(pct(path, 100)))
				b.ReportMetric(ms(pct(over, 50)), "client-wire-p50-ms")
				b.ReportMetric(ms(pct(over, 95)), "client-wire-p95-ms")
				b.ReportMetric(ms(pct(path, 50)), "wire-rtt-p50-ms")
				b.ReportMetric(ms(pct(path, 95)), "wire-rtt-p95-ms")
				b.ReportMetric(float64(st.Dropped()), "dropped")
				if st.Dropped() > 0 || !st.Flushed {
					b.Errorf("capture incomplete: flushed %v, dropped %d", st.Flushed, st.Dropped())
				}
			}
		})
	}
}

// pct is the p-th percentile (nearest rank) of ds; 0 for none.
func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (p*len(s)+99)/100 - 1
	return s[max(0, min(i, len(s)-1))]
}
