// Command dnsbench is a load generator for DNS resolvers over DoUDP, DoTCP, DoT, DoH,
// DoH3 and DoQ. Its logic lives in internal/dnsbench; this main only binds flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/dnsbench"
	"github.com/doqscan/doqscan/internal/home"
	"github.com/doqscan/doqscan/internal/listfile"
	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/testbed"
	"github.com/doqscan/doqscan/internal/testbed/netns"
)

var cmd = cli.Command{
	Name:    "dnsbench",
	Summary: "benchmark DNS resolvers over DoUDP, DoTCP, DoT, DoH, DoH3 and DoQ (QPS, latency percentiles, loss)",
	Usage:   "dnsbench [flags] PROTOCOL://ADDRESS[:PORT] ...",
	Examples: []string{
		"dnsbench --count 10000 --workers 16 doudp://127.0.0.1 doq://127.0.0.1:8853",
		"dnsbench --duration 30s --rate 500 --policy fresh dot://127.0.0.1:8853 --json",
		"dnsbench --ramp-max 20000 --ramp-loss 0.05 --duration 60s --workers 200 doudp://127.0.0.1",
		"bin/testnet exec -- bin/dnsbench --duration 10s --queries q.txt doq://198.19.3.7 dot://198.19.3.7 --store --label loss=5%",
		"bin/testnet exec -- bin/dnsbench --loss-sweep 0,1,5,10,15,20 --duration 10s --store doudp://198.19.3.7 dot://198.19.3.7 doq://198.19.3.7",
	},
	Notes: `PROTOCOL is doudp, dotcp, dot, doh (POST), doh-get, doh-post, doh3, doh3-get, doh3-post or
doq; without a port the protocol's default (53, 853, 443, 853). Targets are run in turn.
Query file (--queries): dnsperf's format, "NAME [TYPE]" per line, ';' or '#' comments;
queries are sent in file order, cycling. Without one: test.com A.
Load: as fast as answered (each worker keeps one query outstanding), --rate N queries/s
over all workers, or a ramp (--ramp-max) rising linearly over --duration that stops at the
first second whose loss exceeds --ramp-loss and reports the highest rate sustained.
Policies: fresh (new session per query), persistent (--session-queries per session),
resumed (TLS session ticket), 0rtt (early data). Testbed addresses are refused outside
the simulated internet (exit 5): run through bin/testnet exec. See docs/dnsbench.md.`,
}

func main() {
	fs, common, run := command()
	cli.Main(fs, common, run)
}

func command() (*flag.FlagSet, *cli.Common, func(context.Context, *slog.Logger, []string) error) {
	var common cli.Common
	var c dnsbench.Config
	fs := cli.NewFlagSet(cmd, &common)
	queries := fs.String("queries", "", "query file in dnsperf format (- = stdin)")
	policy := fs.String("policy", "persistent", "connection policy: fresh, persistent, resumed, 0rtt")
	fs.IntVar(&c.Workers, "workers", 10, "concurrent workers, each with one query outstanding (1..10000)")
	fs.DurationVar(&c.Duration, "duration", 0, "issue queries for this long (a ramp: the time to reach --ramp-max)")
	fs.Int64Var(&c.Count, "count", 0, "issue this many queries (0: no bound; with --duration: whichever ends first)")
	fs.Float64Var(&c.Rate, "rate", 0, "target rate, queries/s over all workers (0: as fast as answered)")
	fs.Float64Var(&c.RampMax, "ramp-max", 0, "ramp: the rate (queries/s) reached at the end of --duration")
	fs.Float64Var(&c.RampLoss, "ramp-loss", 0.05, "ramp: stop at the first second whose loss exceeds this fraction")
	fs.DurationVar(&c.Timeout, "timeout", measure.DefaultTimeout, "per query; fresh policies: per session and query (1ms..1m)")
	fs.IntVar(&c.SessionQueries, "session-queries", 1000, "persistent policy: queries per session")
	keyShare := fs.String("key-share", string(measure.KeyShareX25519), "ClientHello key share: x25519 or x25519mlkem768")
	fs.StringVar(&c.Label, "label", "", "free text stored with the run (e.g. loss=5%)")
	fs.DurationVar(&c.Progress, "progress", 10*time.Second, "log progress this often (0: never)")
	asJSON := fs.Bool("json", false, "print the reports as JSON instead of text")
	doStore := fs.Bool("store", false, "store the runs and their per-second samples in PostgreSQL")
	comparePolicies := fs.String("compare-policies", "", "run the targets once per policy (e.g. fresh,persistent,0rtt) and print the connection-reuse table")
	sweep := fs.String("loss-sweep", "", "testbed loss sweep: comma-separated loss levels in % (e.g. 0,1,5,10,15,20), set on every target's path before each level; prints the sweep tables")
	return fs, &common, func(ctx context.Context, log *slog.Logger, args []string) error {
		for _, a := range args {
			t, err := dnsbench.ParseTarget(a)
			if err != nil {
				return cli.Usagef("%v", err)
			}
			c.Targets = append(c.Targets, t)
		}
		c.Policy, c.KeyShare = measure.Mode(*policy), measure.KeyShare(*keyShare)
		if c.RampMax > 0 {
			if c.Rate > 0 {
				return cli.Usagef("--rate and --ramp-max exclude each other")
			}
			c.Load = dnsbench.LoadRamp
		}
		if *queries != "" {
			qs, err := readQueries(*queries)
			if err != nil {
				return err
			}
			c.Queries = qs
		}
		if err := c.Validate(); err != nil {
			return cli.Usagef("%v (see --help)", err)
		}
		var rs []*dnsbench.Report
		var runErr error
		if *sweep != "" {
			levels, err := parseLevels(*sweep)
			if err != nil {
				return cli.Usagef("--loss-sweep: %v", err)
			}
			rs, runErr = dnsbench.Sweep(ctx, c, levels, setTestbedLoss, resetTestbedLoss, nil, log)
			var ce *net.OpError
			if errors.As(runErr, &ce) {
				runErr = cli.Environmentf("%v (run inside the testbed: bin/testnet exec -- bin/dnsbench --loss-sweep ...)", runErr)
			}
		} else if *comparePolicies != "" {
			var ps []measure.Mode
			for _, p := range strings.Split(*comparePolicies, ",") {
				ps = append(ps, measure.Mode(strings.TrimSpace(p)))
			}
			rs, runErr = dnsbench.ComparePolicies(ctx, c, ps, nil, log)
			if errors.Is(runErr, dnsbench.ErrConfig) {
				return cli.Usagef("--compare-policies: %v", runErr)
			}
		} else {
			rs, runErr = dnsbench.Run(ctx, c, nil, log)
		}
		if *doStore && len(rs) > 0 {
			// What was measured is kept, interrupted or not.
			s, err := cli.OpenStore(context.WithoutCancel(ctx), log)
			if err != nil {
				return errors.Join(runErr, err)
			}
			defer s.Close()
			for _, r := range rs {
				id, err := dnsbench.Save(context.WithoutCancel(ctx), s, r)
				if err != nil {
					return errors.Join(runErr, err)
				}
				log.Info("stored", "target", r.Target, "bench_id", id)
			}
		}
		var err error
		if *asJSON {
			err = dnsbench.WriteJSON(os.Stdout, rs)
		} else {
			err = dnsbench.WriteText(os.Stdout, rs)
		}
		if err == nil && *sweep != "" && !*asJSON {
			fmt.Println()
			err = dnsbench.WriteSweepTables(os.Stdout, rs)
		}
		if err == nil && *comparePolicies != "" && !*asJSON {
			fmt.Println()
			err = dnsbench.WritePolicyTable(os.Stdout, rs)
		}
		return errors.Join(runErr, err)
	}
}

// parseLevels reads --loss-sweep's percentages.
func parseLevels(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		x, err := testbed.ParseLoss(strings.TrimSpace(f) + "%")
		if err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	return out, nil
}

// testbedName is the instance testnet exec runs us in.
func testbedName() string {
	if n := os.Getenv(netns.EnvInstance); n != "" {
		return n
	}
	return netns.DefaultInstance
}

func setTestbedLoss(ctx context.Context, a netip.Addr, loss float64) error {
	_, err := testbed.SetPath(ctx, home.Dir(), testbedName(), a.String(), "loss="+strconv.FormatFloat(loss, 'g', -1, 64))
	return err
}

func resetTestbedLoss(ctx context.Context) error {
	return testbed.ResetPaths(ctx, home.Dir(), testbedName(), "")
}

func readQueries(path string) ([]dnsbench.Question, error) {
	if path == listfile.Stdin {
		return dnsbench.ParseQueries(os.Stdin, path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, &listfile.OpenError{File: path, Err: err}
	}
	defer f.Close()
	return dnsbench.ParseQueries(f, path)
}
