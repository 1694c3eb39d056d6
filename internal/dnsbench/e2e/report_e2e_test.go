package e2e_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/doqscan/doqscan/internal/dnsbench"
	"github.com/doqscan/doqscan/internal/store/storetest"
	"github.com/doqscan/doqscan/internal/testsupport"
)

// table is a CSV table the report wrote beside its figures: its header and its rows,
// addressed by column name.
type table struct {
	header []string
	rows   [][]string
}

func (tb table) col(t *testing.T, name string) int {
	t.Helper()
	i := slices.Index(tb.header, name)
	if i < 0 {
		t.Fatalf("the table has no column %q (header %q)", name, tb.header)
	}
	return i
}

// num is the number in row r's column name (NaN for an empty cell).
func (tb table) num(t *testing.T, r int, name string) float64 {
	t.Helper()
	v, err := testsupport.Cell(tb.rows[r][tb.col(t, name)])
	if err != nil {
		t.Fatalf("row %d column %q: %v", r, name, err)
	}
	return v
}

// row is the index of the row whose target column is target.
func (tb table) row(t *testing.T, target string) int {
	t.Helper()
	c := tb.col(t, "target")
	for i, r := range tb.rows {
		if r[c] == target {
			return i
		}
	}
	t.Fatalf("no row for %s in %q", target, tb.rows)
	return -1
}

// benchReport stores the reports in a fresh database as dnsbench --store does
// (dnsbench.Save), executes notebooks/benchmarks.ipynb against it with the report
// command (./dev report --notebooks benchmarks) and returns the tables it wrote
// (figures/<name>.csv) and the report's folder. It skips when the project's .venv lacks
// the report's packages (./dev install creates it).
func benchReport(t *testing.T, rs []*dnsbench.Report) (map[string]table, string) {
	t.Helper()
	python := testsupport.ReportPython(t, "", "report's notebook")
	s, url := storetest.OpenURL(t)
	ctx := context.Background()
	for _, r := range rs {
		if _, err := dnsbench.Save(ctx, s, r); err != nil {
			s.Close()
			t.Fatal(err)
		}
	}
	s.Close()
	folder, sum := testsupport.RunReport(t, python, url, t.TempDir(), "--notebooks", "benchmarks")
	switch nb, ok := sum.Notebooks["benchmarks"]; {
	case !ok:
		t.Fatal("the report did not execute the benchmarks notebook")
	case nb.Error != nil:
		t.Fatalf("the benchmarks notebook failed: %s", *nb.Error)
	}
	csvs, _ := filepath.Glob(filepath.Join(folder, "figures", "*.csv"))
	tables := map[string]table{}
	for _, p := range csvs {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		recs, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
		if err != nil || len(recs) == 0 {
			t.Fatalf("%s: %v (%d records)", p, err, len(recs))
		}
		tables[strings.TrimSuffix(filepath.Base(p), ".csv")] = table{header: recs[0], rows: recs[1:]}
	}
	return tables, folder
}

// checkPNG fails the test unless the report holds figures/<name>.png, a PNG file.
func checkPNG(t *testing.T, folder, name string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(folder, "figures", name+".png"))
	if err != nil {
		t.Fatalf("figure %s: %v", name, err)
	}
	if !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("figure %s is not a PNG file", name)
	}
}

// near reports whether a table's number is the report's (the CSV holds Python's
// shortest repr of the stored double).
func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// checkSweepReport runs the report on the stored sweep and checks its three tables
// against the sweep's reports (one row per target in the sweep's order, one column per
// level, the stored numbers) and the protocols' ordering as the report shows it: DoUDP's
// success falls with the loss, DoT and DoQ retransmit and stay clearly above it at the
// highest level, their mean latency rising; and that the figure was written.
func checkSweepReport(t *testing.T, rs []*dnsbench.Report, levels []float64) {
	t.Helper()
	tables, folder := benchReport(t, rs)
	var targets []string
	for _, r := range rs {
		if !slices.Contains(targets, r.Target) {
			targets = append(targets, r.Target)
		}
	}
	metrics := map[string]func(*dnsbench.Report) float64{
		"qps":          func(r *dnsbench.Report) float64 { return r.QPS },
		"success_rate": func(r *dnsbench.Report) float64 { return r.SuccessRate },
		"latency_mean_ms": func(r *dnsbench.Report) float64 {
			if r.Answered == 0 {
				return math.NaN()
			}
			return r.Latency.Mean
		},
	}
	for metric, get := range metrics {
		tb, ok := tables["loss_sweep_"+metric]
		if !ok {
			t.Fatalf("the report has no loss_sweep_%s table (tables: %v)", metric, slices.Sorted(maps.Keys(tables)))
		}
		header := []string{"server", "target", "protocol", "policy"}
		for _, l := range levels {
			header = append(header, csvLoss(l, metric))
		}
		if !slices.Equal(tb.header, header) {
			t.Fatalf("loss_sweep_%s: header %q, want %q", metric, tb.header, header)
		}
		if got := tb.rows; len(got) != len(targets) {
			t.Fatalf("loss_sweep_%s: %d rows, want one per target (%d)", metric, len(got), len(targets))
		}
		for i, target := range targets {
			if got := tb.rows[i][tb.col(t, "target")]; got != target {
				t.Errorf("loss_sweep_%s row %d: %s, want %s (the sweep's order)", metric, i, got, target)
			}
			if srv := tb.rows[i][tb.col(t, "server")]; !strings.HasPrefix(srv, "dnsproxy ") {
				t.Errorf("loss_sweep_%s row %d: server %q, want dnsproxy named from the population", metric, i, srv)
			}
		}
		for _, r := range rs {
			got, want := tb.num(t, tb.row(t, r.Target), csvLoss(*r.PathLoss, metric)), get(r)
			if !(near(got, want) || math.IsNaN(got) && math.IsNaN(want)) {
				t.Errorf("loss_sweep_%s %s at %s: %v, stored %v", metric, r.Target, dnsbench.FormatLoss(*r.PathLoss), got, want)
			}
		}
	}
	succ, lat := tables["loss_sweep_success_rate"], tables["loss_sweep_latency_mean_ms"]
	var udp string
	for _, target := range targets {
		if strings.HasPrefix(target, "doudp://") {
			udp = target
		}
	}
	lo, hi := levels[0], levels[len(levels)-1]
	u := succ.row(t, udp)
	for i := 1; i < len(levels); i++ {
		if prev, cur := succ.num(t, u, csvLoss(levels[i-1], "success_rate")), succ.num(t, u, csvLoss(levels[i], "success_rate")); !(cur < prev) {
			t.Errorf("report: DoUDP success %v at %s, not below %v at %s", cur, dnsbench.FormatLoss(levels[i]),
				prev, dnsbench.FormatLoss(levels[i-1]))
		}
	}
	for _, target := range targets {
		if target == udp {
			continue
		}
		r := succ.row(t, target)
		if s, us := succ.num(t, r, csvLoss(hi, "success_rate")), succ.num(t, u, csvLoss(hi, "success_rate")); !(s > us+0.15) {
			t.Errorf("report: %s success %v at %s, not clearly above DoUDP's %v (retransmission)", target, s, dnsbench.FormatLoss(hi), us)
		}
		if a, b := lat.num(t, lat.row(t, target), csvLoss(hi, "latency_mean_ms")), lat.num(t, lat.row(t, target), csvLoss(lo, "latency_mean_ms")); !(a > b) {
			t.Errorf("report: %s mean latency %v ms at %s, not above %v ms at %s", target, a, dnsbench.FormatLoss(hi), b, dnsbench.FormatLoss(lo))
		}
	}
	checkPNG(t, folder, "loss_sweep")
	t.Logf("report %s: success rate table %q %q", folder, succ.header, succ.rows)
}

// csvLoss is the report's CSV column of loss level l in the table of metric (its one
// header style, the values' unit last: 0.5 % in loss_sweep_latency_mean_ms is
// loss_0_5pct_ms).
func csvLoss(l float64, metric string) string {
	unit := map[string]string{"qps": "qps", "latency_mean_ms": "ms", "success_rate": "rate"}[metric]
	return "loss_" + strings.ReplaceAll(strings.TrimSuffix(dnsbench.FormatLoss(l), "%"), ".", "_") + "pct_" + unit
}

// checkReuseReport runs the report on the stored policy comparison and checks its
// connection-reuse table against the reports (one row per target, the total latency's
// mean and p50 and the success rate per policy) and the ordering it must show: a new
// session costs more than a persistent one, and DoQ's 0-RTT less than a new session.
func checkReuseReport(t *testing.T, rs []*dnsbench.Report) {
	t.Helper()
	tables, folder := benchReport(t, rs)
	tb, ok := tables["connection_reuse"]
	if !ok {
		t.Fatalf("the report has no connection_reuse table (tables: %v)", slices.Sorted(maps.Keys(tables)))
	}
	var targets, policies []string
	for _, r := range rs {
		if !slices.Contains(targets, r.Target) {
			targets = append(targets, r.Target)
		}
		if !slices.Contains(policies, r.Policy) {
			policies = append(policies, r.Policy)
		}
	}
	header := []string{"server", "target", "protocol"}
	for _, p := range policies {
		header = append(header, p+"_mean_ms", p+"_p50_ms", p+"_success")
	}
	if !slices.Equal(tb.header, header) || len(tb.rows) != len(targets) {
		t.Fatalf("connection_reuse: header %q with %d rows, want %q with %d", tb.header, len(tb.rows), header, len(targets))
	}
	for _, r := range rs {
		i := tb.row(t, r.Target)
		for col, want := range map[string]float64{"_mean_ms": r.Total.Mean, "_p50_ms": r.Total.P50, "_success": r.SuccessRate} {
			if got := tb.num(t, i, r.Policy+col); !near(got, want) {
				t.Errorf("connection_reuse %s %s%s: %v, stored %v", r.Target, r.Policy, col, got, want)
			}
		}
	}
	for _, target := range targets {
		i := tb.row(t, target)
		if f, p := tb.num(t, i, "fresh_p50_ms"), tb.num(t, i, "persistent_p50_ms"); !(f > p) {
			t.Errorf("report: %s new session p50 %v ms, not above persistent %v ms", target, f, p)
		}
		if strings.HasPrefix(target, "doq://") {
			if z, f := tb.num(t, i, "0rtt_p50_ms"), tb.num(t, i, "fresh_p50_ms"); !(z < f) {
				t.Errorf("report: %s 0-RTT p50 %v ms, not below a new session's %v ms", target, z, f)
			}
		}
	}
	t.Logf("report %s: connection reuse %q %q", folder, tb.header, tb.rows)
}
