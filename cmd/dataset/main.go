// Command dataset imports measurement data another study published (the PAM 2022 DoQ
// study's ZMap lists, verifier lists, certificate CSVs, misc and performance SQLite
// files, location CSVs) into doqscan's database, so the notebooks read it beside
// doqscan's own rounds.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"strings"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/dataset"
	"github.com/doqscan/doqscan/internal/store"
)

var cmd = cli.Command{
	Name:    "dataset",
	Summary: "import another study's published measurement files into the database",
	Usage:   "dataset import [flags] DIR",
	Examples: []string{
		"dataset import ../shared/datasets/dns-analysis-2021                 # the pre-study (label dns-analysis-2021, vantage pam2022-tum)",
		"dataset import ../shared/datasets/misc-dns-measurements-2021        # its misc SQLite files",
		"dataset import --label pam2022-w03 --vantage pam2022-tum DIR        # a directory laid out like the published archives",
		"dataset import --dry-run DIR                                        # read and check every file, write nothing",
	},
	Notes: `DIR is walked recursively; files are recognised by name: DD-MM-YYYY-<port>.csv (ZMap
list), DD-MM-YYYY[-<port>]-verified.csv (verifier list; without a port the port is
unknown and stored as 0), DD-MM-YYYY-combined.csv (checked, not stored twice), certs*.csv
(certificate CSV), ip-location*.csv (locations), *.db (misc or performance SQLite, told
apart by their tables). Other files are listed in dataset_files as not imported.
One import is one transaction: a malformed file stops it with the file and line (or
table and row) and nothing is written. Importing the same files again adds nothing.
The summary (rows added per table) is printed as JSON on stdout. See docs/dataset.md.`,
}

func main() {
	var common cli.Common
	fs := cli.NewFlagSet(cmd, &common)
	var cfg dataset.Config
	fs.StringVar(&cfg.Vantage, "vantage", dataset.DefaultVantage, "vantage_id the imported rows are stored under")
	fs.StringVar(&cfg.Label, "label", "", "label of the imported scans, verification runs and campaigns (default: DIR's name)")
	fs.StringVar(&cfg.Description, "description", "", "description of the vantage point when it is new (default names the study)")
	fs.BoolVar(&cfg.DryRun, "dry-run", false, "read and check every file, print what would be imported, write nothing")
	// The subcommand comes first; flags may follow it ("dataset import --label x DIR").
	sub := ""
	if len(os.Args) > 1 && !strings.HasPrefix(os.Args[1], "-") {
		sub, os.Args = os.Args[1], append(os.Args[:1:1], os.Args[2:]...)
	}
	cli.Main(fs, &common, func(ctx context.Context, log *slog.Logger, args []string) error {
		if sub != "import" || len(args) != 1 {
			return cli.Usagef("want: dataset import [flags] DIR (got %q)", strings.TrimSpace(sub+" "+strings.Join(args, " ")))
		}
		cfg.Dir, cfg.Log = args[0], log
		return run(ctx, log, cfg)
	})
}

func run(ctx context.Context, log *slog.Logger, cfg dataset.Config) error {
	sum, err := dataset.Run(ctx, cfg, func(ctx context.Context) (*store.Store, error) { return cli.OpenStore(ctx, log) })
	switch {
	case errors.Is(err, dataset.ErrNoDirectory):
		return cli.Environmentf("%v", err)
	case errors.Is(err, dataset.ErrBadName):
		return cli.Usagef("%v", err)
	case err != nil:
		return err
	}
	log.Info("done", "dataset_id", sum.DatasetID, "vantage", sum.Vantage, "label", sum.Label,
		"weeks", len(sum.Weeks), "imported_before", sum.Existed, "dry_run", cfg.DryRun)
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(sum)
}
