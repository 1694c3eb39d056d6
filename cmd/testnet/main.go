// Command testnet brings the simulated internet up and down, shows its status and runs
// commands inside its vantage namespaces. The subcommands and their flags live in
// internal/testbed/command, the testbed in internal/testbed.
package main

import (
	"os"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/testbed/command"
)

func main() { tool().Main() }

// tool is testnet's subcommands, their flags bound to command.Flags (tests run it
// through cli.Tool.RunMain).
func tool() *cli.Tool { return command.Tool(os.Stdout) }
