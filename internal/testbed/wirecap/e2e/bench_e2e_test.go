package e2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/testbed/wirecap"
	"github.com/doqscan/doqscan/internal/testsupport"
)

// BenchmarkWireSpans: a minimal client (one connected UDP socket per worker, kernel
// receive stamps, a stamp right before the send syscall) runs DNS exchanges to the
// population's first well-behaved server on a jitter-free lossless 20 ms path at
// concurrency 1 and 64 while wirecap captures on the vantage's link and on the internet
// side; it prints the distribution of
//
//	client - wire        (what even the thinnest client adds: the floor for measure's error)
//	wire - RTT           (path + server: what the brief calls the servers and the delay line)
//	server               (the same exchange on the internet side: simserver and its stack)
//	wire - server - RTT  (the delay line and the forwarding path)
//
// Run: go test -run '^$' -bench WireSpans -benchtime 1x ./internal/testbed/wirecap/e2e/
// DOQSCAN_BENCH_EXCHANGES sets the exchanges per worker (default 20),
// DOQSCAN_BENCH_CONCURRENCY the concurrencies (default "1,64").
func BenchmarkWireSpans(b *testing.B) {
	v := requireSpans(b)
	per := testsupport.EnvInts(b, "DOQSCAN_BENCH_EXCHANGES", 20)[0]
	concs := testsupport.EnvInts(b, "DOQSCAN_BENCH_CONCURRENCY", 1, 64)
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
	for _, c := range concs {
		b.Run(fmt.Sprintf("c=%d", c), func(b *testing.B) {
			for range b.N {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				capture, err := wirecap.ForVantage(ctx, v.Instance, v.Index)
				if err != nil {
					cancel()
					b.Fatal(err)
				}
				icapture, err := wirecap.ForInternet(ctx, v.Instance)
				if err != nil {
					capture.Stop()
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
				ipkts, ist, ierr := icapture.Stop()
				cancel()
				if err := errors.Join(err, ierr); err != nil {
					b.Fatal(err)
				}
				if err := errors.Join(errs...); err != nil {
					b.Fatal(err)
				}
				ix, inet := wirecap.NewIndex(pkts), wirecap.NewIndex(ipkts)
				var over, path, server, line []time.Duration
				missing := 0
				for _, ws := range samples {
					for _, s := range ws {
						start, end, ok := ix.Exchange(s.local, s.remote, wirecap.ProtoUDP, s.from, s.to)
						if !ok {
							missing++
							continue
						}
						sstart, send, ok := inet.Exchange(s.local, s.remote, wirecap.ProtoUDP, s.from, s.to)
						if !ok {
							missing++
							continue
						}
						wire, srv := end.Sub(start), send.Sub(sstart)
						over = append(over, s.to.Sub(s.from)-wire)
						path = append(path, wire-tg.path.RTT)
						server = append(server, srv)
						line = append(line, wire-srv-tg.path.RTT)
					}
				}
				b.Logf("c=%d %v (%s, rtt %v): %d exchanges, %d without a wire span; captures %d + %d packets, flushed %v %v, dropped %d + %d",
					c, tg.addr, tg.path.Name, tg.path.RTT, len(over)+missing, missing, st.Packets, ist.Packets, st.Flushed, ist.Flushed, st.Dropped(), ist.Dropped())
				for _, row := range []struct {
					name string
					ds   []time.Duration
				}{{"client - wire", over}, {"wire - RTT", path}, {"server", server}, {"wire - server - RTT", line}} {
					b.Logf("c=%-3d %-20s ms: p50 %+8.3f  p95 %+8.3f  max %+8.3f", c, row.name, ms(pct(row.ds, 50)), ms(pct(row.ds, 95)), ms(pct(row.ds, 100)))
				}
				b.ReportMetric(ms(pct(over, 50)), "client-wire-p50-ms")
				b.ReportMetric(ms(pct(over, 95)), "client-wire-p95-ms")
				b.ReportMetric(ms(pct(path, 50)), "wire-rtt-p50-ms")
				b.ReportMetric(ms(pct(path, 95)), "wire-rtt-p95-ms")
				b.ReportMetric(ms(pct(server, 95)), "server-p95-ms")
				b.ReportMetric(ms(pct(line, 95)), "line-p95-ms")
				b.ReportMetric(float64(st.Dropped()+ist.Dropped()), "dropped")
				if st.Dropped()+ist.Dropped() > 0 || !st.Flushed || !ist.Flushed {
					b.Errorf("capture incomplete: flushed %v %v, dropped %d + %d", st.Flushed, ist.Flushed, st.Dropped(), ist.Dropped())
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
