// Package dbctl is the dbctl command: start the private PostgreSQL cluster and apply the
// schema (moving an older database's rows into the time partitions), print the schema
// version and every partition with its size and state, print the connection URL, stop
// the cluster, archive and drop old partitions (retention), and set up one central
// database for a fleet of vantage points (fleet: CA, server and client certificates,
// vantage roles).
package dbctl

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/home"
	"github.com/doqscan/doqscan/internal/store"
	"github.com/doqscan/doqscan/internal/store/fleet"
	"github.com/doqscan/doqscan/internal/store/pgcluster"
)

// Options are dbctl's flags beyond the common ones.
type Options struct {
	// Retention (dbctl retention).
	Keep            time.Duration // --keep: age after which a partition is archived and dropped
	QlogSampleAfter time.Duration // --qlog-sample-after
	QlogSample      float64       // --qlog-sample (fraction)
	ArchiveDir      string        // --archive-dir
	DryRun          bool          // --dry-run
	// Fleet (dbctl fleet ...).
	FleetDir    string // --fleet-dir: CA, server and client certificates
	ServerNames string // --server-names: names/addresses in the server certificate (init)
	Host        string // --host: the address vantage points connect to (add-vantage)
	Port        int    // --port
	Listen      string // --listen: TCP address the private cluster serves the fleet on (serve)
}

// DefaultOptions are the flags' defaults.
func DefaultOptions() Options {
	return Options{Keep: 365 * 24 * time.Hour, QlogSample: 0.01, Port: 5432,
		ArchiveDir: home.Path("var", "archive"), FleetDir: home.Path("var", "fleet")}
}

const usage = "want a subcommand: up, migrate, status, url, stop, retention, fleet-init, add-vantage, fleet-serve"

// Run runs one subcommand and writes what it prints to stdout. A cluster that cannot be
// found or started is exit code 3; a missing or unknown subcommand is a usage error (2).
func Run(ctx context.Context, log *slog.Logger, o Options, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return cli.Usagef("%s", usage)
	}
	switch args[0] {
	case "up", "migrate", "status":
		if len(args) != 1 {
			return cli.Usagef("%s takes no arguments", args[0])
		}
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
		if args[0] == "status" {
			return printPartitions(ctx, s, stdout)
		}
		return nil
	case "url":
		u, err := databaseURL(ctx)
		if err != nil {
			return err
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
	case "retention":
		return retention(ctx, log, o, args[1:], stdout)
	case "fleet-init", "add-vantage", "fleet-serve":
		return fleetCmd(ctx, log, o, args, stdout)
	}
	return cli.Usagef("unknown subcommand %q: %s", args[0], usage)
}

// databaseURL is $DATABASE_URL, else the private cluster's (started if needed).
func databaseURL(ctx context.Context) (string, error) {
	if u := os.Getenv("DATABASE_URL"); u != "" {
		return u, nil
	}
	c, err := pgcluster.Default()
	if err != nil {
		return "", &cli.ExitError{Code: cli.ExitDatabase, Err: err}
	}
	u, _, err := c.Ensure(ctx)
	if err != nil {
		return "", &cli.ExitError{Code: cli.ExitDatabase, Err: err}
	}
	return u, nil
}

// printPartitions writes one line per partition: table, partition, rows, size, state.
func printPartitions(ctx context.Context, s *store.Store, w io.Writer) error {
	parts, err := s.Partitions(ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "table\tpartition\tends\trows\tsize\tstate\tarchive")
	var total int64
	for _, p := range parts {
		end := ""
		if !p.End.IsZero() {
			end = p.End.Format(time.DateOnly)
		}
		arch := p.Export
		if p.Detail != "" {
			arch = strings.TrimSpace(arch + " " + p.Detail)
		}
		if p.State != "dropped" {
			total += p.Bytes
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", p.Parent, p.Name, end, p.Rows, bytesString(p.Bytes), p.State, arch)
	}
	fmt.Fprintf(tw, "total\t%d partitions\t\t\t%s\t\t\n", len(parts), bytesString(total))
	return tw.Flush()
}

func bytesString(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.0f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func retention(ctx context.Context, log *slog.Logger, o Options, args []string, stdout io.Writer) error {
	if len(args) != 0 {
		return cli.Usagef("retention takes no arguments (--keep, --archive-dir, --qlog-sample-after, --qlog-sample, --dry-run)")
	}
	if o.Keep <= 0 {
		return cli.Usagef("--keep must be positive")
	}
	if o.QlogSample < 0 || o.QlogSample > 1 {
		return cli.Usagef("--qlog-sample %v: want a fraction from 0 to 1", o.QlogSample)
	}
	if o.QlogSampleAfter < 0 || (o.QlogSampleAfter > 0 && o.QlogSampleAfter >= o.Keep) {
		return cli.Usagef("--qlog-sample-after must be below --keep (or 0: no sampling)")
	}
	u, err := databaseURL(ctx)
	if err != nil {
		return err
	}
	s, err := cli.OpenStore(ctx, log)
	if err != nil {
		return err
	}
	defer s.Close()
	bin, _ := pgcluster.BinDir()
	archive, err := filepath.Abs(o.ArchiveDir)
	if err != nil {
		return err
	}
	pol := store.RetentionPolicy{Keep: o.Keep, QlogSampleAfter: o.QlogSampleAfter, QlogSample: o.QlogSample,
		ArchiveDir: archive, DumpURL: u, BinDir: bin, DryRun: o.DryRun}
	return s.Retain(ctx, pol, log, func(line string) { fmt.Fprintln(stdout, line) })
}

func fleetCmd(ctx context.Context, log *slog.Logger, o Options, args []string, stdout io.Writer) error {
	dir, err := filepath.Abs(o.FleetDir) // the URLs name the certificates by absolute path
	if err != nil {
		return err
	}
	o.FleetDir = dir
	switch args[0] {
	case "fleet-init":
		if len(args) != 1 {
			return cli.Usagef("fleet-init takes no arguments (--server-names, --fleet-dir)")
		}
		names := cli.SplitList(o.ServerNames)
		if len(names) == 0 {
			return cli.Usagef("fleet-init needs --server-names (the names and addresses vantage points connect to)")
		}
		if err := fleet.Init(o.FleetDir, names); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "CA and server certificate for %s in %s\n", strings.Join(names, ", "), o.FleetDir)
		return nil
	case "add-vantage":
		if len(args) != 2 {
			return cli.Usagef("add-vantage takes one vantage point id")
		}
		if o.Host == "" {
			return cli.Usagef("add-vantage needs --host (the database's address as vantage points reach it)")
		}
		s, err := cli.OpenStore(ctx, log)
		if err != nil {
			return err
		}
		defer s.Close()
		role, err := s.AddVantageRole(ctx, args[1])
		if err != nil {
			return err
		}
		c, err := fleet.IssueClient(o.FleetDir, args[1], role)
		if err != nil {
			return err
		}
		var db string
		if err := s.Pool.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil {
			return err
		}
		fmt.Fprintln(stdout, c.URL(o.Host, o.Port, db))
		return nil
	case "fleet-serve":
		if len(args) != 1 {
			return cli.Usagef("fleet-serve takes no arguments (--listen, --fleet-dir)")
		}
		if o.Listen == "" {
			return cli.Usagef("fleet-serve needs --listen ADDRESS")
		}
		if os.Getenv("DATABASE_URL") != "" {
			return cli.Usagef("fleet-serve configures the private cluster; with DATABASE_URL set, configure that server (docs/fleet.md)")
		}
		c, err := pgcluster.Default()
		if err != nil {
			return &cli.ExitError{Code: cli.ExitDatabase, Err: err}
		}
		if err := c.ServeFleet(ctx, o.Listen, o.FleetDir); err != nil {
			return &cli.ExitError{Code: cli.ExitDatabase, Err: err}
		}
		fmt.Fprintf(stdout, "private cluster serves TLS with client certificates on %s:5432\n", o.Listen)
		return nil
	}
	return cli.Usagef("unknown subcommand %q", args[0])
}
