// Command dbctl manages doqscan's database: start the private cluster, apply the schema,
// print the connection URL, stop it.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/store"
	"github.com/doqscan/doqscan/internal/store/pgcluster"
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

func main() {
	var common cli.Common
	fs := cli.NewFlagSet(cmd, &common)
	cli.Main(fs, &common, run)
}

func run(ctx context.Context, log *slog.Logger, args []string) error {
	if len(args) != 1 {
		return cli.Usagef("want exactly one subcommand: up, status, url or stop")
	}
	switch args[0] {
	case "up", "status":
		s, err := cli.OpenStore(ctx, log)
		if err != nil {
			return err
		}
		defer s.Close()
		v, err := s.Version(ctx)
		if err != nil {
			return err
		}
		fmt.Printf("schema version %d (this binary: %d)\n", v, store.SchemaVersion())
		return nil
	case "url":
		if u := os.Getenv("DATABASE_URL"); u != "" {
			fmt.Println(u)
			return nil
		}
		c, err := pgcluster.Default()
		if err != nil {
			return &cli.ExitError{Code: cli.ExitDatabase, Err: err}
		}
		u, _, err := c.Ensure(ctx)
		if err != nil {
			return &cli.ExitError{Code: cli.ExitDatabase, Err: err}
		}
		fmt.Println(u)
		return nil
	case "stop":
		if os.Getenv("DATABASE_URL") != "" {
			log.Info("DATABASE_URL is set: not stopping an external server")
			return nil
		}
		c, err := pgcluster.Default()
		if err != nil {
			return &cli.ExitError{Code: cli.ExitDatabase, Err: err}
		}
		return c.Stop(ctx)
	}
	return cli.Usagef("unknown subcommand %q: want up, status, url or stop", args[0])
}
