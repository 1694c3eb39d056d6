package dnsbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/listfile"
	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/protocol"
)

// Cmd describes cmd/dnsbench for --help.
var Cmd = cli.Command{
	Name:    "dnsbench",
	Summary: "benchmark DNS resolvers over " + protocol.Labels() + " (QPS, latency percentiles, loss)",
	Usage:   "dnsbench [flags] PROTOCOL://ADDRESS[:PORT] ...",
	Examples: []string{
		"dnsbench --count 10000 --workers 16 doudp://127.0.0.1 doq://127.0.0.1:8853",
		"dnsbench --duration 3s --workers 4 --streams 32 doq://127.0.0.1:8853 doh3://127.0.0.1:8443",
		"dnsbench --duration 3s --rate 500 --policy fresh dot://127.0.0.1:8853 --json   # one JSON object per target",
		"dnsbench --count 5000 doq://127.0.0.1:8853 --histogram-csv lat.csv --plot lat.png  # the latency histogram as CSV and PNG",
		"dnsbench --ramp-max 5000 --ramp-loss 0.05 --duration 5s --workers 50 doudp://127.0.0.1",
		"bin/testnet exec -- bin/dnsbench --duration 3s --queries q.txt doq://198.19.3.7 dot://198.19.3.7 --store --label loss=5%",
		"bin/testnet exec -- bin/dnsbench --loss-sweep 0,5,20 --duration 3s --store doudp://198.19.3.7 dot://198.19.3.7 doq://198.19.3.7",
	},
	Notes: "PROTOCOL is " + targetProtocols() + ";\nwithout a port the protocol's default (" +
		protocol.DefaultPortsText(false) + `). Targets are run in turn.
Query file (--queries): dnsperf's format, "NAME [TYPE]" per line, ';' or '#' comments;
queries are sent in file order, cycling. Without one: test.com A.
Load: as fast as answered (each worker keeps one query outstanding, or --streams N on its
persistent session), --rate N queries/s over all workers, or a ramp (--ramp-max) rising
linearly over --duration that stops at the first second whose loss exceeds --ramp-loss
and reports the highest rate sustained.
Output: per target QPS, success, rcodes, outcomes, latency percentiles and the resolve-time
histogram (two bins per power of two); --json one JSON object per target (its histogram:
16 bins per power of two); --histogram-csv the histograms as CSV; --plot a PNG of them
(drawn with the project's Python and matplotlib, .venv: ./dev install).
Policies: fresh (new session per query), persistent (--session-queries per session,
--streams outstanding: DoQ streams, DoH/DoH3 concurrent requests, DoTCP/DoT pipelining,
DoUDP answers matched by ID), resumed (TLS session ticket), 0rtt (early data). Testbed
addresses are refused outside the simulated internet (exit 5): run through bin/testnet
exec. See docs/dnsbench.md.`,
}

// targetProtocols lists what PROTOCOL:// may be, for --help: every protocol, one with
// request variants also with each ("doh (POST), doh-get, doh-post").
func targetProtocols() string {
	var out []string
	for _, s := range protocol.Table {
		if len(s.Variants) == 0 {
			out = append(out, s.Name)
			continue
		}
		out = append(out, s.Name+" ("+measure.VariantPOST+")")
		for _, v := range s.Variants {
			out = append(out, s.Name+"-"+strings.ToLower(v))
		}
	}
	return protocol.List(out, "or")
}

// Defaults of the command's flags.
const (
	DefaultTimeout  = measure.DefaultTimeout
	DefaultKeyShare = string(measure.KeyShareX25519)
)

// Options are cmd/dnsbench's command line: the benchmark's Config (its Targets, Queries,
// Policy and KeyShare are set by Command from the fields below) and what is done around
// the run.
type Options struct {
	Config
	Args            []string // targets: PROTOCOL://ADDRESS[:PORT]
	QueriesFile     string   // dnsperf format; "-": standard input
	PolicyName      string   // fresh, persistent, resumed or 0rtt
	KeyShareName    string   // x25519 or x25519mlkem768
	ComparePolicies string   // comma-separated: run the targets once per policy
	LossSweep       string   // comma-separated loss levels in % (needs SetLoss)
	JSON            bool     // reports as JSON lines instead of text
	Store           bool     // store the reports (bench_runs, bench_samples)
	HistogramCSV    string   // write the latency histograms as CSV to this file
	Plot            string   // draw the resolve-time histograms into this PNG
	// SetLoss and ResetLoss drive LossSweep (cmd/dnsbench: the testbed's delay line).
	SetLoss   LossSetter
	ResetLoss func(context.Context) error
	Out       io.Writer // the reports; default standard output
	Stdin     io.Reader // QueriesFile "-"; default standard input
}

// Command runs dnsbench: it checks o (bad flags: exit 2), runs the benchmark, the
// policy comparison or the loss sweep, stores what was measured (interrupted or not)
// and writes the reports.
func Command(ctx context.Context, o Options, log *slog.Logger) error {
	if o.Out == nil {
		o.Out = os.Stdout
	}
	if o.Stdin == nil {
		o.Stdin = os.Stdin
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := o.Config
	c.Targets = nil
	for _, a := range o.Args {
		t, err := ParseTarget(a)
		if err != nil {
			return cli.Usagef("%v", err)
		}
		c.Targets = append(c.Targets, t)
	}
	c.Policy, c.KeyShare = measure.Mode(o.PolicyName), measure.KeyShare(o.KeyShareName)
	if c.RampMax > 0 {
		if c.Rate > 0 {
			return cli.Usagef("--rate and --ramp-max exclude each other")
		}
		c.Load = LoadRamp
	}
	if o.QueriesFile != "" {
		qs, err := readQueries(o.QueriesFile, o.Stdin)
		if err != nil {
			return err
		}
		c.Queries = qs
	}
	if err := c.Validate(); err != nil {
		return cli.Usagef("%v (see --help)", err)
	}
	var rs []*Report
	var runErr error
	switch {
	case o.LossSweep != "":
		levels, err := ParseLevels(o.LossSweep)
		if err != nil {
			return cli.Usagef("--loss-sweep: %v", err)
		}
		rs, runErr = Sweep(ctx, c, levels, o.SetLoss, o.ResetLoss, nil, log)
		var ne *net.OpError
		if errors.As(runErr, &ne) {
			runErr = cli.Environmentf("%v (run inside the testbed: bin/testnet exec -- bin/dnsbench --loss-sweep ...)", runErr)
		}
	case o.ComparePolicies != "":
		var ps []measure.Mode
		for _, p := range strings.Split(o.ComparePolicies, ",") {
			ps = append(ps, measure.Mode(strings.TrimSpace(p)))
		}
		rs, runErr = ComparePolicies(ctx, c, ps, nil, log)
		if errors.Is(runErr, ErrConfig) {
			return cli.Usagef("--compare-policies: %v", runErr)
		}
	default:
		rs, runErr = Run(ctx, c, nil, log)
	}
	if o.Store && len(rs) > 0 {
		// What was measured is kept, interrupted or not.
		s, err := cli.OpenStore(context.WithoutCancel(ctx), log)
		if err != nil {
			return errors.Join(runErr, err)
		}
		defer s.Close()
		for _, r := range rs {
			id, err := Save(context.WithoutCancel(ctx), s, r)
			if err != nil {
				return errors.Join(runErr, err)
			}
			log.Info("stored", "target", r.Target, "bench_id", id)
		}
	}
	var err error
	if o.JSON {
		err = WriteJSON(o.Out, rs)
	} else {
		err = WriteText(o.Out, rs)
	}
	if err == nil && o.LossSweep != "" && !o.JSON {
		fmt.Fprintln(o.Out)
		err = WriteSweepTables(o.Out, rs)
	}
	if err == nil && o.ComparePolicies != "" && !o.JSON {
		fmt.Fprintln(o.Out)
		err = WritePolicyTable(o.Out, rs)
	}
	// The files after stdout: a plot that cannot be drawn leaves the reports printed.
	if err == nil && o.HistogramCSV != "" {
		err = writeHistogramFile(o.HistogramCSV, rs)
	}
	if err == nil && o.Plot != "" {
		if err = plot(context.WithoutCancel(ctx), o.HistogramCSV, o.Plot, rs); err == nil {
			log.Info("latency histogram drawn", "png", o.Plot)
		}
	}
	return errors.Join(runErr, err)
}

// plot draws rs's histograms into png (Plot), from csvPath when the CSV is written
// anyway, else from a temporary file.
func plot(ctx context.Context, csvPath, png string, rs []*Report) error {
	if csvPath == "" {
		dir, err := os.MkdirTemp("", "dnsbench-plot")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		csvPath = filepath.Join(dir, "histogram.csv")
		if err := writeHistogramFile(csvPath, rs); err != nil {
			return err
		}
	}
	return Plot(ctx, csvPath, png)
}

// ParseLevels reads --loss-sweep's levels: comma-separated percentages ("0,1,5"; a
// trailing % is allowed), as loss probabilities.
func ParseLevels(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSuffix(strings.TrimSpace(f), "%")
		x, err := strconv.ParseFloat(f, 64)
		if err != nil || !(x >= 0 && x <= 100) {
			return nil, fmt.Errorf("bad loss level %q (a percentage from 0 to 100)", f)
		}
		out = append(out, x/100)
	}
	return out, nil
}

// readQueries reads a query file (listfile.Stdin: stdin); a missing file is a
// *listfile.OpenError (exit 5), a bad line a *listfile.LineError (exit 2).
func readQueries(path string, stdin io.Reader) ([]Question, error) {
	if path == listfile.Stdin {
		return ParseQueries(stdin, path)
	}
	f, err := listfile.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ParseQueries(f, path)
}
