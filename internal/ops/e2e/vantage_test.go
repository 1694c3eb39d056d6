package e2e

import (
	"context"
	"encoding/csv"
	"fmt"
	"math"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/testbed/netns"
	"github.com/doqscan/doqscan/internal/testbed/population"
	"github.com/doqscan/doqscan/internal/testsupport"
)

// TestShardedScanTwoVantages: one zmap scan of a /22 split over two scanner machines
// (the two vantage namespaces) with the same seed, --shards 2 and --shard 0|1, stored
// with their own vantage ids in one database. On the target side, the two shards probe
// disjoint sets whose union is every address of the /22; in the database, the replies
// of both together are exactly the population's QUIC speakers there.
func TestShardedScanTwoVantages(t *testing.T) {
	e := setup(t)
	const port = 853
	p22, speakers := quietSlash22(t, e.pop, port)
	t.Logf("scanning %s (%d QUIC speakers on %d) in two shards", p22, len(speakers), port)
	cap := startCapture(t, e.v, fmt.Sprintf("udp and dst port %d and dst net %s", port, p22))
	out := t.TempDir()
	for shard := 0; shard < 2; shard++ {
		o := e.run(t, shard, "zprobe", "scan", "--vantage", fmt.Sprintf("vp%d", shard), "--label", "sharded",
			"--week", "2026-W47", "--testbed", "198.19.0.0/16", "--targets", p22.String(),
			"--quic-ports", fmt.Sprint(port), "--dns-ports", "", "--seed", "20261122", "--shards", "2",
			"--shard", fmt.Sprint(shard), "--rate", "3000", "--cooldown", "2", "--out", out)
		if testing.Verbose() {
			t.Logf("shard %d:\n%s", shard, testsupport.Tail(o, 15))
		}
	}
	flows := cap.stop()

	probed := map[netip.Addr]int{} // target -> shard that probed it
	sent := [2]int{}
	for _, f := range flows {
		shard := -1
		for i := 0; i < 2; i++ {
			if f.src == netns.VantageAddr(i) {
				shard = i
			}
		}
		if shard < 0 {
			t.Errorf("datagram from unexpected source %s", f.src)
			continue
		}
		sent[shard]++
		if prev, ok := probed[f.dst]; ok && prev != shard {
			t.Errorf("%s probed by both shards (overlap)", f.dst)
		}
		probed[f.dst] = shard
	}
	var gaps []netip.Addr
	for a := p22.Addr(); p22.Contains(a); a = a.Next() {
		if _, ok := probed[a]; !ok {
			gaps = append(gaps, a)
		}
	}
	if len(gaps) > 0 {
		t.Errorf("%d addresses of %s probed by no shard (gap), e.g. %v", len(gaps), p22, gaps[:min(5, len(gaps))])
	}
	if len(probed) != 1<<(32-22) {
		t.Errorf("%d distinct targets probed, want %d", len(probed), 1<<(32-22))
	}
	t.Logf("target side: shard 0 (198.18.0.2) %d datagrams, shard 1 (198.18.1.2) %d, %d distinct targets", sent[0], sent[1], len(probed))
	if sent[0] == 0 || sent[1] == 0 {
		t.Errorf("a shard sent nothing: %v", sent)
	}

	// The database: two scans of one week and label, one per vantage and shard.
	if n := e.count(t, `SELECT count(DISTINCT (vantage_id, shard)) FROM scans WHERE iso_week = '2026-W47' AND label = 'sharded'`); n != 2 {
		t.Errorf("%d (vantage, shard) scans, want 2", n)
	}
	rows, err := e.s.Pool.Query(context.Background(), `SELECT s.vantage_id, s.shard, r.address FROM scan_replies r
		JOIN scans s USING (scan_id) WHERE r.reply_kind = 'quic-vn' AND r.port = $1`, port)
	if err != nil {
		t.Fatal(err)
	}
	var got []netip.Addr
	for rows.Next() {
		var vid string
		var shard int
		var a netip.Addr
		if err := rows.Scan(&vid, &shard, &a); err != nil {
			t.Fatal(err)
		}
		if vid != fmt.Sprintf("vp%d", shard) {
			t.Errorf("shard %d stored under vantage %s", shard, vid)
		}
		if probed[a] != shard {
			t.Errorf("%s answered shard %d but was probed by shard %d", a, shard, probed[a])
		}
		got = append(got, a)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(got, netip.Addr.Compare)
	want := slices.Clone(speakers)
	slices.SortFunc(want, netip.Addr.Compare)
	if !slices.Equal(got, want) {
		t.Errorf("the shards' VN replies together (%d) differ from the population's speakers in %s (%d)", len(got), p22, len(want))
	}
}

// TestMeasureFromTwoVantages: one measurement round, same hour, the same resolvers,
// from both vantage namespaces into one database; vantage 1's round
// trips exceed vantage 0's by the configured extra distance. Then the response-time
// notebook, executed headless as the report command runs it with both vantage points as
// parameters, shows both: its per-vantage comparison (figures/vantage_comparison.csv)
// names vp0 and vp1 with the resolver counts the database holds for each, its RTT
// medians differ by the extra distance, and the per-vantage figures exist.
func TestMeasureFromTwoVantages(t *testing.T) {
	e := setup(t)
	resolvers, lines := doxResolvers(t, e.pop)
	file := filepath.Join(t.TempDir(), "resolvers.txt")
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const hour = "2026-11-22T04"
	// One vantage point after the other: on the testbed both share the two cores and the
	// one user-space delay line, so rounds at once would measure their contention (late
	// RTT samples), not the distance.
	for vp := 0; vp < 2; vp++ {
		o := e.run(t, vp, "measure", "--vantage", vantageID(vp), "--hour", hour, "--targets", file,
			"--protocols", strings.Join(twoVantageProtocols, ","), "--rtt-samples", fmt.Sprint(twoVantageRTTSamples),
			"--concurrency", fmt.Sprint(twoVantagePerPath), "--timeout", "3s")
		if testing.Verbose() {
			t.Logf("%s:\n%s", vantageID(vp), testsupport.Tail(o, 15))
		}
	}
	if n := e.count(t, `SELECT count(*) FROM campaigns WHERE round_hour = '2026-11-22T04:00:00Z' AND vantage_id IN ('vp0', 'vp1')`); n != 2 {
		t.Fatalf("%d campaigns for the hour, want one per vantage (2)", n)
	}
	for _, a := range resolvers {
		var rtt [2]float64
		for vp := 0; vp < 2; vp++ {
			var ms *float64
			err := e.s.Pool.QueryRow(context.Background(), `SELECT min(r.rtt_ns)/1e6 FROM rtt_samples r JOIN campaigns c USING (campaign_id)
				WHERE c.vantage_id = $1 AND r.address = $2 AND r.status = 'ok'`, vantageID(vp), a).Scan(&ms)
			if err != nil {
				t.Fatal(err)
			}
			if ms == nil {
				t.Fatalf("%s: no successful RTT sample from %s", a, vantageID(vp))
			}
			rtt[vp] = *ms
			if n := e.count(t, `SELECT count(*) FROM measurements m JOIN campaigns c USING (campaign_id)
				WHERE c.vantage_id = $1 AND m.address = $2 AND m.status = 'ok'`, vantageID(vp), a); n == 0 {
				t.Errorf("%s: no successful measurement from %s", a, vantageID(vp))
			}
		}
		path := e.pop.PathOf(a).RTT
		diff := time.Duration((rtt[1] - rtt[0]) * float64(time.Millisecond))
		t.Logf("%s (path %v): min RTT vp0 %.2f ms, vp1 %.2f ms, difference %v (configured %v)", a, path, rtt[0], rtt[1], diff.Round(10*time.Microsecond), vantage1RTT)
		if math.Abs(float64(diff-vantage1RTT)) > float64(vantageTolerance) {
			t.Errorf("%s: vp1 - vp0 = %v, want %v ± %v", a, diff, vantage1RTT, vantageTolerance)
		}
		if got := time.Duration(rtt[0] * float64(time.Millisecond)); got < path-time.Millisecond || got > path+5*time.Millisecond {
			t.Errorf("%s: vp0 RTT %v, path %v", a, got, path)
		}
	}
	checkVantageNotebook(t, e)
}

// vantageTolerance is how far a difference between the two vantage points may be from
// the configured extra distance: below half of it, so that no shift, or a shift in one
// direction only (half the round trip), fails; the rest is room for the scheduling
// delays of a loaded 2-core machine (up to ~2 ms observed).
const vantageTolerance = vantage1RTT * 3 / 10

// The resolvers measured from both vantage points: twoVantagePerPath on each of the
// twoVantagePaths shortest quiet paths. Both counts are odd and the paths' resolvers
// share one RTT, so the median over resolvers lies inside the middle path's group: a
// late resolver there or below moves it by nothing while fewer than
// (twoVantagePerPath+1)/2 are late, where with one resolver per path (4 paths) a single
// late one moved the median by half its delay.
const (
	twoVantagePaths   = 3
	twoVantagePerPath = 5
)

var twoVantageProtocols = []string{"doudp", "dotcp", "dot", "doh", "doq"}

// twoVantageRTTSamples RTT samples per (resolver, transport, port): the notebook's RTT is
// their median, which stays on the path's RTT while fewer than half are late. With 3, two
// samples delayed by a loaded machine (both rounds then ran at once, beside other jobs) moved
// one resolver's RTT by ~10 ms and the DoTCP medians' difference to 14.9 ms.
const twoVantageRTTSamples = 9

func vantageID(i int) string { return fmt.Sprintf("vp%d", i) }

// doxResolvers picks well-behaved resolvers that answer on every DoX protocol (DNS over
// UDP and TCP, DoT, DoH, a DoQ-verified port) on loss- and jitter-free paths shorter than
// quic-go's first PTO, without SNI requirement or third-party peer: twoVantagePerPath
// (lowest addresses) on each of the twoVantagePaths shortest such paths. It returns them
// with their targets-file lines naming the DoT, DoH and DoQ endpoints.
func doxResolvers(t *testing.T, pop *population.Population) ([]netip.Addr, []string) {
	t.Helper()
	type cand struct {
		a    netip.Addr
		line string
	}
	byRTT := map[time.Duration][]cand{}
	for a, r := range pop.Hosts {
		p := pop.PathOf(a)
		if r.Hostile != "" || r.Peer != "" || r.SNI != "" || (r.RCode != "" && r.RCode != "NOERROR") ||
			!r.HasDNS("udp") || !r.HasDNS("tcp") || r.DoT == 0 || r.DoH == 0 ||
			p.Loss != 0 || p.Jitter != 0 || p.RTT >= clientFirstPTO {
			continue
		}
		for _, port := range reportPorts {
			if v := pop.ExpectVerify(a, port); v.Class == population.OutcomeDoQVerified {
				byRTT[p.RTT] = append(byRTT[p.RTT], cand{a, fmt.Sprintf("%s dot=%d doh=%d doq=%d/%s", a, r.DoT, r.DoH, port, v.ALPN)})
				break
			}
		}
	}
	var rtts []time.Duration
	for d, cs := range byRTT {
		if len(cs) >= twoVantagePerPath {
			rtts = append(rtts, d)
		}
	}
	slices.Sort(rtts)
	if len(rtts) < twoVantagePaths {
		t.Fatalf("population has %d quiet paths with %d DoX resolvers, want %d", len(rtts), twoVantagePerPath, twoVantagePaths)
	}
	var out []netip.Addr
	var lines []string
	for _, d := range rtts[:twoVantagePaths] {
		cs := byRTT[d]
		slices.SortFunc(cs, func(x, y cand) int { return x.a.Compare(y.a) })
		for _, c := range cs[:twoVantagePerPath] {
			out = append(out, c.a)
			lines = append(lines, c.line)
		}
	}
	return out, lines
}

// checkVantageNotebook executes the response-time notebook headless against the test
// database with both vantage points as parameters (python -m doqscan_analysis.report, as
// ./dev report does) and checks what it shows against the database.
func checkVantageNotebook(t *testing.T, e *env) {
	t.Helper()
	python := testsupport.ReportPython(t, "the round was checked; ", "notebook")
	out := t.TempDir()
	folder, sum := testsupport.RunReport(t, python, e.url, out, "--notebooks", "response_times", "--vantages", vantageID(0), vantageID(1))
	var figures []string
	for vp := 0; vp < 2; vp++ {
		figures = append(figures, "fig3a_resolve_rtt_"+vantageID(vp), "fig3b_handshake_ratio_"+vantageID(vp))
	}
	checkSummary(t, folder, sum, []string{"response_times"}, append(figures, "vantage_comparison"))
	if dir := os.Getenv("DOQSCAN_KEEP_REPORT"); dir != "" {
		// a copy to look at (the figures as images), e.g. DOQSCAN_KEEP_REPORT=/tmp/vantage-report
		if err := exec.Command("cp", "-r", folder, dir).Run(); err != nil {
			t.Logf("keeping the report: %v", err)
		}
	}

	rows := readVantageCSV(t, filepath.Join(folder, "figures", "vantage_comparison.csv"))
	got := map[[2]string]vantageRow{}
	for _, r := range rows {
		got[[2]string{r.vantage, r.protocol}] = r
	}
	for _, proto := range twoVantageProtocols {
		var med [2]float64
		for vp := 0; vp < 2; vp++ {
			r, ok := got[[2]string{vantageID(vp), proto}]
			if !ok {
				t.Errorf("the notebook's vantage comparison has no row for %s %s (rows: %v)", vantageID(vp), proto, rows)
				continue
			}
			// the resolvers the database holds answers from (measured, fresh, a response)
			want := e.count(t, `SELECT count(DISTINCT m.address) FROM measurements m JOIN campaigns c USING (campaign_id)
				WHERE c.vantage_id = $1 AND m.protocol = $2 AND m.status = 'ok' AND m.rcode IS NOT NULL
				  AND m.phase = 'measured' AND m.mode = 'fresh'`, vantageID(vp), proto)
			if r.resolvers != want || want == 0 {
				t.Errorf("%s %s: the notebook shows %d resolvers, the database holds %d", vantageID(vp), proto, r.resolvers, want)
			}
			t.Logf("notebook: %s %-5s %d resolvers (%d common), resolve median %.2f ms, RTT median %.2f ms (%d resolvers with an RTT from both), Δ RTT %.2f ms, Δ resolve %.2f ms",
				r.vantage, proto, r.resolvers, r.common, r.resolveMedian, r.rttMedian, r.rttResolvers, r.rttDelta, r.resolveDelta)
			med[vp] = r.rttMedian
		}
		if proto == "doudp" {
			// no RTT over UDP (probes go unanswered); the query is one round trip
			if r, ok := got[[2]string{vantageID(1), proto}]; ok {
				checkShift(t, "DoUDP resolve time (per-resolver median difference)", r.resolveDelta)
			}
			continue
		}
		checkShift(t, proto+" RTT medians vp1 - vp0", med[1]-med[0])
		if r, ok := got[[2]string{vantageID(1), proto}]; ok {
			checkShift(t, proto+" RTT (per-resolver median difference)", r.rttDelta)
		}
	}
}

func checkShift(t *testing.T, what string, ms float64) {
	t.Helper()
	d := time.Duration(ms * float64(time.Millisecond))
	if math.IsNaN(ms) || math.Abs(float64(d-vantage1RTT)) > float64(vantageTolerance) {
		t.Errorf("%s: %.2f ms, want the configured extra distance %v ± %v", what, ms, vantage1RTT, vantageTolerance)
	}
}

// vantageRow is a row of the notebook's figures/vantage_comparison.csv
// (stats.vantage_comparison).
type vantageRow struct {
	vantage, protocol, reference    string
	resolvers, common, rttResolvers int
	resolveMedian, rttMedian        float64
	resolveDelta, rttDelta          float64
}

func readVantageCSV(t *testing.T, path string) []vantageRow {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("the notebook wrote no vantage comparison: %v", err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil || len(recs) < 1 {
		t.Fatalf("%s: %v", path, err)
	}
	col := map[string]int{}
	for i, h := range recs[0] {
		col[h] = i
	}
	for _, h := range []string{"vantage_id", "protocol", "resolvers", "common_resolvers", "rtt_resolvers", "resolve_median_ms",
		"rtt_median_ms", "reference", "resolve_delta_ms", "rtt_delta_ms"} {
		if _, ok := col[h]; !ok {
			t.Fatalf("%s: no column %s (header %v)", path, h, recs[0])
		}
	}
	num := func(s string) float64 {
		v, err := testsupport.Cell(s)
		if err != nil {
			t.Fatalf("%s: %q: %v", path, s, err)
		}
		return v
	}
	var out []vantageRow
	for _, r := range recs[1:] {
		out = append(out, vantageRow{
			vantage: r[col["vantage_id"]], protocol: r[col["protocol"]], reference: r[col["reference"]],
			resolvers: int(num(r[col["resolvers"]])), common: int(num(r[col["common_resolvers"]])),
			rttResolvers:  int(num(r[col["rtt_resolvers"]])),
			resolveMedian: num(r[col["resolve_median_ms"]]), rttMedian: num(r[col["rtt_median_ms"]]),
			resolveDelta: num(r[col["resolve_delta_ms"]]), rttDelta: num(r[col["rtt_delta_ms"]]),
		})
	}
	return out
}
