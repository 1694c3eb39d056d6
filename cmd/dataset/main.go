// Command dataset imports measurement data another study published (the PAM 2022 DoQ
// study's ZMap lists, verifier lists, certificate CSVs, misc and performance SQLite
// files, location CSVs) into doqscan's database, so the notebooks read it beside
// doqscan's own rounds. The import lives in internal/dataset.
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/dataset"
)

var cmd = cli.Command{
	Name:    "dataset",
	Summary: "import another study's published measurement files into the database; export doqscan's data as a Parquet release",
	Usage:   "dataset import [flags] DIR | dataset export [flags] [DIR]",
	Examples: []string{
		"dataset import ../shared/datasets/dns-analysis-2021                 # the pre-study (label dns-analysis-2021, vantage pam2022-tum)",
		"dataset import ../shared/datasets/misc-dns-measurements-2021        # its misc SQLite files",
		"dataset import --label pam2022-w03 --vantage pam2022-tum DIR        # a directory laid out like the published archives",
		"dataset import --dry-run DIR                                        # read and check every file, write nothing",
		"dataset export                                                      # every week into release/ of the doqscan home (resumable)",
		"dataset export --weeks 2021-W26,2021-W27 /tmp/release               # two weeks",
		"dataset export --vantages vp0 --force /tmp/release                  # one vantage point, unchanged weeks rewritten too",
	},
	Notes: `DIR is walked recursively; files are recognised by name: DD-MM-YYYY-<port>.csv (ZMap
list), DD-MM-YYYY[-<port>]-verified.csv (verifier list; without a port the port is
unknown and stored as 0), DD-MM-YYYY-combined.csv (checked, not stored twice), certs*.csv
(certificate CSV), ip-location*.csv (locations), *.db (misc or performance SQLite, told
apart by their tables). Other files are listed in dataset_files as not imported.
One import is one transaction: a malformed file stops it with the file and line (or
table and row) and nothing is written; so do a list or CSV file cut short (its last line
without a line end), bytes that are not UTF-8, and an entry that is not a regular file or
directory (FIFO, socket, link to nothing). A directory with nothing to import is a usage
error (exit 2). Importing the same files again adds nothing.
The summary (rows added per table) is printed as JSON on stdout. See docs/dataset.md.

export writes the database as Parquet files, one set per ISO week and vantage point, with
the week's qlogs in one archive per set and manifest.json (rows, bytes, SHA-256 per file).
A set whose runs and honoured opt-outs are unchanged is skipped; written again it is the
same bytes. Honoured opt-out ranges are left out. --vantage, --label, --description and
--dry-run are import flags; --weeks, --vantages and --force export flags. See
docs/data-release.md.`,
}

func main() { cli.Main(command()) }

// command binds the flags to dataset.Config and returns the run function (tests call it
// through cli.RunMain). Flags may also follow the subcommand ("dataset import --label x
// DIR").
func command() (*flag.FlagSet, *cli.Common, cli.RunFunc) {
	var common cli.Common
	fs := cli.NewFlagSet(cmd, &common)
	var cfg dataset.Config
	fs.StringVar(&cfg.Vantage, "vantage", dataset.DefaultVantage, "vantage_id the imported rows are stored under")
	fs.StringVar(&cfg.Label, "label", "", "label of the imported scans, verification runs and campaigns (default: DIR's name)")
	fs.StringVar(&cfg.Description, "description", "", "description of the vantage point when it is new (default names the study)")
	fs.BoolVar(&cfg.DryRun, "dry-run", false, "read and check every file, print what would be imported, write nothing")
	fs.Func("weeks", "export: ISO weeks to write, comma-separated (default: every week with data)", func(v string) error {
		cfg.Export.Weeks = append(cfg.Export.Weeks, cli.SplitList(v)...)
		return nil
	})
	fs.Func("vantages", "export: vantage points to write, comma-separated (default: all)", func(v string) error {
		cfg.Export.Vantages = append(cfg.Export.Vantages, cli.SplitList(v)...)
		return nil
	})
	fs.BoolVar(&cfg.Export.Force, "force", false, "export: rewrite file sets whose runs and opt-outs are unchanged")
	return fs, &common, func(ctx context.Context, log *slog.Logger, args []string) error {
		return dataset.Command(ctx, log, cfg, args, os.Stdout)
	}
}
