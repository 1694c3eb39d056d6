// Package dbctl is the dbctl command: start the private PostgreSQL cluster and apply the
// schema (moving an older database's rows into the time partitions), print the schema
// version and every partition with its size and state, print the connection URL, stop
// the cluster, archive and drop old partitions (retention), and set up one central
// database for a fleet of vantage points (fleet: CA, server and client certificates,
// vantage roles).
package dbctl

import (
	"context"
	"flag"
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

// Tool is the dbctl command: its subcommands, their flags bound to Options (from
// DefaultOptions); what they print goes to stdout. A cluster that cannot be found or
// started is exit code 3.
func Tool(stdout io.Writer) *cli.Tool {
	o := DefaultOptions()
	fleetDir := func(fs *flag.FlagSet) {
		fs.StringVar(&o.FleetDir, "fleet-dir", o.FleetDir, "directory of the CA, server and client certificates")
	}
	// noArgs is a run function that takes no positional arguments.
	noArgs := func(name string, run func(ctx context.Context, log *slog.Logger) error) cli.RunFunc {
		return func(ctx context.Context, log *slog.Logger, args []string) error {
			if len(args) != 0 {
				return cli.Usagef("%s takes no arguments", name)
			}
			return run(ctx, log)
		}
	}
	schema := func(name string, partitions bool) func(*flag.FlagSet) cli.RunFunc {
		return func(*flag.FlagSet) cli.RunFunc {
			return noArgs(name, func(ctx context.Context, log *slog.Logger) error { return Schema(ctx, log, partitions, stdout) })
		}
	}
	return &cli.Tool{Command: Cmd, Subcommands: []cli.Subcommand{
		{Name: "up", Summary: "start or reuse the database, apply the schema and migrations, print the schema version",
			Examples: []string{"dbctl up"}, Flags: schema("up", false)},
		{Name: "migrate", Summary: "the same as up, said for an upgrade: moves an older database's rows into the time partitions",
			Notes: `Rows move in batches with progress; the migration is resumable: run it again after a kill.`,
			Flags: schema("migrate", false)},
		{Name: "status", Summary: "the schema version of the database and this binary's, and every partition with its size and state",
			Notes: `Each partition: table, month or week, rows, size, state (attached, detached, exported, verified,
dropped, sampled) and its archive.`,
			Examples: []string{"dbctl status", "DATABASE_URL=postgres://u@db/doqscan dbctl status"},
			Flags:    schema("status", true)},
		{Name: "url", Summary: "print the connection URL (starting the private cluster if needed)",
			Examples: []string{`psql "$(dbctl url)"`},
			Flags: func(*flag.FlagSet) cli.RunFunc {
				return noArgs("url", func(ctx context.Context, _ *slog.Logger) error {
					u, err := databaseURL(ctx)
					if err == nil {
						_, err = fmt.Fprintln(stdout, u)
					}
					return err
				})
			}},
		{Name: "stop", Summary: "stop the private cluster (no effect with DATABASE_URL)",
			Examples: []string{"dbctl stop"},
			Flags:    func(*flag.FlagSet) cli.RunFunc { return noArgs("stop", Stop) }},
		{Name: "retention", Summary: "archive and drop the partitions older than --keep (pg_dump, verified before the drop)",
			Usage: "dbctl retention [--keep D] [--archive-dir DIR] [--qlog-sample-after D --qlog-sample F] [--dry-run]",
			Notes: `retention detaches every partition whose month (week) ended more than --keep ago, exports it
with pg_dump to --archive-dir, verifies the file against the rows, and only then drops it;
with --qlog-sample-after, it thins older qlogs to a --qlog-sample share after exporting them
whole (docs/fleet.md).`,
			Examples: []string{"dbctl retention --keep 8760h --archive-dir /srv/archive --dry-run"},
			Flags: func(fs *flag.FlagSet) cli.RunFunc {
				cli.DurationVar(fs, &o.Keep, "keep", o.Keep, time.Hour, 100*365*24*time.Hour, "archive and drop partitions whose month or week ended longer ago")
				cli.DurationVar(fs, &o.QlogSampleAfter, "qlog-sample-after", o.QlogSampleAfter, 0, 100*365*24*time.Hour, "thin qlogs partitions older than this to --qlog-sample (0: never)")
				cli.FloatVar(fs, &o.QlogSample, "qlog-sample", o.QlogSample, 0, 1, "share of qlogs kept after --qlog-sample-after, 0..1")
				fs.StringVar(&o.ArchiveDir, "archive-dir", o.ArchiveDir, "where the pg_dump files of archived partitions go")
				fs.BoolVar(&o.DryRun, "dry-run", o.DryRun, "say what would be archived, change nothing")
				return noArgs("retention", func(ctx context.Context, log *slog.Logger) error { return Retention(ctx, log, o, stdout) })
			}},
		{Name: "fleet-init", Summary: "a CA and the server certificate for --server-names in --fleet-dir",
			Usage:    "dbctl fleet-init --server-names NAME,... [--fleet-dir DIR]",
			Examples: []string{"dbctl fleet-init --server-names db.example.net,192.0.2.10"},
			Flags: func(fs *flag.FlagSet) cli.RunFunc {
				fleetDir(fs)
				fs.StringVar(&o.ServerNames, "server-names", o.ServerNames, "names and addresses of the database server (comma-separated)")
				return noArgs("fleet-init", func(context.Context, *slog.Logger) error { return FleetInit(o, stdout) })
			}},
		{Name: "add-vantage", Summary: "the vantage point's role (its own rows only) and client certificate; prints its DATABASE_URL",
			Usage:    "dbctl add-vantage --host HOST [--port N] [--fleet-dir DIR] ID",
			Examples: []string{"dbctl add-vantage --host db.example.net vp-tokyo"},
			Flags: func(fs *flag.FlagSet) cli.RunFunc {
				fleetDir(fs)
				fs.StringVar(&o.Host, "host", o.Host, "the database's name or address as vantage points reach it")
				cli.IntVar(fs, &o.Port, "port", o.Port, 1, 65535, "the database's TCP port")
				return func(ctx context.Context, log *slog.Logger, args []string) error {
					if len(args) != 1 {
						return cli.Usagef("add-vantage takes one vantage point id")
					}
					return AddVantage(ctx, log, o, args[0], stdout)
				}
			}},
		{Name: "fleet-serve", Summary: "make the private cluster serve the fleet on --listen (TLS, client certificates)",
			Usage: "dbctl fleet-serve --listen ADDRESS [--fleet-dir DIR]",
			Notes: `A real server is configured by hand (docs/fleet.md).`,
			Flags: func(fs *flag.FlagSet) cli.RunFunc {
				fleetDir(fs)
				fs.StringVar(&o.Listen, "listen", o.Listen, "the address the private cluster listens on for vantage points")
				return noArgs("fleet-serve", func(ctx context.Context, _ *slog.Logger) error { return FleetServe(ctx, o, stdout) })
			}},
	}}
}

// Cmd is dbctl's help.
var Cmd = cli.Command{
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
}

// Schema opens the database (starting the private cluster when DATABASE_URL is unset),
// which applies the schema and migrations, and prints its schema version and this
// binary's; with partitions, every partition too (dbctl up, migrate, status).
func Schema(ctx context.Context, log *slog.Logger, partitions bool, stdout io.Writer) error {
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
	if partitions {
		return printPartitions(ctx, s, stdout)
	}
	return nil
}

// Stop stops the private cluster; with DATABASE_URL set it leaves the server alone.
func Stop(ctx context.Context, log *slog.Logger) error {
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

// Retention archives and drops the partitions older than o.Keep (dbctl retention).
func Retention(ctx context.Context, log *slog.Logger, o Options, stdout io.Writer) error {
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

// absFleetDir makes o.FleetDir an absolute path (the URLs name the certificates by it).
func (o *Options) absFleetDir() error {
	dir, err := filepath.Abs(o.FleetDir)
	o.FleetDir = dir
	return err
}

// FleetInit writes a CA and the server certificate for o.ServerNames into o.FleetDir.
func FleetInit(o Options, stdout io.Writer) error {
	if err := o.absFleetDir(); err != nil {
		return err
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
}

// AddVantage creates vantage point id's role and client certificate and prints the
// DATABASE_URL it connects with.
func AddVantage(ctx context.Context, log *slog.Logger, o Options, id string, stdout io.Writer) error {
	if err := o.absFleetDir(); err != nil {
		return err
	}
	if o.Host == "" {
		return cli.Usagef("add-vantage needs --host (the database's address as vantage points reach it)")
	}
	s, err := cli.OpenStore(ctx, log)
	if err != nil {
		return err
	}
	defer s.Close()
	role, err := s.AddVantageRole(ctx, id)
	if err != nil {
		return err
	}
	c, err := fleet.IssueClient(o.FleetDir, id, role)
	if err != nil {
		return err
	}
	var db string
	if err := s.Pool.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil {
		return err
	}
	fmt.Fprintln(stdout, c.URL(o.Host, o.Port, db))
	return nil
}

// FleetServe makes the private cluster serve the fleet on o.Listen.
func FleetServe(ctx context.Context, o Options, stdout io.Writer) error {
	if err := o.absFleetDir(); err != nil {
		return err
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
