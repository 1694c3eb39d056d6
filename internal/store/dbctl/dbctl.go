// Package dbctl is the dbctl command: start the private PostgreSQL cluster and apply the
// schema, print the schema version or the connection URL, stop the cluster.
package dbctl

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/store"
	"github.com/doqscan/doqscan/internal/store/pgcluster"
)

// Run runs one subcommand (args: exactly one of up, status, url, stop) and writes what
// it prints to stdout. A cluster that cannot be found or started is exit code 3; a
// missing or unknown subcommand is a usage error (2).
func Run(ctx context.Context, log *slog.Logger, args []string, stdout io.Writer) error {
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
		fmt.Fprintf(stdout, "schema version %d (this binary: %d)\n", v, store.SchemaVersion())
		return nil
	case "url":
		if u := os.Getenv("DATABASE_URL"); u != "" {
			fmt.Fprintln(stdout, u)
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
		fmt.Fprintln(stdout, u)
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
