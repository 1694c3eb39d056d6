// Command dataset imports measurement data another study published (the PAM 2022 DoQ
// study's ZMap lists, verifier lists, certificate CSVs, misc and performance SQLite
// files, location CSVs) into doqscan's database, so the notebooks read it beside
// doqscan's own rounds, and exports doqscan's data as a Parquet release. The
// subcommands, their flags and the import live in internal/dataset, the export in
// internal/release.
package main

import (
	"os"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/dataset"
)

func main() { tool().Main() }

// tool is dataset's subcommands, their flags bound to dataset.Config (tests run it
// through cli.Tool.RunMain). Flags may also follow the subcommand ("dataset import
// --label x DIR").
func tool() *cli.Tool { return dataset.Tool(os.Stdout) }
