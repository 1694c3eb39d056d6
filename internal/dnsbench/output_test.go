package dnsbench_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/dnsbench"
	"github.com/doqscan/doqscan/internal/home"
	"github.com/doqscan/doqscan/internal/measure/measuretest"
)

// TestReportsOnStdout: --json prints one JSON object per target (JSON lines, the
// histogram included); the text report shows the resolve-time histogram; and
// --histogram-csv writes every report's bins, whose counts add up to its answers.
func TestReportsOnStdout(t *testing.T) {
	s := measuretest.Start(t, measuretest.Config{Host: "127.0.0.5"})
	dir := t.TempDir()
	run := func(asJSON bool, csvPath string) string {
		var out bytes.Buffer
		o := dnsbench.Options{Config: dnsbench.Config{Workers: 2, Count: 40, Timeout: 3 * time.Second},
			Args: []string{"doudp://" + s.UDP.String(), "dot://" + s.DoT.String()}, JSON: asJSON, HistogramCSV: csvPath, Out: &out}
		if err := dnsbench.Command(context.Background(), o, nil); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	out := run(true, "")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	rs, err := dnsbench.ReadJSON(strings.NewReader(out))
	if err != nil || len(lines) != 2 || len(rs) != 2 {
		t.Fatalf("--json: %d lines, %d reports (%v); want one line per target:\n%s", len(lines), len(rs), err, out)
	}
	for _, r := range rs {
		var n int64
		for _, b := range r.Histogram {
			n += b.Count
		}
		if r.Answered != 40 || n != r.Answered || len(r.TotalHistogram) == 0 {
			t.Errorf("%s: answered %d, histogram holds %d", r.Target, r.Answered, n)
		}
	}

	csvPath := filepath.Join(dir, "h.csv")
	text := run(false, csvPath)
	if strings.Count(text, "resolve time histogram:") != 2 || !strings.Contains(text, "#") {
		t.Errorf("text report without the histogram:\n%s", text)
	}
	f, err := os.Open(csvPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil || len(rows) < 3 || strings.Join(rows[0], ",") != strings.Join(dnsbench.HistogramColumns, ",") {
		t.Fatalf("CSV: %v %v", rows, err)
	}
	counts := map[string]int64{}
	for _, row := range rows[1:] {
		n, err := strconv.ParseInt(row[13], 10, 64)
		if err != nil {
			t.Fatalf("row %q: %v", row, err)
		}
		counts[row[0]+" "+row[10]] += n
	}
	for _, k := range []string{"doudp://" + s.UDP.String() + " resolve", "dot://" + s.DoT.String() + " total"} {
		if counts[k] != 40 {
			t.Errorf("CSV %s: %d queries, want 40 (%v)", k, counts[k], counts)
		}
	}
}

// TestPlot: --plot draws the histograms into a PNG with the project's Python; without
// it, a missing prerequisite (exit 5) that says how to get it.
func TestPlot(t *testing.T) {
	s := measuretest.Start(t, measuretest.Config{Host: "127.0.0.6"})
	png := filepath.Join(t.TempDir(), "lat.png")
	o := dnsbench.Options{Config: dnsbench.Config{Workers: 1, Count: 20, Timeout: 3 * time.Second},
		Args: []string{"doudp://" + s.UDP.String()}, Plot: png, Out: &bytes.Buffer{}}
	err := dnsbench.Command(context.Background(), o, nil)
	if _, statErr := os.Stat(home.Path(".venv", "bin", "python")); statErr != nil {
		if cli.ExitCode(err) != cli.ExitEnvironment || !strings.Contains(err.Error(), "./dev install") {
			t.Fatalf("without the project's Python: %v (exit %d), want exit 5 naming ./dev install", err, cli.ExitCode(err))
		}
		t.Skipf("SKIP: the PNG needs the project's Python (%v: ./dev install); the missing-prerequisite error was checked", statErr)
	}
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(png)
	if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("%s: %d bytes, %v; want a PNG", png, len(b), err)
	}
}
