package dnsbench_test

import (
	"context"
	"fmt"
	"math"
	"net/netip"
	"os"
	"strconv"
	"testing"
	"time"
)

// BenchmarkVersusBaseline compares the dnsbench command built from this tree with
// another dnsbench binary, DNSBENCH_BASELINE (typically built from an earlier commit:
// `git worktree add /tmp/base <commit> && go -C /tmp/base build -o /tmp/dnsbench-base
// ./cmd/dnsbench`), so that a change to the load generator is judged against the client
// it replaces rather than against dnsperf alone. Same server, network and CPUs as
// BenchmarkVersusDnsperf (measuretest; server and clients on the two ends of a veth pair
// on their own CPUs), the same queries and flags, max mode with 64 queries outstanding in
// the three shapes (64 x 1, 4 x 16, 1 x 64), over DoUDP, DoT, DoH (GET) and DoQ (which
// dnsperf lacks). Each round runs the baseline, this tree's binary, the baseline (3 s
// each); the round's ratio is this tree's QPS over the geometric mean of the two baseline
// runs, and the second baseline run over the first is the control. Per cell and pooled
// per protocol it prints the median ratio with its 95 % interval and verdict
// (DNSBENCH_COMPARE_ROUNDS rounds, default 3, an interval from 6;
// DNSBENCH_COMPARE_CELLS as there, e.g. "doq/64x1").
func BenchmarkVersusBaseline(b *testing.B) {
	base := os.Getenv("DNSBENCH_BASELINE")
	if base == "" {
		b.Skip("SKIP: DNSBENCH_BASELINE names no dnsbench binary to compare with")
	}
	if _, err := os.Stat(base); err != nil {
		b.Fatalf("DNSBENCH_BASELINE: %v", err)
	}
	lab := newCompareLab(b)
	bin, bn, s, qf := lab.bin, lab.bn, lab.s, lab.queries
	const (
		workers = 64
		secs    = 3
	)
	rounds, runs, itoa := compareRounds(b), compareCells(b), strconv.Itoa
	common := []string{"--queries", qf, "--timeout", "2s", "--session-queries", "100000000", "--duration", itoa(secs) + "s"}
	for range b.N {
		for _, c := range []struct {
			name, scheme string
			addr         netip.AddrPort
		}{
			{"doudp", "doudp", s.UDP}, {"dot", "dot", s.DoT}, {"doh-get", "doh-get", s.DoH}, {"doq", "doq", s.DoQ},
		} {
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(9*rounds)*(secs*time.Second+time.Minute))
			// run returns one binary's QPS and client CPU per answer in one shape.
			run := func(binary string, w, st int) (float64, float64) {
				r, tr, err := runDnsbench(ctx, bn.launch, binary, append(common, "--workers", itoa(w), "--streams", itoa(st),
					c.scheme+"://"+c.addr.String())...)
				if err != nil {
					cancel()
					b.Fatalf("%s: %v", binary, err)
				}
				return r.QPS, usPer(tr.cpu, float64(r.Answered))
			}
			var allRatios, allControls []float64
			cells := 0
			for _, shape := range [][2]int{{workers, 1}, {4, workers / 4}, {1, workers}} {
				w, st := shape[0], shape[1]
				cell := fmt.Sprintf("%s/%dx%d", c.name, w, st)
				if !runs(cell) {
					continue
				}
				var ratios, controls, cpuRatios []float64
				for round := 1; round <= rounds; round++ {
					q1, cpu1 := run(base, w, st)
					q, cpu := run(bin, w, st)
					q2, cpu2 := run(base, w, st)
					ratios, controls = append(ratios, q/math.Sqrt(q1*q2)), append(controls, q2/q1)
					cpuRatios = append(cpuRatios, cpu/((cpu1+cpu2)/2))
					b.Logf("%s, round %d: baseline %.0f and %.0f q/s (%.1f and %.1f us CPU/answer); this tree %.0f q/s (%.1f); QPS ratio %.3f, control %.3f",
						cell, round, q1, q2, cpu1, cpu2, q, cpu, q/math.Sqrt(q1*q2), q2/q1)
				}
				b.Logf("%s: median QPS ratio %.3f, CPU/answer ratio %.3f over %d rounds", cell, median(append([]float64(nil), ratios...)), median(cpuRatios), rounds)
				logPairs(b, cell, "the baseline", ratios, controls)
				b.ReportMetric(median(append([]float64(nil), ratios...)), fmt.Sprintf("%s-%dx%d-qps-ratio", c.name, w, st))
				allRatios, allControls = append(allRatios, ratios...), append(allControls, controls...)
				cells++
			}
			if cells > 1 {
				logPairs(b, fmt.Sprintf("%s, %d shapes", c.name, cells), "the baseline", allRatios, allControls)
			}
			cancel()
		}
	}
}
