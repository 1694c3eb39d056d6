// Command dnsbench is a load generator for DNS resolvers over every protocol of
// internal/protocol's table. Its logic lives in internal/dnsbench; this main only binds
// flags, and hands --loss-sweep the testbed's path-loss control (the simulated internet is wired
// here so that internal/dnsbench stays free of it).
package main

import (
	"context"
	"flag"
	"log/slog"
	"math"
	"time"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/dnsbench"
	"github.com/doqscan/doqscan/internal/home"
	"github.com/doqscan/doqscan/internal/testbed"
)

func main() { cli.Main(command()) }

func command() (*flag.FlagSet, *cli.Common, cli.RunFunc) {
	var common cli.Common
	var o dnsbench.Options
	fs := cli.NewFlagSet(dnsbench.Cmd, &common)
	fs.StringVar(&o.QueriesFile, "queries", "", "query file in dnsperf format (- = stdin)")
	fs.StringVar(&o.PolicyName, "policy", "persistent", "connection policy: fresh, persistent, resumed, 0rtt")
	cli.IntVar(fs, &o.Workers, "workers", 10, 1, dnsbench.MaxWorkers, "concurrent workers, each with one query outstanding (--streams: that many)")
	cli.IntVar(fs, &o.Streams, "streams", 1, 1, dnsbench.MaxStreams, "persistent policy: queries each worker keeps outstanding on its session")
	cli.DurationVar(fs, &o.Duration, "duration", 0, 0, dnsbench.MaxDuration, "issue queries for this long (a ramp: the time to reach --ramp-max)")
	cli.Int64Var(fs, &o.Count, "count", 0, 0, math.MaxInt64, "issue this many queries (0: no bound; with --duration: whichever ends first)")
	cli.FloatVar(fs, &o.Rate, "rate", 0, 0, dnsbench.MaxRate, "target rate, queries/s over all workers (0: as fast as answered)")
	cli.FloatVar(fs, &o.RampMax, "ramp-max", 0, 0, dnsbench.MaxRate, "ramp: the rate (queries/s) reached at the end of --duration")
	cli.FloatVar(fs, &o.RampLoss, "ramp-loss", 0.05, 0, dnsbench.MaxRampLoss, "ramp: stop at the first second whose loss exceeds this fraction")
	cli.DurationVar(fs, &o.Timeout, "timeout", dnsbench.DefaultTimeout, dnsbench.MinTimeout, dnsbench.MaxTimeout, "per query; fresh policies: per session and query; --streams: per query and per session set-up")
	cli.IntVar(fs, &o.SessionQueries, "session-queries", 1000, 1, dnsbench.MaxSessionQueries, "persistent policy: queries per session")
	fs.StringVar(&o.KeyShareName, "key-share", dnsbench.DefaultKeyShare, "ClientHello key share: x25519 or x25519mlkem768")
	fs.StringVar(&o.Label, "label", "", "free text stored with the run (e.g. loss=5%)")
	cli.DurationVar(fs, &o.Progress, "progress", 10*time.Second, 0, 24*time.Hour, "log progress this often (0: never)")
	cli.RegisterJSON(fs, &o.JSON, "target (and per policy or loss level of a comparison or sweep): the report, its histogram included")
	fs.StringVar(&o.HistogramCSV, "histogram-csv", "", "write the latency histograms (resolve and total time, 16 bins per power of two) as CSV to this file")
	fs.StringVar(&o.Plot, "plot", "", "draw the resolve-time histograms into this PNG file (needs the project's Python: ./dev install)")
	fs.BoolVar(&o.Store, "store", false, "store the runs and their per-second samples in PostgreSQL")
	fs.StringVar(&o.ComparePolicies, "compare-policies", "", "run the targets once per policy (e.g. fresh,persistent,0rtt) and print the connection-reuse table")
	fs.StringVar(&o.LossSweep, "loss-sweep", "", "testbed loss sweep: comma-separated loss levels in % (e.g. 0,1,5,10,15,20), set on every target's path before each level; prints the sweep tables")
	o.SetLoss, o.ResetLoss = testbed.LossControl(home.Dir())
	return fs, &common, func(ctx context.Context, log *slog.Logger, args []string) error {
		o.Args = args
		return dnsbench.Command(ctx, o, log)
	}
}
