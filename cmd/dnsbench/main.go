// Command dnsbench is a load generator for DNS resolvers over DoUDP, DoTCP, DoT, DoH,
// DoH3 and DoQ. Its logic lives in internal/dnsbench; this main only binds flags, and
// hands --loss-sweep the testbed's path-loss control (the simulated internet is wired
// here so that internal/dnsbench stays free of it).
package main

import (
	"context"
	"flag"
	"log/slog"
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
	fs.IntVar(&o.Workers, "workers", 10, "concurrent workers, each with one query outstanding (--streams: that many), 1..10000")
	fs.IntVar(&o.Streams, "streams", 1, "persistent policy: queries each worker keeps outstanding on its session, 1..100")
	fs.DurationVar(&o.Duration, "duration", 0, "issue queries for this long (a ramp: the time to reach --ramp-max)")
	fs.Int64Var(&o.Count, "count", 0, "issue this many queries (0: no bound; with --duration: whichever ends first)")
	fs.Float64Var(&o.Rate, "rate", 0, "target rate, queries/s over all workers (0: as fast as answered)")
	fs.Float64Var(&o.RampMax, "ramp-max", 0, "ramp: the rate (queries/s) reached at the end of --duration")
	fs.Float64Var(&o.RampLoss, "ramp-loss", 0.05, "ramp: stop at the first second whose loss exceeds this fraction")
	fs.DurationVar(&o.Timeout, "timeout", dnsbench.DefaultTimeout, "per query; fresh policies: per session and query; --streams: per query and per session set-up (1ms..1m)")
	fs.IntVar(&o.SessionQueries, "session-queries", 1000, "persistent policy: queries per session")
	fs.StringVar(&o.KeyShareName, "key-share", dnsbench.DefaultKeyShare, "ClientHello key share: x25519 or x25519mlkem768")
	fs.StringVar(&o.Label, "label", "", "free text stored with the run (e.g. loss=5%)")
	fs.DurationVar(&o.Progress, "progress", 10*time.Second, "log progress this often (0: never)")
	fs.BoolVar(&o.JSON, "json", false, "print the reports as JSON instead of text")
	fs.BoolVar(&o.Store, "store", false, "store the runs and their per-second samples in PostgreSQL")
	fs.StringVar(&o.ComparePolicies, "compare-policies", "", "run the targets once per policy (e.g. fresh,persistent,0rtt) and print the connection-reuse table")
	fs.StringVar(&o.LossSweep, "loss-sweep", "", "testbed loss sweep: comma-separated loss levels in % (e.g. 0,1,5,10,15,20), set on every target's path before each level; prints the sweep tables")
	o.SetLoss, o.ResetLoss = testbed.LossControl(home.Dir())
	return fs, &common, func(ctx context.Context, log *slog.Logger, args []string) error {
		o.Args = args
		return dnsbench.Command(ctx, o, log)
	}
}
