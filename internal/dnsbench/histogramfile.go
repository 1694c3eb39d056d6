package dnsbench

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/home"
)

// HistogramColumns are the columns of the histogram CSV (--histogram-csv): one row per
// non-empty bin of a report's resolve time (metric "resolve") or total time ("total"),
// BinsPerOctave bins per power of two; share is the bin's share of the report's answered
// queries, cumulative the share up to the bin's end.
var HistogramColumns = []string{"target", "protocol", "variant", "address", "policy", "load", "workers", "streams", "label",
	"path_loss", "metric", "lo_ms", "hi_ms", "count", "share", "cumulative"}

// WriteHistogramCSV writes the histograms of rs as CSV (HistogramColumns).
func WriteHistogramCSV(w io.Writer, rs []*Report) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(HistogramColumns); err != nil {
		return err
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	for _, r := range rs {
		loss := ""
		if r.PathLoss != nil {
			loss = f(*r.PathLoss)
		}
		for _, m := range []struct {
			name string
			bins []Bin
		}{{"resolve", r.Histogram}, {"total", r.TotalHistogram}} {
			var n, seen int64
			for _, b := range m.bins {
				n += b.Count
			}
			for _, b := range m.bins {
				seen += b.Count
				if err := cw.Write([]string{r.Target, r.Protocol, r.Variant, r.Address, r.Policy, r.Load, strconv.Itoa(r.Workers),
					strconv.Itoa(r.Streams), r.Label, loss, m.name, f(b.LoMs), f(b.HiMs), strconv.FormatInt(b.Count, 10),
					f(float64(b.Count) / float64(n)), f(float64(seen) / float64(n))}); err != nil {
					return err
				}
			}
		}
	}
	cw.Flush()
	return cw.Error()
}

// writeHistogramFile writes the histogram CSV of rs to path.
func writeHistogramFile(path string, rs []*Report) error {
	var b bytes.Buffer
	if err := WriteHistogramCSV(&b, rs); err != nil {
		return err
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("--histogram-csv: %w", err)
	}
	return nil
}

// Plot draws the resolve-time histograms of a histogram CSV (one line per report, share
// of answered queries per bin over a log time axis) into a PNG, with the project's
// Python: matplotlib, the plotting library of every other figure, run as
// doqscan_analysis.benchplot from <home>/.venv (./dev install). Without that
// interpreter the error is a missing prerequisite (exit 5).
func Plot(ctx context.Context, csvPath, pngPath string) error {
	py := home.Path(".venv", "bin", "python")
	if _, err := os.Stat(py); err != nil {
		return cli.Environmentf("--plot draws with the project's Python and matplotlib, and %s is missing (./dev install creates it; --histogram-csv writes the data without it)", py)
	}
	cmd := exec.CommandContext(ctx, py, "-m", "doqscan_analysis.benchplot", csvPath, pngPath)
	cmd.Env = append(os.Environ(), "MPLBACKEND=Agg")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("--plot: %s: %w\n%s", py, err, out)
	}
	return nil
}
