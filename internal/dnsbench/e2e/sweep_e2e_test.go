package e2e_test

import (
	"bytes"
	"context"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/dnsbench"
	"github.com/doqscan/doqscan/internal/home"
	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/testbed"
	"github.com/doqscan/doqscan/internal/testbed/peers"
	"github.com/doqscan/doqscan/internal/testbed/population"
)

func TestMain(m *testing.M) {
	os.Exit(testbed.RunInVantage(m, testbed.Options{Servers: true}))
}

// peerAddr returns the population's address of a peer kind, skipping the test when
// there is none or it does not run (it, or a required peer, is not installed).
func peerAddr(t testing.TB, pop *population.Population, kind string) netip.Addr {
	t.Helper()
	root, err := peers.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	var addr netip.Addr
	for _, r := range pop.Records {
		if r.Peer == "" {
			continue
		}
		// The testbed starts no peer when a required one is missing; a missing optional
		// peer (peers.Optional) only leaves its own address silent.
		if err := peers.Installed(root, peers.Kind(r.Peer)); err != nil && (!peers.Optional[peers.Kind(r.Peer)] || string(r.Peer) == kind) {
			t.Skipf("SKIP: %s does not answer: %v", kind, err)
		}
		if string(r.Peer) == kind && !addr.IsValid() && r.Prefix.Addr().Is4() {
			addr = r.Prefix.Addr()
		}
	}
	if !addr.IsValid() {
		t.Skipf("SKIP: the population has no %s address", kind)
	}
	return addr
}

// TestLossSweep: the loss sweep against AdGuard dnsproxy over DoUDP, DoT and DoQ at
// 0, 5 and 20 % loss each way (a few seconds per level; the full sweep is
// `dnsbench --loss-sweep`, docs/dnsbench.md). Every level and target has a report with
// its loss; UDP, which never retransmits, loses about 1-(1-p)² of its queries; TCP and
// QUIC retransmit, so their success rate stays above UDP's and their mean latency of
// answered queries grows with the loss. The runs are then stored in a fresh database,
// and the report's tables (notebooks/benchmarks.ipynb) must show the same numbers and
// the same ordering.
func TestLossSweep(t *testing.T) {
	v, _ := testbed.RequirePopulation(t)
	addr := peerAddr(t, v.Population, "dnsproxy")
	var c dnsbench.Config
	for _, s := range []string{"doudp://", "dot://", "doq://"} {
		tg, err := dnsbench.ParseTarget(s + addr.String())
		if err != nil {
			t.Fatal(err)
		}
		c.Targets = append(c.Targets, tg)
	}
	c.Policy, c.Workers, c.Duration, c.Timeout, c.SessionQueries = "persistent", 16, 3*time.Second, time.Second, 1000
	c.Load = dnsbench.LoadMax
	levels := []float64{0, 0.05, 0.20}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var applied []string
	set := func(ctx context.Context, a netip.Addr, loss float64) error {
		ans, err := testbed.SetPath(ctx, home.Dir(), v.Instance, a.String(), "loss="+strconv.FormatFloat(loss, 'g', -1, 64))
		applied = append(applied, ans)
		return err
	}
	reset := func(ctx context.Context) error { return testbed.ResetPaths(ctx, home.Dir(), v.Instance, "") }
	rs, err := dnsbench.Sweep(ctx, c, levels, set, reset, nil, nil)
	if err != nil {
		t.Fatalf("sweep: %v", err)
	}
	var tables bytes.Buffer
	if err := dnsbench.WriteSweepTables(&tables, rs); err != nil {
		t.Fatal(err)
	}
	t.Logf("paths set: %q\n%s", applied, tables.String())
	if len(applied) != len(levels) || !strings.Contains(applied[2], "loss=0.2") {
		t.Fatalf("the delay line answered %q, want one set per level ending at loss=0.2", applied)
	}
	if len(rs) != len(levels)*len(c.Targets) {
		t.Fatalf("%d reports, want %d", len(rs), len(levels)*len(c.Targets))
	}
	// by[protocol][level]
	by := map[string]map[float64]*dnsbench.Report{}
	for i, r := range rs {
		want := levels[i/len(c.Targets)]
		if r.PathLoss == nil || *r.PathLoss != want {
			t.Fatalf("report %d (%s): path loss %v, want %v", i, r.Target, r.PathLoss, want)
		}
		if r.Sent < 20 {
			t.Fatalf("%s at %v: only %d queries sent", r.Target, want, r.Sent)
		}
		if by[r.Protocol] == nil {
			by[r.Protocol] = map[float64]*dnsbench.Report{}
		}
		by[r.Protocol][want] = r
		t.Logf("%s loss %v: sent %d answered %d statuses %v", r.Target, want, r.Sent, r.Answered, r.Statuses)
	}
	for _, title := range []string{"Queries per second", "Mean resolve time", "Success rate"} {
		if strings.Count(tables.String(), title) != 1 {
			t.Errorf("tables lack %q", title)
		}
	}
	if got := strings.Count(tables.String(), "| doudp://"); got != 3 {
		t.Errorf("tables have %d DoUDP rows, want 3 (one per table)", got)
	}
	udp, dot, doq := by["doudp"], by["dot"], by["doq"]
	if udp == nil || dot == nil || doq == nil {
		t.Fatalf("protocols reported: %v", by)
	}
	for _, r := range []*dnsbench.Report{udp[0], dot[0], doq[0]} {
		if r.SuccessRate < 0.99 {
			t.Errorf("%s without loss: success %.4f, want >= 0.99 (%v)", r.Target, r.SuccessRate, r.ErrorSamples)
		}
	}
	// UDP: a query survives with (1-p)² (both directions); at 20 % that is 0.64.
	if !(udp[0.05].SuccessRate < udp[0].SuccessRate && udp[0.20].SuccessRate < udp[0.05].SuccessRate) {
		t.Errorf("DoUDP success does not fall with loss: %.4f, %.4f, %.4f",
			udp[0].SuccessRate, udp[0.05].SuccessRate, udp[0.20].SuccessRate)
	}
	if s := udp[0.20].SuccessRate; s < 0.50 || s > 0.78 {
		t.Errorf("DoUDP at 20%% loss: success %.4f, want about 0.64 (0.50..0.78)", s)
	}
	for _, r := range []*dnsbench.Report{dot[0.20], doq[0.20]} {
		if r.SuccessRate <= udp[0.20].SuccessRate+0.15 {
			t.Errorf("%s at 20%% loss: success %.4f, not clearly above DoUDP's %.4f (retransmission)",
				r.Target, r.SuccessRate, udp[0.20].SuccessRate)
		}
	}
	for _, m := range []map[float64]*dnsbench.Report{dot, doq} {
		if m[0.20].Latency.Mean <= m[0].Latency.Mean {
			t.Errorf("%s: mean latency %.2f ms at 20%% loss, not above %.2f ms without (retransmissions cost time)",
				m[0].Target, m[0.20].Latency.Mean, m[0].Latency.Mean)
		}
	}
	// The same runs stored and through the report (bench_runs -> the benchmarks
	// notebook's tables and figure).
	checkSweepReport(t, rs, levels)
}

// TestConnectionReuse: the connection-reuse table on dnsproxy's 20 ms path. A fresh
// session costs its handshake round trips before the query's (DoT: TCP + TLS 1.3 + the
// query, 3 RTT; DoQ: QUIC's 1-RTT handshake + the query, 2 RTT), a persistent one only
// the query's round trip, and DoQ with 0-RTT saves the handshake's. The report's
// connection-reuse table, from the stored runs, must show the same.
func TestConnectionReuse(t *testing.T) {
	v, _ := testbed.RequirePopulation(t)
	addr := peerAddr(t, v.Population, "dnsproxy")
	var rec *population.Record
	for i := range v.Population.Records {
		if r := &v.Population.Records[i]; r.Prefix.Addr() == addr {
			rec = r
		}
	}
	rtt := v.Population.Paths[rec.Path].RTT
	var c dnsbench.Config
	for _, s := range []string{"dot://", "doq://"} {
		tg, err := dnsbench.ParseTarget(s + addr.String())
		if err != nil {
			t.Fatal(err)
		}
		c.Targets = append(c.Targets, tg)
	}
	c.Workers, c.Count, c.Timeout, c.SessionQueries = 2, 40, 5*time.Second, 1000
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rs, err := dnsbench.ComparePolicies(ctx, c, []measure.Mode{measure.ModeFresh, measure.ModePersistent, measure.Mode0RTT}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var tbl bytes.Buffer
	if err := dnsbench.WritePolicyTable(&tbl, rs); err != nil {
		t.Fatal(err)
	}
	t.Logf("path RTT %v\n%s", rtt, tbl.String())
	if len(rs) != 6 || strings.Count(tbl.String(), "\n| do") != 2 {
		t.Fatalf("%d reports; table:\n%s", len(rs), tbl.String())
	}
	ms := func(n float64) float64 { return n * float64(rtt) / float64(time.Millisecond) }
	get := func(target, policy string) *dnsbench.Report {
		for _, r := range rs {
			if strings.HasPrefix(r.Target, target) && r.Policy == policy {
				return r
			}
		}
		t.Fatalf("no report for %s %s", target, policy)
		return nil
	}
	// The delay line releases a packet up to its lead (100 µs) early and holds every path
	// within 0.5 ms of its setting (docs/testbed.md): a time of k RTT may read that much
	// below k x RTT (a persistent DoT query read 19.95 ms on the 20 ms path).
	const early = 0.5
	for _, tc := range []struct {
		target    string
		freshRTTs float64
	}{{"dot://", 3}, {"doq://", 2}} {
		fresh, pers := get(tc.target, "fresh"), get(tc.target, "persistent")
		if fresh.SuccessRate < 1 || pers.SuccessRate < 1 {
			t.Errorf("%s: success fresh %.3f persistent %.3f, want 1", tc.target, fresh.SuccessRate, pers.SuccessRate)
		}
		if f := fresh.Total.P50; f < ms(tc.freshRTTs)-early || f > ms(tc.freshRTTs+1) {
			t.Errorf("%s fresh: p50 %.2f ms, want %v RTT (%.1f ms) up to one more", tc.target, f, tc.freshRTTs, ms(tc.freshRTTs))
		}
		if p := pers.Total.P50; p < ms(1)-early || p > ms(1.5) {
			t.Errorf("%s persistent: p50 %.2f ms, want about one RTT (%.1f ms)", tc.target, p, ms(1))
		}
	}
	// dnsproxy accepts QUIC 0-RTT: the query rides in the first flight.
	if z, f := get("doq://", "0rtt").Total.P50, get("doq://", "fresh").Total.P50; z > f-ms(0.5) {
		t.Errorf("doq 0rtt: p50 %.2f ms, not clearly below fresh %.2f ms", z, f)
	}
	checkReuseReport(t, rs)
}
