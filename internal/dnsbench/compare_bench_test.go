package dnsbench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/doqscan/doqscan/internal/benchpool"
	"github.com/doqscan/doqscan/internal/dnsbench"
	"github.com/doqscan/doqscan/internal/measure/measuretest"
	"github.com/doqscan/doqscan/internal/testsupport"
)

// dnsperf's and resperf's summary lines (2.10).
var (
	dnsperfQPS     = regexp.MustCompile(`Queries per second:\s+([0-9.]+)`)
	dnsperfLat     = regexp.MustCompile(`(?m)^\s+Average Latency \(s\):\s+([0-9.]+)`)
	dnsperfLost    = regexp.MustCompile(`Queries lost:\s+([0-9]+)`)
	resperfMaxQPS  = regexp.MustCompile(`Maximum throughput:\s+([0-9.]+) qps`)
	resperfLostMax = regexp.MustCompile(`Lost at that point:\s+([0-9.]+)%?`)
	// why resperf's ramp ended early (-q outstanding queries reached, or its sender
	// fell -F queries behind the schedule); nil when it ran to the end
	resperfStop = regexp.MustCompile(`Reached [0-9]+ outstanding queries|Fell behind by [0-9]+ queries, ending test at [0-9]+ qps`)
)

// toolRun is one run of dnsperf, resperf or the dnsbench command: its standard output
// and the CPU time (user + system) it used.
type toolRun struct {
	out []byte
	cpu time.Duration
}

// runTool runs a tool bounded by ctx (a tool that hangs is killed at the deadline and
// reported with its output), started through launch (benchNet.launch: taskset, ip netns
// exec; nil: directly).
func runTool(ctx context.Context, launch []string, name string, args ...string) (toolRun, error) {
	var stdout, stderr bytes.Buffer
	if len(launch) > 0 {
		name, args = launch[0], slices.Concat(launch[1:], []string{name}, args)
	}
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := toolRun{out: stdout.Bytes()}
	if cmd.ProcessState != nil {
		r.cpu = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	if ctx.Err() != nil {
		return r, fmt.Errorf("%s %q: %w (killed at the deadline)\n%s", name, args, ctx.Err(), stderr.Bytes())
	}
	if err != nil {
		return r, fmt.Errorf("%s %q: %w\n%s", name, args, err, stderr.Bytes())
	}
	return r, nil
}

// runDnsbench runs the dnsbench command with --json and returns its one report.
func runDnsbench(ctx context.Context, launch []string, bin string, args ...string) (*dnsbench.Report, toolRun, error) {
	r, err := runTool(ctx, launch, bin, append([]string{"--json", "--progress", "0"}, args...)...)
	if err != nil {
		return nil, r, err
	}
	rs, err := dnsbench.ReadJSON(bytes.NewReader(r.out))
	if (err != nil || len(rs) == 0) && bytes.HasPrefix(bytes.TrimSpace(r.out), []byte("[")) {
		// a binary from before --json printed JSON lines (DNSBENCH_BASELINE): one array
		rs = nil
		err = json.Unmarshal(r.out, &rs)
	}
	if err != nil || len(rs) != 1 {
		return nil, r, fmt.Errorf("dnsbench --json: %d reports, %v\n%s", len(rs), err, r.out)
	}
	return rs[0], r, nil
}

// reflector serves DoUDP on host by sending each query back as its own answer
// (testsupport.ReflectQuery), for as little work per answer as a server can do, so that
// the clients' own speed sets the QPS. It runs on the benchmark's (the server's) CPUs.
func reflector(b *testing.B, host string) netip.AddrPort {
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr(host), 0)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	testsupport.ServeUDP(c, testsupport.ReflectQuery)
	return c.LocalAddr().(*net.UDPAddr).AddrPort()
}

// usPer is CPU microseconds per answered query.
func usPer(cpu time.Duration, answered float64) float64 {
	return float64(cpu.Microseconds()) / answered
}

// float of the first submatch of re in out, or an error naming what is missing.
func float(re *regexp.Regexp, out []byte) (float64, error) {
	m := re.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("no %q in the output", re)
	}
	return strconv.ParseFloat(string(m[1]), 64)
}

// splitCPUs runs the comparison as on two hosts: this process (the server) on the first
// half of the CPUs it may use, every client (taskset) on the other half, so that no
// client's CPU time is taken from the server it loads and each tool has the same CPUs.
// It returns the server's and the clients' CPUs, nil (everything shared) with fewer than
// two CPUs, without taskset, or with DNSBENCH_COMPARE_CPUS=shared. The server's threads
// are pinned until the benchmark ends (threads started later inherit it).
func splitCPUs(b *testing.B) (server, clients []int) {
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		b.Logf("CPU affinity: %v; server and clients share the CPUs", err)
		return nil, nil
	}
	var cpus []int
	for i := range 1024 {
		if all.IsSet(i) {
			cpus = append(cpus, i)
		}
	}
	if _, err := exec.LookPath("taskset"); err != nil || len(cpus) < 2 || os.Getenv("DNSBENCH_COMPARE_CPUS") == "shared" {
		b.Logf("server and clients share CPUs %v", cpus)
		return nil, nil
	}
	server, clients = cpus[:len(cpus)/2], cpus[len(cpus)/2:]
	var set unix.CPUSet
	for _, c := range server {
		set.Set(c)
	}
	pin := func(set *unix.CPUSet) {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			b.Fatal(err)
		}
		for _, t := range tasks {
			if tid, err := strconv.Atoi(t.Name()); err == nil {
				_ = unix.SchedSetaffinity(tid, set) // a thread that just exited: nothing to pin
			}
		}
	}
	pin(&set)
	prev := runtime.GOMAXPROCS(len(server))
	b.Cleanup(func() { pin(&all); runtime.GOMAXPROCS(prev) })
	b.Logf("server (this process) on CPUs %v, every client on %v", server, clients)
	return server, clients
}

// medianInterval returns a distribution-free confidence interval of at least 95 % for
// the median of xs: the k-th smallest and k-th largest values, with k the largest rank
// such that P(Binomial(n, 1/2) < k) <= 2.5 %. ok is false when n is too small for one
// (fewer than 6 values).
func medianInterval(xs []float64) (lo, hi float64, ok bool) {
	n := len(xs)
	ys := slices.Clone(xs)
	slices.Sort(ys)
	// cdf accumulates P(Binomial(n, 1/2) <= j) with exact binomial terms.
	term, cdf, k := math.Pow(0.5, float64(n)), 0.0, 0
	for j := 0; j < n; j++ {
		cdf += term
		if cdf > 0.025 {
			break
		}
		k = j + 1 // P(B < k) = P(B <= j) <= 2.5 %
		term = term * float64(n-j) / float64(j+1)
	}
	if k < 1 {
		return 0, 0, false
	}
	return ys[k-1], ys[n-k], true
}

// logPairs prints the median of a cell's paired QPS ratios with its interval, which says
// whether the QPS goal is met, missed, or beyond this machine's noise to tell, beside the
// control's, which says how far from 1.0 the peer reads against itself. Nothing with
// fewer than six rounds (no interval).
func logPairs(b *testing.B, what, peer string, ratios, controls []float64) {
	lo, hi, ok := medianInterval(ratios)
	if !ok {
		return
	}
	clo, chi, _ := medianInterval(controls)
	b.Logf("%s: paired QPS ratio median %.3f, 95 %% interval [%.3f, %.3f] over %d rounds: %s; control (%s against itself) %.3f [%.3f, %.3f]: %s",
		what, median(ratios), lo, hi, len(ratios), verdict(lo, hi), peer, median(controls), clo, chi, verdict(clo, chi))
}

// verdict says where a ratio's 95 % interval [lo, hi] lies against 1.0.
func verdict(lo, hi float64) string {
	switch {
	case lo >= 1:
		return "at least 1.0"
	case hi < 1:
		return "below 1.0"
	}
	return "cannot tell from 1.0"
}

// compareRounds is how many turns each shape gets (DNSBENCH_COMPARE_ROUNDS, default 3).
func compareRounds(b *testing.B) int {
	v := os.Getenv("DNSBENCH_COMPARE_ROUNDS")
	if v == "" {
		return 3
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("DNSBENCH_COMPARE_ROUNDS=%q: want a count of rounds, 1 or more", v)
	}
	return n
}

// compareCells returns whether a cell of the comparison runs: every cell when
// DNSBENCH_COMPARE_CELLS is unset, else the ones it lists by comma ("doudp/64x1",
// "doh-get/1x64", "doudp/ramp", "dot/ramp", "doq").
func compareCells(b *testing.B) func(cell string) bool {
	v := os.Getenv("DNSBENCH_COMPARE_CELLS")
	if v == "" {
		return func(string) bool { return true }
	}
	want := map[string]bool{}
	for _, c := range strings.Split(v, ",") {
		want[strings.TrimSpace(c)] = true
	}
	b.Logf("cells: %s (DNSBENCH_COMPARE_CELLS)", v)
	return func(cell string) bool { return want[cell] }
}

// median of xs (sorts xs in place).
func median(xs []float64) float64 {
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
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

// compareLab is what the comparisons run on: the dnsbench command built from this tree,
// the measuretest servers and the reflector on the server's side of compareNet (server
// and clients on CPUs of their own, splitCPUs), and a file of two queries.
type compareLab struct {
	dir, bin, queries string
	bn                benchNet
	s                 *measuretest.Servers
	refl              netip.AddrPort
}

func newCompareLab(b *testing.B) compareLab {
	l := compareLab{dir: testsupport.Commands(b, "dnsbench")}
	l.bin, l.queries = filepath.Join(l.dir, "dnsbench"), filepath.Join(l.dir, "q.txt")
	serverCPUs, clientCPUs := splitCPUs(b)
	l.bn = compareNet(b, serverCPUs, clientCPUs)
	l.bn.listen(b, func() {
		l.s = measuretest.Start(b, measuretest.Config{Host: l.bn.host})
		// The clients' own speed: a server that costs less per answer than either.
		l.refl = reflector(b, l.bn.host)
	})
	if err := os.WriteFile(l.queries, []byte("a.example A\nb.example AAAA\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	return l
}

// BenchmarkVersusDnsperf runs, against the same server (measuretest in the benchmark's
// process; streams served until the client closes them), every client as a process of
// its own (the dnsbench command, built into a temporary directory), the server on half
// of the CPUs and the clients on the other half (splitCPUs), server and clients on the
// two ends of a veth pair, or on loopback (compareNet), dnsperf
// and resperf with -e so that their queries are dnsbench's (RD and an EDNS OPT record:
// the server's work per query is the same whichever client sent it):
//
//   - dnsperf (-m udp, dot, doh) and dnsbench in max mode over the same protocol with
//     the same outstanding limit and the same number of sockets or connections
//     (dnsperf -c W -q W*S as dnsbench --workers W --streams S: 64 x 1, 4 x 16, 1 x 64),
//     3 s each, in rounds of dnsperf, dnsbench, dnsperf (three per shape,
//     compareRounds), with the paired ratios' median and its interval, beside the
//     control: the second dnsperf run over the first;
//     DoUDP twice: against the server (miekg/dns, which sets the QPS of both when the
//     two clients keep it busy) and against a reflector, whose answers cost so little
//     that the clients' own speed sets the QPS;
//   - resperf (-M udp, dot) and dnsbench's ramp to the same maximum rate over the same
//     ramp time and the same loss threshold, both counting answers per second (-i 1),
//     with the same outstanding limit;
//   - dnsbench over DoQ in max mode (no peer has DoQ);
//
// and prints each pair's QPS, mean latency, CPU time per answer (client's and
// server's) and the QPS ratio
// (goal: dnsbench / peer >= 1). Needs dnsperf and resperf (`apt-get install dnsperf`,
// Debian's 2.10; `./dev install` installs it). The client-side latency error is
// measured on the simulated internet: BenchmarkLatencyError in internal/dnsbench/e2e.
func BenchmarkVersusDnsperf(b *testing.B) {
	for _, tool := range []string{"dnsperf", "resperf", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			b.Skipf("SKIP: %s not installed (dnsperf, resperf: apt-get install dnsperf, or ./dev install)", tool)
		}
	}
	lab := newCompareLab(b)
	bin, bn, s, refl, qf, dir := lab.bin, lab.bn, lab.s, lab.refl, lab.queries, lab.dir
	const (
		workers = 64 // outstanding limit of both tools in max mode
		secs    = 3
		timeout = 2 * time.Second
		// The ramps: 0 to rampMax q/s over rampSecs; the maximum is taken before the
		// first second above 5 % loss.
		rampMax, rampSecs, rampLoss, rampWorkers = 40000, 10, 0.05, 500
	)
	rounds := compareRounds(b) // turns of dnsperf and dnsbench per shape
	runs := compareCells(b)
	// The shapes of the same workers outstanding queries: one per socket or connection,
	// and the same total over fewer of them (dnsbench --streams, dnsperf -c < -q; one
	// socket is dnsperf's default).
	shapes := [][2]int{{workers, 1}, {4, workers / 4}, {1, workers}}
	itoa := strconv.Itoa
	pairs := func(what string, ratios, controls []float64) { logPairs(b, what, "dnsperf", ratios, controls) }
	common := []string{"--queries", qf, "--timeout", timeout.String(), "--session-queries", "100000000"}
	for range b.N {
		for _, c := range []struct {
			name, mode, scheme string
			addr               netip.AddrPort
		}{
			{"doudp", "udp", "doudp", s.UDP},
			// The clients' own speed: a server that costs less per answer than either.
			{"doudp-reflector", "udp", "doudp", refl},
			{"dot", "dot", "dot", s.DoT},
			{"doh-get", "doh", "doh-get", s.DoH}, // dnsperf's default method is GET
		} {
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(3*rounds*len(shapes))*(secs*time.Second+time.Minute))
			// perf and bench return a run's result, its client's CPU per answer and the
			// server's (this process's, which serves nothing else meanwhile).
			perf := func(clients, outstanding int) (dnsperfResult, float64, float64) {
				s0 := benchpool.CPUTime()
				pr, err := runTool(ctx, bn.launch, "dnsperf", "-e", "-m", c.mode, "-s", c.addr.Addr().String(),
					"-p", itoa(int(c.addr.Port())), "-d", qf, "-l", itoa(secs),
					"-t", itoa(int(timeout/time.Second)), "-c", itoa(clients), "-q", itoa(outstanding))
				p, perr := parseDnsperf(pr.out)
				if err != nil || perr != nil {
					cancel()
					b.Fatalf("dnsperf: %v %v\n%s", err, perr, pr.out)
				}
				return p, usPer(pr.cpu, p.QPS*secs), usPer(benchpool.CPUTime()-s0, p.QPS*secs)
			}
			bench := func(w, st int) (*dnsbench.Report, float64, float64) {
				s0 := benchpool.CPUTime()
				r, dr, err := runDnsbench(ctx, bn.launch, bin, append(common, "--workers", itoa(w), "--streams", itoa(st),
					"--duration", itoa(secs)+"s", c.scheme+"://"+c.addr.String())...)
				if err != nil {
					cancel()
					b.Fatal(err)
				}
				return r, usPer(dr.cpu, float64(r.Answered)), usPer(benchpool.CPUTime()-s0, float64(r.Answered))
			}
			// Each shape against its like in dnsperf (-c sockets or connections, -q
			// outstanding queries in all): each round runs dnsperf, dnsbench, dnsperf, so
			// that a drift of the machine's speed during a round weighs on both tools
			// alike; the round's ratio is dnsbench's QPS over the geometric mean of the two
			// dnsperf runs. The second dnsperf over the first is the control: what the
			// same tool reads against itself on this machine, the spread a ratio of 1.0
			// has here.
			var allRatios, allControls []float64 // of the shapes with a ratio
			cells := 0
			for _, shape := range shapes {
				w, st := shape[0], shape[1]
				if !runs(fmt.Sprintf("%s/%dx%d", c.name, w, st)) {
					continue
				}
				var perfQPS, benchQPS, perfCPU, benchCPU, ratios, controls []float64
				perfLost := 0
				for round := 1; round <= rounds; round++ {
					p, pcpu, pserver := perf(w, w*st)
					r, rcpu, rserver := bench(w, st)
					p2, pcpu2, pserver2 := perf(w, w*st)
					perfLost += p.Lost + p2.Lost
					pboth := math.Sqrt(p.QPS * p2.QPS)
					perfQPS, benchQPS = append(perfQPS, pboth), append(benchQPS, r.QPS)
					perfCPU, benchCPU = append(perfCPU, (pcpu+pcpu2)/2), append(benchCPU, rcpu)
					ratios, controls = append(ratios, r.QPS/pboth), append(controls, p2.QPS/p.QPS)
					b.Logf("%s max, %d x %d, round %d: dnsperf %.0f and %.0f q/s, mean %.3f and %.3f ms, %.1f and %.1f us CPU/answer, server %.1f and %.1f (lost %d); dnsbench %.0f q/s, mean %.3f ms, %.1f us CPU/answer, server %.1f (success %.4f); QPS ratio %.2f, control %.2f",
						c.name, w, st, round, p.QPS, p2.QPS, p.MeanMS, p2.MeanMS, pcpu, pcpu2, pserver, pserver2, p.Lost+p2.Lost,
						r.QPS, r.Latency.Mean, rcpu, rserver, r.SuccessRate, r.QPS/pboth, p2.QPS/p.QPS)
				}
				pq, bq := median(perfQPS), median(benchQPS)
				b.Logf("%s max, %d x %d (dnsperf -c %d -q %d, dnsbench --workers %d --streams %d), medians of %d rounds: dnsperf %.0f q/s, %.1f us CPU/answer; dnsbench %.0f q/s, %.1f us CPU/answer; QPS ratio %.2f, CPU/answer ratio %.2f",
					c.name, w, st, w, w*st, w, st, rounds, pq, median(perfCPU), bq, median(benchCPU), bq/pq, median(benchCPU)/median(perfCPU))
				if perfLost > 0 {
					// dnsperf 2.10's DoH loses answers that come together on one
					// connection (it reports them under "HTTP/2 return codes" yet times the
					// queries out: DNS-OARC/dnsperf#240), so its QPS is no measure there.
					b.Logf("%s max, %d x %d: no ratio: dnsperf lost %d queries in %d rounds (a server and path that drop nothing)", c.name, w, st, perfLost, rounds)
					continue
				}
				// The rounds pair the tools under the same load of the machine, so the
				// ratio of each pair is what varies least.
				pairs(fmt.Sprintf("%s max, %d x %d", c.name, w, st), ratios, controls)
				allRatios, allControls = append(allRatios, ratios...), append(allControls, controls...)
				cells++
				b.ReportMetric(bq/pq, fmt.Sprintf("%s-%dx%d-qps-ratio", c.name, w, st))
			}
			// The rounds of every shape together: one shape's interval is often as wide
			// as the machine's noise; the rounds of several narrow it.
			if cells > 1 {
				pairs(fmt.Sprintf("%s max, %d shapes", c.name, cells), allRatios, allControls)
			}
			cancel()
		}
		for _, c := range []struct {
			mode, scheme string
			addr         netip.AddrPort
		}{
			{"udp", "doudp", s.UDP},
			{"dot", "dot", s.DoT},
		} {
			if !runs(c.scheme + "/ramp") {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), rampSecs*time.Second+time.Minute)
			pr, err := runTool(ctx, bn.launch, "resperf", "-e", "-M", c.mode, "-s", c.addr.Addr().String(),
				"-p", itoa(int(c.addr.Port())), "-d", qf, "-R", "-m", itoa(rampMax),
				"-r", itoa(rampSecs), "-L", itoa(int(rampLoss*100)), "-t", itoa(int(timeout/time.Second)),
				"-q", itoa(rampWorkers), "-C", itoa(workers), "-i", "1", "-P", filepath.Join(dir, "resperf-"+c.mode+".gnuplot"))
			pmax, perr := float(resperfMaxQPS, pr.out)
			plost, _ := float(resperfLostMax, pr.out)
			if err != nil || perr != nil {
				cancel()
				b.Fatalf("resperf: %v %v\n%s", err, perr, pr.out)
			}
			r, _, err := runDnsbench(ctx, bn.launch, bin, append(common, "--workers", itoa(rampWorkers),
				"--duration", itoa(rampSecs)+"s", "--ramp-max", itoa(rampMax), "--ramp-loss", strconv.FormatFloat(rampLoss, 'g', -1, 64),
				c.scheme+"://"+c.addr.String())...)
			cancel()
			if err != nil {
				b.Fatal(err)
			}
			if r.Ramp == nil {
				b.Fatalf("%s ramp: no ramp result", c.scheme)
			}
			stop := "ran to the end"
			if r.Ramp.Stopped {
				stop = fmt.Sprintf("stopped in second %d at %.0f q/s offered, loss %.3f", r.Ramp.StopSecond, r.Ramp.StopRate, r.Ramp.StopLoss)
			}
			pstop := "ran to the end"
			if m := resperfStop.Find(pr.out); m != nil {
				pstop = string(m)
			}
			b.Logf("%s ramp to %d q/s over %d s: dnsbench max %.0f q/s (at offered %.0f; %s); resperf maximum throughput %.0f q/s (lost %.2f %% then; %s); ratio %.2f",
				c.scheme, rampMax, rampSecs, r.Ramp.MaxQPS, r.Ramp.MaxQPSRate, stop, pmax, plost, pstop, r.Ramp.MaxQPS/pmax)
			b.ReportMetric(r.Ramp.MaxQPS/pmax, c.scheme+"-ramp-ratio")
		}
		if !runs("doq") {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), secs*time.Second+time.Minute)
		r, dr, err := runDnsbench(ctx, bn.launch, bin, append(common, "--workers", itoa(workers), "--duration", itoa(secs)+"s",
			"doq://"+s.DoQ.String())...)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("doq max: dnsbench %.0f q/s, mean %.3f ms, %.1f us CPU/answer (success %.4f); no peer has DoQ",
			r.QPS, r.Latency.Mean, usPer(dr.cpu, float64(r.Answered)), r.SuccessRate)
		b.ReportMetric(r.QPS, "doq-qps")
	}
}

// TestMedianInterval checks the interval's ranks against the binomial table of the
// median's confidence interval (n = 6: 1st and 6th; 10: 2nd and 9th; 15: 4th and 12th)
// and that five values give none.
func TestMedianInterval(t *testing.T) {
	for _, c := range []struct{ n, lo, hi int }{{6, 1, 6}, {10, 2, 9}, {15, 4, 12}, {30, 10, 21}} {
		xs := make([]float64, c.n)
		for i := range xs {
			xs[i] = float64(c.n - i) // descending: the function must sort
		}
		lo, hi, ok := medianInterval(xs)
		if !ok || lo != float64(c.lo) || hi != float64(c.hi) {
			t.Errorf("n=%d: [%v, %v] %v, want [%d, %d]", c.n, lo, hi, ok, c.lo, c.hi)
		}
		if xs[0] != float64(c.n) {
			t.Errorf("n=%d: medianInterval sorted its argument", c.n)
		}
	}
	if _, _, ok := medianInterval([]float64{1, 2, 3, 4, 5}); ok {
		t.Error("n=5: an interval, want none")
	}
}

// TestVerdict checks where an interval lies against 1.0, its bounds included.
func TestVerdict(t *testing.T) {
	for _, c := range []struct {
		lo, hi float64
		want   string
	}{
		{1.0, 1.2, "at least 1.0"},
		{1.01, 1.2, "at least 1.0"},
		{0.8, 0.99, "below 1.0"},
		{0.8, 1.0, "cannot tell from 1.0"},
		{0.99, 1.01, "cannot tell from 1.0"},
	} {
		if got := verdict(c.lo, c.hi); got != c.want {
			t.Errorf("verdict(%v, %v) = %q, want %q", c.lo, c.hi, got, c.want)
		}
	}
}
