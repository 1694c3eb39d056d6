// Command dbctl manages doqscan's database: start the private cluster, apply the schema,
// print the connection URL and the partitions, archive old partitions, set up a central
// database for a fleet of vantage points, stop it. The subcommands and their flags live
// in internal/store/dbctl.
package main

import (
	"os"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/store/dbctl"
)

func main() { tool().Main() }

// tool is dbctl's subcommands, their flags bound to dbctl.Options (tests run it through
// cli.Tool.RunMain).
func tool() *cli.Tool { return dbctl.Tool(os.Stdout) }
