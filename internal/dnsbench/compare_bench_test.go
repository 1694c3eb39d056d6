package dnsbench_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/dnsbench"
	"github.com/doqscan/doqscan/internal/measure/measuretest"
)

// dnsperf's and resperf's summary lines (2.10).
var (
	dnsperfQPS     = regexp.MustCompile(`Queries per second:\s+([0-9.]+)`)
	dnsperfLat     = regexp.MustCompile(`(?m)^\s+Average Latency \(s\):\s+([0-9.]+)`)
	dnsperfLost    = regexp.MustCompile(`Queries lost:\s+([0-9]+)`)
	resperfMaxQPS  = regexp.MustCompile(`Maximum throughput:\s+([0-9.]+) qps`)
	resperfLostMax = regexp.MustCompile(`Lost at that point:\s+([0-9.]+)%?`)
)

// peerRun is one run of dnsperf or resperf, bounded by its context (a tool that hangs
// is killed at the deadline and reported with its output).
func peerRun(ctx context.Context, name string, args ...string) ([]byte, error) {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if ctx.Err() != nil {
		return out, fmt.Errorf("%s %q: %w (killed at the deadline)", name, args, ctx.Err())
	}
	if err != nil {
		return out, fmt.Errorf("%s %q: %w", name, args, err)
	}
	return out, nil
}

// float of the first submatch of re in out, or an error naming what is missing.
func float(re *regexp.Regexp, out []byte) (float64, error) {
	m := re.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("no %q in the output", re)
	}
	return strconv.ParseFloat(string(m[1]), 64)
}

// dnsperfResult is dnsperf's summary: answered queries per second, mean latency (ms)
// and queries lost (timed out).
type dnsperfResult struct {
	QPS, MeanMS float64
	Lost        int
}

func parseDnsperf(out []byte) (dnsperfResult, error) {
	q, err := float(dnsperfQPS, out)
	if err != nil {
		return dnsperfResult{}, err
	}
	l, err := float(dnsperfLat, out)
	if err != nil {
		return dnsperfResult{}, err
	}
	lost, err := float(dnsperfLost, out)
	if err != nil {
		return dnsperfResult{}, err
	}
	return dnsperfResult{QPS: q, MeanMS: l * 1000, Lost: int(lost)}, nil
}

// BenchmarkVersusDnsperf runs, against the same loopback server (measuretest, one
// process, streams served until the client closes them):
//
//   - dnsperf (-m udp, dot, doh) and dnsbench in max mode over the same protocol with
//     the same outstanding limit (dnsperf -c W -q W: one connection per outstanding
//     query, as dnsbench's W persistent workers), 3 s each;
//   - resperf (-M udp, dot) and dnsbench in ramp mode up to the same maximum rate over
//     the same ramp time, with the same loss threshold and outstanding limit;
//   - dnsbench over DoQ in max mode (no peer has DoQ);
//
// and prints each pair's QPS, mean latency and the QPS ratio (goal: dnsbench / peer
// >= 1), resperf's maximum throughput beside the ramp's. Needs dnsperf and resperf
// (`apt-get install dnsperf`, Debian's 2.10; `./dev install` installs it). The
// client-side latency error is measured on the simulated internet:
// BenchmarkLatencyError in internal/dnsbench/e2e.
func BenchmarkVersusDnsperf(b *testing.B) {
	for _, tool := range []string{"dnsperf", "resperf"} {
		if _, err := exec.LookPath(tool); err != nil {
			b.Skipf("SKIP: %s not installed (apt-get install dnsperf, or ./dev install)", tool)
		}
	}
	s := measuretest.Start(b, measuretest.Config{Host: "127.0.0.5"})
	dir := b.TempDir()
	qf := filepath.Join(dir, "q.txt")
	if err := os.WriteFile(qf, []byte("a.example A\nb.example AAAA\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	questions := []dnsbench.Question{{Name: "a.example", QType: 1}, {Name: "b.example", QType: 28}}
	const (
		workers = 64 // outstanding limit of both tools
		secs    = 3
		timeout = 2 * time.Second
		// The ramps: 0 to rampMax q/s over rampSecs, stop above 5 % loss in a second.
		rampMax, rampSecs, rampLoss, rampWorkers = 40000, 10, 0.05, 200
	)
	target := func(s string) dnsbench.Target {
		t, err := dnsbench.ParseTarget(s)
		if err != nil {
			b.Fatal(err)
		}
		return t
	}
	run := func(ctx context.Context, c dnsbench.Config) *dnsbench.Report {
		c.Queries, c.Timeout, c.SessionQueries = questions, timeout, 1<<30
		rs, err := dnsbench.Run(ctx, c, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		return rs[0]
	}
	for range b.N {
		for _, c := range []struct{ mode, target string }{
			{"udp", "doudp://" + s.UDP.String()},
			{"dot", "dot://" + s.DoT.String()},
			{"doh", "doh-get://" + s.DoH.String()}, // dnsperf's default method is GET
		} {
			t := target(c.target)
			ctx, cancel := context.WithTimeout(context.Background(), secs*time.Second+time.Minute)
			out, err := peerRun(ctx, "dnsperf", "-m", c.mode, "-s", t.Addr.Addr().String(),
				"-p", strconv.Itoa(int(t.Addr.Port())), "-d", qf, "-l", strconv.Itoa(secs),
				"-t", strconv.Itoa(int(timeout/time.Second)), "-c", strconv.Itoa(workers), "-q", strconv.Itoa(workers))
			p, perr := parseDnsperf(out)
			if err != nil || perr != nil {
				cancel()
				b.Fatalf("dnsperf: %v %v\n%s", err, perr, out)
			}
			r := run(ctx, dnsbench.Config{Targets: []dnsbench.Target{t}, Workers: workers, Duration: secs * time.Second})
			cancel()
			b.Logf("%s max: dnsbench %.0f q/s, mean %.3f ms (success %.4f); dnsperf %.0f q/s, mean %.3f ms (lost %d); QPS ratio %.2f",
				t.Protocol, r.QPS, r.Latency.Mean, r.SuccessRate, p.QPS, p.MeanMS, p.Lost, r.QPS/p.QPS)
			b.ReportMetric(r.QPS/p.QPS, c.mode+"-qps-ratio")
		}
		for _, c := range []struct{ mode, target string }{
			{"udp", "doudp://" + s.UDP.String()},
			{"dot", "dot://" + s.DoT.String()},
		} {
			t := target(c.target)
			ctx, cancel := context.WithTimeout(context.Background(), rampSecs*time.Second+time.Minute)
			out, err := peerRun(ctx, "resperf", "-M", c.mode, "-s", t.Addr.Addr().String(),
				"-p", strconv.Itoa(int(t.Addr.Port())), "-d", qf, "-R", "-m", strconv.Itoa(rampMax),
				"-r", strconv.Itoa(rampSecs), "-L", strconv.Itoa(int(rampLoss*100)),
				"-t", strconv.Itoa(int(timeout/time.Second)), "-q", strconv.Itoa(rampWorkers),
				"-C", strconv.Itoa(workers), "-P", filepath.Join(dir, "resperf-"+c.mode+".gnuplot"))
			pmax, perr := float(resperfMaxQPS, out)
			plost, _ := float(resperfLostMax, out)
			if err != nil || perr != nil {
				cancel()
				b.Fatalf("resperf: %v %v\n%s", err, perr, out)
			}
			r := run(ctx, dnsbench.Config{Targets: []dnsbench.Target{t}, Workers: rampWorkers,
				Duration: rampSecs * time.Second, Load: dnsbench.LoadRamp, RampMax: rampMax, RampLoss: rampLoss})
			cancel()
			if r.Ramp == nil {
				b.Fatalf("%s ramp: no ramp result", t.Protocol)
			}
			b.Logf("%s ramp to %d q/s over %d s: dnsbench max %.0f q/s (at offered %.0f, stopped %v); resperf maximum throughput %.0f q/s (lost %.2f %% then); ratio %.2f",
				t.Protocol, rampMax, rampSecs, r.Ramp.MaxQPS, r.Ramp.MaxQPSRate, r.Ramp.Stopped, pmax, plost, r.Ramp.MaxQPS/pmax)
			b.ReportMetric(r.Ramp.MaxQPS/pmax, c.mode+"-ramp-ratio")
		}
		ctx, cancel := context.WithTimeout(context.Background(), secs*time.Second+time.Minute)
		r := run(ctx, dnsbench.Config{Targets: []dnsbench.Target{target("doq://" + s.DoQ.String())},
			Workers: workers, Duration: secs * time.Second})
		cancel()
		b.Logf("doq max: dnsbench %.0f q/s, mean %.3f ms (success %.4f); no peer has DoQ", r.QPS, r.Latency.Mean, r.SuccessRate)
		b.ReportMetric(r.QPS, "doq-qps")
	}
}
