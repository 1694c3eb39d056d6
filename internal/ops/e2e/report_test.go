package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/quicver"
	"github.com/doqscan/doqscan/internal/release"
	"github.com/doqscan/doqscan/internal/testbed"
	"github.com/doqscan/doqscan/internal/testbed/population"
	"github.com/doqscan/doqscan/internal/testsupport"
)

// The report test's reduced target set: the special behaviour classes and one block of
// the bulk DoQ resolvers (a full /16 run takes ~12 minutes).
var reportSpecial = netip.MustParsePrefix("198.19.1.0/24")

const (
	reportBulkClass = "bulk-doq"
	reportBulkBits  = 26
	reportWeek      = "2026-W47"
	reportVantage   = "vp0"
	reportLabel     = "report-e2e"
)

// clientFirstPTO is quic-go's first probe timeout before any RTT sample: initial RTT
// 100 ms (utils.DefaultInitialRTT), PTO = smoothed RTT + 4 x RTT variance (RFC 9002
// §6.2.1, §6.2.2, variance = initial RTT / 2). On a path whose round trip reaches it, the
// client's Initial is retransmitted while the server's answer is in flight; the extra
// bytes raise the server's anti-amplification budget and qlogana sees a retransmission, so
// the handshake's cause (amplification, loss or 1-RTT) is a race, not ground truth.
const clientFirstPTO = 300 * time.Millisecond

// minTimedRTT is the shortest path the test takes causes from: qlogana tells flights
// apart by gaps of half an RTT, and on this shared 2-core machine scheduling delays of a
// loaded CPU reach several milliseconds, so on a 5 ms path a stall can hide in the noise
// (observed: an amplification stall on 198.19.1.47 read as 1-RTT, RTT samples of 19 ms).
const minTimedRTT = 20 * time.Millisecond

// reportPorts are the DoQ ports zprobe scans and verify tries, in the report's
// preference order (load.PORT_PREFERENCE: a resolver counts under its first verified one).
var reportPorts = []uint16{853, 784, 8853}

// TestReportFromPipeline runs the pipeline (zprobe scan, verify, conncheck, measure over
// every protocol) on a reduced target set of the simulated internet into a fresh database,
// executes both notebooks headless with the report command, and checks the numbers the
// report plots, computed by the analysis package's load functions, against the ground
// truth of the population for exactly the targets scanned: DoQ-verified resolvers per
// DoQ/QUIC version pair (Fig. 1), port shares (784/853/8853), and the DoQ handshakes by
// cause and by round-trip class (1-RTT, Version Negotiation, Retry, amplification stall;
// population.HandshakeRTTs) per phase.
func TestReportFromPipeline(t *testing.T) {
	e := setup(t)
	root := repoRoot(t)
	python := testsupport.ReportPython(t, "", "notebooks")

	targets, addrs := reportTargets(t, e.pop)
	t.Logf("targets %s (%d addresses)", strings.Join(targets, ","), len(addrs))

	// The pipeline, as scripts/demo.sh runs it, on the reduced targets. A fixed --seed
	// fixes zmap's permutation of this small target set: Debian's zmap 2.1.1 aborts on
	// some permutations of one (docs/zprobe.md, "Tiny target sets").
	e.run(t, 0, "zprobe", "scan", "--vantage", reportVantage, "--label", reportLabel, "--week", reportWeek,
		"--testbed", e.pop.Prefix.String(), "--targets", strings.Join(targets, ","), "--rate", "3000",
		"--cooldown", "2", "--seed", "1", "--out", t.TempDir())
	verifyArgs := []string{"--vantage", reportVantage, "--label", reportLabel, "--scan-label", reportLabel, "--week", reportWeek}
	state := testbed.StateDir(root, e.v.Instance)
	if roots := filepath.Join(state, "pki", "roots.pem"); exists(roots) {
		verifyArgs = append(verifyArgs, "--roots", roots)
	}
	if city, asn := filepath.Join(state, "geoip", "GeoLite2-City.mmdb"), filepath.Join(state, "geoip", "GeoLite2-ASN.mmdb"); exists(city) && exists(asn) {
		verifyArgs = append(verifyArgs, "--geoip-city", city, "--geoip-asn", asn)
	}
	if sni := sniNames(e.pop, addrs); len(sni) > 0 {
		verifyArgs = append(verifyArgs, "--sni-names", strings.Join(sni, ","))
	}
	e.run(t, 0, "verify", verifyArgs...)
	// The weekly connection check of a sample of the verified resolvers (the special
	// classes' Retry, token and amplification behaviours among them), cut short: one idle
	// wait, four queries, two Initial sizes with one key share.
	e.run(t, 0, "conncheck", "--vantage", reportVantage, "--label", reportLabel, "--week", reportWeek,
		"--sample", "12", "--protocols", "doq,dot", "--idle-waits", "1s", "--max-queries", "4",
		"--initial-sizes", "1200,1452", "--key-shares", "x25519", "--timeout", "3s")
	e.run(t, 0, "measure", "--vantage", reportVantage, "--label", reportLabel, "--run-label", reportLabel, "--concurrency", "32")
	// The identity tables (QUIC libraries, DDR, connection policies, amplification) have
	// rows, so the comparison of the report from the release below covers their figures.
	for _, tb := range []string{"quic_stacks", "ddr_queries", "ddr_designations", "connection_policies", "amplification_probes"} {
		n := e.count(t, "SELECT count(*) FROM "+tb)
		t.Logf("%s: %d rows", tb, n)
		if n == 0 {
			t.Errorf("the pipeline stored no %s rows: the report's comparison does not cover them", tb)
		}
	}

	// The report: both notebooks, headless.
	out := t.TempDir()
	folder, sum := testsupport.RunReport(t, python, e.url, out)
	checkSummary(t, folder, sum, []string{"adoption", "response_times"}, []string{"fig1_doq_quic_versions_per_week",
		"port_shares", "fig2_world_map", "fig3a_resolve_rtt_" + reportVantage, "fig3b_handshake_ratio_" + reportVantage})

	// The same report from the pipeline's data release (dataset export's Parquet files,
	// aggregated on DuckDB) writes the same CSV tables: every figure's numbers.
	rel := t.TempDir()
	if _, err := release.Run(context.Background(), e.s, release.Config{Dir: rel}); err != nil {
		t.Fatalf("export: %v", err)
	}
	lakeFolder, lakeSum := testsupport.RunReport(t, python, e.url, t.TempDir(), "--source", rel)
	if !lakeSum.OK {
		t.Fatalf("the report from the release failed: %+v", lakeSum.Notebooks)
	}
	for _, csv := range []string{"quic_libraries", "ddr_queries", "ddr_endpoints", "connection_policies", "amplification_cells"} {
		if rows := csvRows(t, filepath.Join(lakeFolder, "figures", csv+".csv")); rows == 0 {
			t.Errorf("the report from the release wrote no rows into %s.csv", csv)
		}
	}
	compare := exec.Command(python, "-m", "doqscan_analysis.compare", folder, lakeFolder)
	compare.Dir = root
	if o, err := compare.CombinedOutput(); err != nil {
		t.Errorf("the report from the release differs from the report from PostgreSQL: %v\n%s", err, testsupport.Tail(string(o), 20))
	} else {
		t.Logf("report from the release: %s", strings.TrimSpace(string(o)))
	}

	// The numbers behind the figures, from the package's load functions.
	cmd := exec.Command(python, filepath.Join("internal", "ops", "e2e", "testdata", "report_numbers.py"))
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "DOQSCAN_REPORT_DB="+e.url)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("report_numbers.py: %v\n%s", err, testsupport.Tail(stderr.String(), 30))
	}
	var got reportNumbers
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("report_numbers.py output: %v\n%s", err, raw)
	}

	want := expectReport(t, e.pop, addrs)
	t.Logf("ground truth: %d DoQ-verified resolvers, %d verified (address, port) pairs; report folder %s",
		want.total, want.endpoints, folder)
	checkPairs(t, got, want)
	checkPorts(t, got, want)
	checkCauses(t, got, want)
	checkRatios(t, got, want)
	if t.Failed() {
		explainDoQ(t, e)
	}
}

// explainDoQ logs the DoQ handshakes whose stored cause differs from the population's,
// or whose handshake-to-RTT ratio is below the round trips it needs, one line each: which endpoints a failed count is about.
func explainDoQ(t *testing.T, e *env) {
	t.Helper()
	rows, err := e.s.Pool.Query(context.Background(), `
		WITH rtt AS (SELECT address, port, percentile_cont(0.5) WITHIN GROUP (ORDER BY rtt_ns) AS rtt_ns
		               FROM rtt_samples WHERE status = 'ok' AND rtt_ns > 0 AND transport = 'quic' GROUP BY 1, 2)
		SELECT m.address, m.port, m.phase, ha.cause, ha.round_trips, m.handshake_ns, rtt.rtt_ns
		  FROM measurements m JOIN handshake_analyses ha USING (measurement_id)
		  LEFT JOIN rtt USING (address, port)
		 WHERE m.protocol = 'doq' AND m.status = 'ok' ORDER BY 1, 2, 3`)
	if err != nil {
		t.Errorf("explain: %v", err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var (
			addr         netip.Addr
			port         int32
			phase, cause string
			trips        int16
			hs           int64
			rtt          *float64
		)
		if err := rows.Scan(&addr, &port, &phase, &cause, &trips, &hs, &rtt); err != nil {
			t.Errorf("explain: %v", err)
			return
		}
		wantCause, wantTrips := expectCause(t, e.pop, addr, uint16(port), phase)
		ratio := math.NaN()
		if rtt != nil {
			ratio = float64(hs) / *rtt
		}
		if cause != wantCause || math.IsNaN(ratio) || min(max(int(math.Round(ratio)), 1), reportMaxClass) < min(wantTrips, reportMaxClass) {
			r := e.pop.Lookup(addr)
			t.Logf("  %s:%d %s (%s, path %v): cause %s (want %s), qlog round trips %d, handshake %.1f ms / RTT %.1f ms = %.2f (want %d)",
				addr, port, phase, r.Class, e.pop.PathOf(addr).RTT, cause, wantCause, trips, float64(hs)/1e6, deref(rtt)/1e6, ratio, wantTrips)
		}
	}
}

func deref(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// reportTargets returns the scanned prefixes (the special classes on loss- and
// jitter-free paths from minTimedRTT to clientFirstPTO, as the population's records, and the bulk DoQ /26 with the most
// DoQ-verified endpoints) and every address they cover. Lossy paths are left out: what
// is found there is chance, not ground truth.
func reportTargets(t *testing.T, pop *population.Population) ([]string, []netip.Addr) {
	t.Helper()
	var prefixes []netip.Prefix
	for a := reportSpecial.Addr(); reportSpecial.Contains(a); a = a.Next() {
		r := pop.Lookup(a)
		if r == nil || r.Prefix.Addr() != a || !quietFast(pop, r.Prefix) {
			continue
		}
		prefixes = append(prefixes, r.Prefix)
	}
	if len(prefixes) == 0 {
		t.Fatalf("the population has no quiet records in %s", reportSpecial)
	}
	score := map[netip.Prefix]int{}
	for _, r := range pop.ByClass(reportBulkClass) {
		p := netip.PrefixFrom(r.Prefix.Addr(), reportBulkBits).Masked()
		for a := range r.Addrs {
			for _, port := range reportPorts {
				if pop.ExpectVerify(a, port).Class == population.OutcomeDoQVerified {
					score[p]++
				}
			}
		}
	}
	var bulk netip.Prefix
	for _, p := range slices.SortedFunc(maps.Keys(score), func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) }) {
		if quietFast(pop, p) && (!bulk.IsValid() || score[p] > score[bulk]) {
			bulk = p
		}
	}
	if !bulk.IsValid() {
		t.Fatalf("the population has no quiet /%d of class %s", reportBulkBits, reportBulkClass)
	}
	prefixes = append(prefixes, bulk)
	var names []string
	var addrs []netip.Addr
	for _, p := range prefixes {
		names = append(names, p.String())
		for a := p.Addr(); p.Contains(a); a = a.Next() {
			addrs = append(addrs, a)
		}
	}
	return names, addrs
}

// quietFast: quiet (no loss, jitter or peer) and every path at least minTimedRTT and
// shorter than clientFirstPTO.
func quietFast(pop *population.Population, p netip.Prefix) bool {
	for a := p.Addr(); p.Contains(a); a = a.Next() {
		if rtt := pop.PathOf(a).RTT; rtt < minTimedRTT || rtt >= clientFirstPTO {
			return false
		}
	}
	return quiet(pop, p)
}

// sniNames are the server names the targets require (verify retries with them).
func sniNames(pop *population.Population, addrs []netip.Addr) []string {
	set := map[string]bool{}
	for _, a := range addrs {
		if r := pop.Lookup(a); r != nil && r.SNI != "" {
			set[r.SNI] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// reportNumbers is report_numbers.py's output.
type reportNumbers struct {
	Pairs []struct {
		Week        string `json:"week"`
		ALPN        string `json:"alpn"`
		QUICVersion uint32 `json:"quic_version"`
		Resolvers   int    `json:"resolvers"`
		Pair        string `json:"pair"`
	} `json:"pairs"`
	Ports []struct {
		Week      string  `json:"week"`
		Port      uint16  `json:"port"`
		Resolvers int     `json:"resolvers"`
		Total     int     `json:"total"`
		Share     float64 `json:"share"`
	} `json:"ports"`
	Causes []struct {
		Vantage    string `json:"vantage"`
		Phase      string `json:"phase"`
		Mode       string `json:"mode"`
		KeyShare   string `json:"key_share"`
		Cause      string `json:"cause"`
		Handshakes int    `json:"handshakes"`
	} `json:"causes"`
	Ratios []struct {
		Vantage      string `json:"vantage"`
		Phase        string `json:"phase"`
		Mode         string `json:"mode"`
		RoundTrips   int    `json:"round_trips"`
		Measurements int    `json:"measurements"`
	} `json:"ratios"`
}

// reportTruth is what the population says the report must show for the targets.
type reportTruth struct {
	pairs     map[pairKey]int              // resolvers per (ALPN, QUIC version) of the preferred port
	ports     map[uint16]int               // resolvers verified on each port
	total     int                          // DoQ-verified resolvers (addresses)
	endpoints int                          // DoQ-verified (address, port) pairs: what measure measures
	causes    map[string]map[string]int    // phase -> cause -> handshakes
	trips     map[string]map[int]int       // phase -> round-trip class -> handshakes
	example   map[string]map[string]string // phase -> cause -> one endpoint, for messages
}

type pairKey struct {
	alpn    string
	version uint32
}

// reportMaxClass is load.ratio_classes' last class (everything above is folded into it).
const reportMaxClass = 5

func expectReport(t *testing.T, pop *population.Population, addrs []netip.Addr) reportTruth {
	t.Helper()
	w := reportTruth{pairs: map[pairKey]int{}, ports: map[uint16]int{}, causes: map[string]map[string]int{},
		trips: map[string]map[int]int{}, example: map[string]map[string]string{}}
	for _, ph := range []string{population.PhaseWarmup, population.PhaseMeasured} {
		w.causes[ph], w.trips[ph], w.example[ph] = map[string]int{}, map[int]int{}, map[string]string{}
	}
	// What verify contacts: every target on the scanned ports, and the DoQ endpoints the
	// targets' plain DNS designates (DDR), on whatever port; each address's ports in the
	// report's preference order (reportPorts, then the others by number).
	endpoints := map[netip.Addr][]uint16{}
	for _, a := range addrs {
		endpoints[a] = slices.Clone(reportPorts)
	}
	targets := map[netip.Addr]bool{}
	for _, a := range addrs {
		targets[a] = true
	}
	for _, d := range pop.DDREndpoints() {
		if targets[d.Resolver] && !slices.Contains(endpoints[d.Addr], d.Port) {
			endpoints[d.Addr] = append(endpoints[d.Addr], d.Port)
		}
	}
	for _, ports := range endpoints {
		slices.SortFunc(ports, func(x, y uint16) int { return cmp.Compare(portRank(x), portRank(y)) })
	}
	for _, a := range slices.SortedFunc(maps.Keys(endpoints), netip.Addr.Compare) {
		preferred := false
		for _, port := range endpoints[a] {
			v := pop.ExpectVerify(a, port)
			if v.Class != population.OutcomeDoQVerified {
				continue
			}
			w.endpoints++
			w.ports[port]++
			if !preferred {
				preferred = true
				w.total++
				n, ok := quicver.Lookup(v.Version)
				if !ok {
					t.Fatalf("%s:%d: unknown QUIC version %q", a, port, v.Version)
				}
				w.pairs[pairKey{v.ALPN, n}]++
			}
			for ph := range w.causes {
				cause, trips := expectCause(t, pop, a, port, ph)
				w.causes[ph][cause]++
				w.trips[ph][min(max(trips, 1), reportMaxClass)]++
				if _, ok := w.example[ph][cause]; !ok {
					w.example[ph][cause] = fmt.Sprintf("%s:%d", a, port)
				}
			}
		}
	}
	if w.total == 0 {
		t.Fatal("the targets hold no DoQ-verified resolver: nothing to check")
	}
	return w
}

// portRank orders ports as the report prefers them: reportPorts first, then by number.
func portRank(p uint16) int {
	if i := slices.Index(reportPorts, p); i >= 0 {
		return i - len(reportPorts)
	}
	return int(p)
}

// expectCause is the cause handshake_analyses must give the fresh-mode x25519 DoQ
// handshake to (a, port) in phase, and its round trips, from the population's rules
// (population.HandshakeRTTs, which it must agree with).
func expectCause(t *testing.T, pop *population.Population, a netip.Addr, port uint16, phase string) (string, int) {
	t.Helper()
	r := pop.Lookup(a)
	v := pop.ExpectVerify(a, port)
	var causes []string
	if phase == population.PhaseWarmup && v.NeedsVN {
		causes = append(causes, "version-negotiation")
	}
	tokenValid := phase == population.PhaseMeasured && r.Token == population.TokenHonour
	validated := tokenValid
	if r.Retry && !tokenValid {
		causes = append(causes, "retry")
		validated = true
	}
	if !validated && pop.Certs[r.Cert].ExceedsAmplification(population.ClientX25519) {
		causes = append(causes, "amplification")
	}
	trips, ok := pop.HandshakeRTTs(a, port, population.ProtoDoQ, phase, population.ClientX25519)
	if !ok || trips != 1+len(causes) {
		t.Fatalf("%s:%d %s: causes %v disagree with population.HandshakeRTTs (%d, %v)", a, port, phase, causes, trips, ok)
	}
	switch len(causes) {
	case 0:
		return "1rtt", trips
	case 1:
		return causes[0], trips
	}
	return "multiple", trips
}

func checkPairs(t *testing.T, got reportNumbers, w reportTruth) {
	t.Helper()
	g := map[pairKey]int{}
	for _, p := range got.Pairs {
		g[pairKey{p.ALPN, p.QUICVersion}] += p.Resolvers
		t.Logf("Fig. 1: %s %-28s %d resolvers (want %d)", p.Week, p.Pair, p.Resolvers, w.pairs[pairKey{p.ALPN, p.QUICVersion}])
	}
	for _, k := range slices.SortedFunc(maps.Keys(union(g, w.pairs)), func(a, b pairKey) int {
		return cmp.Or(strings.Compare(a.alpn, b.alpn), cmp.Compare(a.version, b.version))
	}) {
		if g[k] != w.pairs[k] {
			t.Errorf("DoQ-verified resolvers with %s / QUIC 0x%08x: report %d, population %d", k.alpn, k.version, g[k], w.pairs[k])
		}
	}
}

func checkPorts(t *testing.T, got reportNumbers, w reportTruth) {
	t.Helper()
	g := map[uint16]int{}
	for _, p := range got.Ports {
		g[p.Port] = p.Resolvers
		share := float64(w.ports[p.Port]) / float64(w.total)
		t.Logf("port %d: %d of %d resolvers, share %.3f (want %d of %d, %.3f)", p.Port, p.Resolvers, p.Total, p.Share,
			w.ports[p.Port], w.total, share)
		if p.Total != w.total {
			t.Errorf("port shares: total %d DoQ-verified resolvers, population %d", p.Total, w.total)
		}
		if math.Abs(p.Share-share) > 1e-9 {
			t.Errorf("port %d share %.4f, population %.4f", p.Port, p.Share, share)
		}
	}
	for _, port := range reportPorts {
		if g[port] != w.ports[port] {
			t.Errorf("resolvers verified on port %d: report %d, population %d", port, g[port], w.ports[port])
		}
	}
}

func checkCauses(t *testing.T, got reportNumbers, w reportTruth) {
	t.Helper()
	g := map[string]map[string]int{}
	for _, c := range got.Causes {
		if c.Vantage != reportVantage || c.Mode != "fresh" || c.KeyShare != population.ClientX25519.Name {
			t.Errorf("DoQ handshakes of an unexpected kind: %+v", c)
			continue
		}
		if g[c.Phase] == nil {
			g[c.Phase] = map[string]int{}
		}
		g[c.Phase][c.Cause] += c.Handshakes
	}
	for ph, want := range w.causes {
		t.Logf("DoQ handshakes by cause, %s: report %v, population %v", ph, g[ph], want)
		for _, cause := range slices.Sorted(maps.Keys(union(g[ph], want))) {
			if g[ph][cause] != want[cause] {
				t.Errorf("%s DoQ handshakes with cause %s: report %d, population %d (e.g. %s)", ph, cause, g[ph][cause], want[cause], w.example[ph][cause])
			}
		}
	}
}

// checkRatios checks Fig. 3b's DoQ round-trip classes (handshake time over the path's
// RTT, rounded). They are timings, not counts of flights: on this shared machine a loaded
// CPU adds milliseconds to a handshake (a 1-RTT handshake on a 5 ms path can show a ratio
// of 2), while nothing makes it take fewer round trips than the protocol needs. So every
// handshake is counted, and for every k at least as many handshakes are in classes >= k
// as the population has handshakes of >= k round trips (a missed Retry or amplification
// stall moves handshakes down and fails). The causes (checkCauses) are the exact check.
func checkRatios(t *testing.T, got reportNumbers, w reportTruth) {
	t.Helper()
	g := map[string]map[int]int{}
	for _, r := range got.Ratios {
		if g[r.Phase] == nil {
			g[r.Phase] = map[int]int{}
		}
		g[r.Phase][r.RoundTrips] += r.Measurements
	}
	for ph, want := range w.trips {
		exact := 0
		for k, n := range want {
			exact += min(n, g[ph][k])
		}
		t.Logf("DoQ handshake/RTT classes, %s: report %v, population %v (%d of %d in the population's class)",
			ph, g[ph], want, exact, w.endpoints)
		for k := 1; k <= reportMaxClass; k++ {
			var gk, wk int
			for c := k; c <= reportMaxClass; c++ {
				gk += g[ph][c]
				wk += want[c]
			}
			switch {
			case k == 1 && gk != wk:
				t.Errorf("%s: %d DoQ handshakes with a handshake/RTT ratio in the report, population %d", ph, gk, wk)
			case gk < wk:
				t.Errorf("%s: %d DoQ handshakes of >= %d round trips in the report, population %d (stalls missed?)", ph, gk, k, wk)
			}
		}
	}
}

// checkSummary checks the report's summary: the notebooks ran without error and the
// figures were written (PNG and SVG, non-empty) in the report's folder.
// csvRows counts the data rows of a CSV table the report wrote (0: none, or no file).
func csvRows(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("%v", err)
		return 0
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return len(lines) - 1
}

func checkSummary(t *testing.T, folder string, s testsupport.ReportSummary, notebooks, figures []string) {
	t.Helper()
	for _, nb := range notebooks {
		r, ok := s.Notebooks[nb]
		switch {
		case !ok:
			t.Errorf("notebook %s was not executed", nb)
		case r.Error != nil:
			t.Errorf("notebook %s failed: %s", nb, testsupport.Tail(*r.Error, 20))
		default:
			t.Logf("notebook %s: %.1f s", nb, r.Seconds)
		}
		if !exists(filepath.Join(folder, nb+".html")) {
			t.Errorf("no %s.html in the report", nb)
		}
	}
	if !s.OK {
		t.Error("summary.json: ok is false")
	}
	for _, f := range figures {
		for _, ext := range []string{".png", ".svg"} {
			st, err := os.Stat(filepath.Join(folder, "figures", f+ext))
			if err != nil || st.Size() == 0 {
				t.Errorf("figure %s%s missing or empty (figures: %v)", f, ext, s.Figures)
			}
		}
	}
	t.Logf("report: %d figures in %s", len(s.Figures), folder)
}

func union[K comparable, V any](a, b map[K]V) map[K]bool {
	u := map[K]bool{}
	for k := range a {
		u[k] = true
	}
	for k := range b {
		u[k] = true
	}
	return u
}
