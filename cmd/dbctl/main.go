// Command dbctl manages doqscan's database: start the private cluster, apply the schema,
// print the connection URL, stop it. The subcommands live in internal/store/dbctl.
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/store/dbctl"
)

var cmd = cli.Command{
	Name:    "dbctl",
	Summary: "set up, inspect and stop doqscan's PostgreSQL database",
	Usage:   "dbctl [flags] up|status|url|stop",
	Examples: []string{
		"dbctl up                      # start the private cluster (if DATABASE_URL is unset) and apply schema.sql",
		"psql \"$(dbctl url)\"           # open a SQL shell on the database the tools use",
		"DATABASE_URL=postgres://u@db/doqscan dbctl status   # schema version of another server",
		"dbctl stop                    # stop the private cluster",
	},
	Notes: `Subcommands:
  up      start or reuse the database, apply the schema and migrations, print the URL
  status  print the schema version of the database and this binary's
  url     print the connection URL (starting the private cluster if needed)
  stop    stop the private cluster (no effect with DATABASE_URL)`,
}

func main() { cli.Main(command()) }

// command returns the flag set (dbctl has only the common flags) and the run function
// (tests call it through cli.RunMain).
func command() (*flag.FlagSet, *cli.Common, cli.RunFunc) {
	var common cli.Common
	fs := cli.NewFlagSet(cmd, &common)
	return fs, &common, func(ctx context.Context, log *slog.Logger, args []string) error {
		return dbctl.Run(ctx, log, args, os.Stdout)
	}
}
