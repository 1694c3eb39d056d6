// Command measure runs the hourly response-time campaign over every protocol of
// internal/protocol's table. Its logic lives in internal/measure/campaign; this main binds
// its flags to campaign.Options and calls campaign.Command.
package main

import (
	"context"
	"flag"
	"log/slog"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/measure/campaign"
)

var cmd = cli.Command{
	Name:    "measure",
	Summary: "measure DNS response times (handshake, resolve, RTT) of DoQ-verified resolvers over every protocol",
	Usage:   "measure [flags]",
	Locks:   "the round (vantage, label, hour)",
	Examples: []string{
		"measure                                  # one round now, targets from the latest verification run",
		"measure --every 1h                       # hourly rounds, spread over the hour, until interrupted",
		"measure --targets resolvers.txt --modes fresh,0rtt --key-shares x25519,x25519mlkem768",
		"measure --protocols doq --features --concurrency 16",
		"measure --vantage vp2 --hour 2026-11-22T04   # the 04:00 UTC round: run it, or resume it after a crash (jobrun passes DOQSCAN_RUN_KEY)",
		"measure --targets resolvers.txt --no-store --protocols doudp,doq --json > results.jsonl   # no database: one JSON object per resolver (without --json: a table)",
		"measure --targets resolvers.txt --hour 2026-11-22T04 --rerun       # measure that stored round again, as a new attempt (label hourly-r2)",
	},
	Notes: cli.TargetsHelp + `
A round is keyed by (vantage, label, hour): running it again (a restart, more protocols or
modes) measures only what it lacks, and says what it skips; --rerun measures it all again
as a new attempt (label LABEL-r2, -r3, ...). See docs/measure.md.`,
}

func main() { cli.Main(command()) }

// command binds the flags to campaign.Options (their defaults are
// campaign.DefaultOptions) and returns the run function (tests call it through
// cli.RunMain).
func command() (*flag.FlagSet, *cli.Common, cli.RunFunc) {
	var common cli.Common
	o := campaign.DefaultOptions()
	fs := cli.NewFlagSet(cmd, &common)
	o.Vantage.Register(fs)
	fs.StringVar(&o.Label, "label", o.Label, "campaign label")
	cli.Int64Var(fs, &o.RunID, "run-id", o.RunID, 0, 1<<62, "verification run whose DoQ-verified resolvers to measure (0: the latest of --run-vantage and --run-label)")
	fs.StringVar(&o.Run.Vantage, "run-vantage", o.Run.Vantage, "vantage point whose verification run to measure (default: --vantage, this one's own)")
	fs.StringVar(&o.Run.Label, "run-label", "weekly", "label of the verification run to measure")
	fs.StringVar(&o.TargetsFile, "targets", o.TargetsFile, "read targets from this file instead of a verification run (- = stdin)")
	cli.DurationVar(fs, &o.Every, "every", o.Every, 0, campaign.MaxEvery, "repeat: one round per interval (whole hours; 0: one round), spread over it with jitter")
	fs.StringVar(&o.Protocols, "protocols", o.Protocols, "protocols to measure")
	fs.StringVar(&o.Modes, "modes", o.Modes, "session modes: fresh, resumed, 0rtt, persistent")
	fs.StringVar(&o.KeyShares, "key-shares", o.KeyShares, "ClientHello key shares: x25519, x25519mlkem768")
	fs.StringVar(&o.Variants, "doh-variants", o.Variants, "DoH request methods")
	fs.StringVar(&o.Name, "query-name", o.Name, "query name (A record, RD set)")
	cli.Deprecate(fs, "name", "query-name")
	cli.DurationVar(fs, &o.Timeout, "timeout", o.Timeout, campaign.MinTimeout, campaign.MaxTimeout, "timeout per exchange")
	cli.IntVar(fs, &o.Concurrency, "concurrency", o.Concurrency, 1, campaign.MaxConcurrency, "resolvers measured at once (bounded so timestamps stay honest)")
	cli.IntVar(fs, &o.RTTSamples, "rtt-samples", o.RTTSamples, 1, campaign.MaxRTTSamples, "RTT samples per (transport, port)")
	cli.IntVar(fs, &o.Persistent, "persistent", o.Persistent, campaign.MinPersistent, campaign.MaxPersistent, "queries per session in persistent mode")
	fs.BoolVar(&o.Features, "features", o.Features, "run the support checks (TFO, edns-tcp-keepalive, 0-RTT, session tickets)")
	cli.DurationVar(fs, &o.Spread, "spread", o.Spread, 0, campaign.MaxSpread, "one round: spread resolver starts over this long")
	fs.StringVar(&o.BlocklistDir, "blocklist-dir", o.BlocklistDir, "blocklist *.conf files (must exist); their ranges, opt-outs and reserved ranges are never contacted")
	cli.DurationVar(fs, &o.DBDeadline, "db-deadline", o.DBDeadline, campaign.MinDBDeadline, campaign.MaxDBDeadline, "how long a round waits for an unavailable database (results wait in memory, then in var/spill/) before it stops: status interrupted, exit 3; the next round stores the spilled results")
	o.Output.Register(fs, "resolver")
	fs.BoolVar(&o.Rerun, "rerun", false, "measure a round the database holds again, as a new attempt under the label LABEL-r2, -r3, ... (without it, a round run again measures only what it lacks)")
	fs.StringVar(&o.RoundHour, "hour", o.RoundHour, "one round: the hour it is for, to run or resume (2026-11-22T04, or RFC 3339); default $DOQSCAN_RUN_KEY (set by jobrun), else now")
	return fs, &common, func(ctx context.Context, log *slog.Logger, args []string) error {
		return campaign.Command(ctx, log, o, args)
	}
}
