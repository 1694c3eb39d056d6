package dnsbench_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/dnsbench"
	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/measure/measuretest"
)

var (
	dnsperfQPS = regexp.MustCompile(`Queries per second:\s+([0-9.]+)`)
	dnsperfLat = regexp.MustCompile(`Average Latency \(s\):\s+([0-9.]+)`)
)

// BenchmarkVersusDnsperf runs dnsperf and dnsbench, as fast as answered with the same
// concurrency, against the same loopback server for 3 s each, and prints both QPS and
// mean latencies and their ratios (goal: dnsbench QPS / dnsperf QPS >= 1), with
// dnsbench's DoQ QPS beside them. Needs dnsperf (apt-get install dnsperf).
func BenchmarkVersusDnsperf(b *testing.B) {
	if _, err := exec.LookPath("dnsperf"); err != nil {
		b.Skip("dnsperf not installed (apt-get install dnsperf)")
	}
	s := measuretest.Start(b, measuretest.Config{Host: "127.0.0.5"})
	qf := filepath.Join(b.TempDir(), "q.txt")
	if err := os.WriteFile(qf, []byte("a.example A\nb.example AAAA\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	const workers, secs = 10, 3
	for range b.N {
		for _, c := range []struct {
			mode string
			t    dnsbench.Target
		}{
			{"udp", dnsbench.Target{Protocol: measure.DoUDP, Addr: s.UDP}},
			{"dot", dnsbench.Target{Protocol: measure.DoT, Addr: s.DoT}},
		} {
			out, err := exec.Command("dnsperf", "-m", c.mode, "-s", c.t.Addr.Addr().String(),
				"-p", strconv.Itoa(int(c.t.Addr.Port())), "-d", qf, "-l", strconv.Itoa(secs),
				"-c", strconv.Itoa(workers), "-q", strconv.Itoa(workers)).CombinedOutput()
			qm, lm := dnsperfQPS.FindSubmatch(out), dnsperfLat.FindSubmatch(out)
			if err != nil || qm == nil || lm == nil {
				b.Fatalf("dnsperf: %v\n%s", err, out)
			}
			pq, _ := strconv.ParseFloat(string(qm[1]), 64)
			pl, _ := strconv.ParseFloat(string(lm[1]), 64)
			rs, err := dnsbench.Run(context.Background(), dnsbench.Config{Targets: []dnsbench.Target{c.t},
				Queries: []dnsbench.Question{{Name: "a.example", QType: 1}, {Name: "b.example", QType: 28}},
				Workers: workers, Duration: secs * time.Second, Timeout: 2 * time.Second}, nil, nil)
			if err != nil {
				b.Fatal(err)
			}
			r := rs[0]
			b.Logf("%s: dnsbench %.0f q/s mean %.3f ms (success %.4f); dnsperf %.0f q/s mean %.3f ms; QPS ratio %.2f, latency ratio %.2f",
				c.t.Protocol, r.QPS, r.Latency.Mean, r.SuccessRate, pq, pl*1000, r.QPS/pq, r.Latency.Mean/(pl*1000))
			b.ReportMetric(r.QPS/pq, string(c.t.Protocol)+"-qps-ratio")
		}
		rs, err := dnsbench.Run(context.Background(), dnsbench.Config{Targets: []dnsbench.Target{{Protocol: measure.DoQ, Addr: s.DoQ}},
			Workers: workers, Duration: secs * time.Second, Timeout: 2 * time.Second}, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("doq: dnsbench %.0f q/s mean %.3f ms (success %.4f)", rs[0].QPS, rs[0].Latency.Mean, rs[0].SuccessRate)
		b.ReportMetric(rs[0].QPS, "doq-qps")
	}
}
