// Command qlogs explains QUIC handshakes from qlog files of any vintage and exports a
// campaign's stored qlogs for qvis. The subcommands, their flags and the logic live in
// internal/measure/qlogs.
package main

import (
	"os"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/measure/qlogs"
)

func main() { tool().Main() }

// tool is qlogs's subcommands, their flags bound to qlogs.Config (tests run it through
// cli.Tool.RunMain). Flags may also follow the subcommand and the files.
func tool() *cli.Tool { return qlogs.Tool(os.Stdout) }
