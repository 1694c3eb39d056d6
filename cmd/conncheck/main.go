// Command conncheck is the weekly connection check of the resolvers of a verification
// run: what each server allows one DoQ, DoT and DoH connection, and how its DoQ
// handshake meets the anti-amplification limit (docs/measure.md). The flags bind to
// conncheck.Flags; the run lives in internal/measure/conncheck.
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/measure/conncheck"
)

var cmd = cli.Command{
	Name:    "conncheck",
	Summary: "weekly connection check: queries per connection, idle timeout, NEW_TOKEN (and its age), Retry, 0-RTT, tickets, streams, amplification budget",
	Usage:   "conncheck [flags]",
	Locks:   "the check run (week, vantage, label)",
	Examples: []string{
		"conncheck                                # the resolvers of the latest verification run",
		"conncheck --run-id 12 --week 2026-W47 --concurrency 64",
		"conncheck --targets resolvers.txt --protocols doq --idle-waits 1s,5s --token-ages 0s,5s --max-queries 100",
		"conncheck --amplification=false --json > policies.json",
	},
	Notes: `Per DoQ endpoint: a connection carrying up to --max-queries queries (how many the server
answers before it closes it), two tokenless connections (Retry policy), one presenting the
first's NEW_TOKEN (honoured?), a resumed one with a 0-RTT query, one connection per
--idle-waits period, alongside them per --token-ages wait one getting a token and one
presenting it after the wait (how long tokens are honoured; only where a Retry or stall
shows it), and one tokenless handshake per --initial-sizes x --key-shares
(connection_policies, amplification_probes). DoT (853) and DoH (443) of the same
resolvers: the same without tokens, Retry and 0-RTT. A run is identified by ISO week +
vantage + label; running it again checks only what it has not stored.`,
}

func main() { cli.Main(command()) }

// command binds the flags to conncheck.Flags and returns the run function (tests call it
// through cli.RunMain).
func command() (*flag.FlagSet, *cli.Common, cli.RunFunc) {
	var common cli.Common
	var f conncheck.Flags
	fs := cli.NewFlagSet(cmd, &common)
	f.Register(fs)
	return fs, &common, func(ctx context.Context, log *slog.Logger, args []string) error {
		return conncheck.Command(ctx, log, &f, args, os.Stdout)
	}
}
