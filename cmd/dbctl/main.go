// Command dbctl manages doqscan's database: start the private cluster, apply the schema,
// print the connection URL and the partitions, archive old partitions, set up a central
// database for a fleet of vantage points, stop it. The subcommands live in
// internal/store/dbctl.
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"time"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/store/dbctl"
)

var cmd = cli.Command{
	Name:    "dbctl",
	Summary: "set up, inspect, archive and stop doqscan's PostgreSQL database",
	Usage:   "dbctl [flags] up|migrate|status|url|stop|retention|fleet-init|add-vantage ID|fleet-serve",
	Examples: []string{
		"dbctl up                      # start the private cluster (if DATABASE_URL is unset) and apply schema.sql",
		"psql \"$(dbctl url)\"           # open a SQL shell on the database the tools use",
		"dbctl status                  # schema version, every partition with its size and state",
		"DATABASE_URL=postgres://u@db/doqscan dbctl status   # the same for another server",
		"dbctl retention --keep 8760h --archive-dir /srv/archive --dry-run   # what a year's retention would archive",
		"dbctl fleet-init --server-names db.example.net,192.0.2.10   # CA and server certificate in var/fleet",
		"dbctl add-vantage --host db.example.net vp-tokyo   # role, client certificate; prints its DATABASE_URL",
		"dbctl stop                    # stop the private cluster",
	},
	Notes: `Subcommands:
  up            start or reuse the database, apply the schema and migrations, print the URL
  migrate       the same, said for an upgrade: moves an older database's rows into the time
                partitions in batches with progress (resumable: run it again after a kill)
  status        the schema version of the database and this binary's, and every partition
                (table, month or week, rows, size, state: attached, detached, exported,
                verified, dropped, sampled)
  url           print the connection URL (starting the private cluster if needed)
  stop          stop the private cluster (no effect with DATABASE_URL)
  retention     detach every partition whose month (week) ended more than --keep ago,
                export it with pg_dump to --archive-dir, verify the file against the rows,
                and only then drop it; with --qlog-sample-after, thin older qlogs to a
                --qlog-sample share after exporting them whole (docs/fleet.md)
  fleet-init    a CA and the server certificate for --server-names in --fleet-dir
  add-vantage ID  the vantage point's role (its own rows only) and client certificate;
                prints the DATABASE_URL it connects with (--host, --port)
  fleet-serve   make the private cluster serve the fleet on --listen (TLS, client
                certificates); a real server is configured by hand (docs/fleet.md)`,
}

func main() { cli.Main(command()) }

// command binds the flags to dbctl.Options and returns the run function (tests call it
// through cli.RunMain).
func command() (*flag.FlagSet, *cli.Common, cli.RunFunc) {
	var common cli.Common
	o := dbctl.DefaultOptions()
	fs := cli.NewFlagSet(cmd, &common)
	cli.DurationVar(fs, &o.Keep, "keep", o.Keep, time.Hour, 100*365*24*time.Hour, "retention: archive and drop partitions whose month or week ended longer ago")
	cli.DurationVar(fs, &o.QlogSampleAfter, "qlog-sample-after", o.QlogSampleAfter, 0, 100*365*24*time.Hour, "retention: thin qlogs partitions older than this to --qlog-sample (0: never)")
	cli.FloatVar(fs, &o.QlogSample, "qlog-sample", o.QlogSample, 0, 1, "retention: share of qlogs kept after --qlog-sample-after, 0..1")
	fs.StringVar(&o.ArchiveDir, "archive-dir", o.ArchiveDir, "retention: where the pg_dump files of archived partitions go")
	fs.BoolVar(&o.DryRun, "dry-run", o.DryRun, "retention: say what would be archived, change nothing")
	fs.StringVar(&o.FleetDir, "fleet-dir", o.FleetDir, "fleet-init, add-vantage, fleet-serve: directory of the CA, server and client certificates")
	fs.StringVar(&o.ServerNames, "server-names", o.ServerNames, "fleet-init: names and addresses of the database server (comma-separated)")
	fs.StringVar(&o.Host, "host", o.Host, "add-vantage: the database's name or address as vantage points reach it")
	cli.IntVar(fs, &o.Port, "port", o.Port, 1, 65535, "add-vantage: the database's TCP port")
	fs.StringVar(&o.Listen, "listen", o.Listen, "fleet-serve: the address the private cluster listens on for vantage points")
	return fs, &common, func(ctx context.Context, log *slog.Logger, args []string) error {
		return dbctl.Run(ctx, log, o, args, os.Stdout)
	}
}
