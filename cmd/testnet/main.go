// Command testnet brings the simulated internet up and down, shows its status and runs
// commands inside its vantage namespaces. The flags live in internal/testbed/command,
// the testbed in internal/testbed.
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/testbed/command"
)

func main() { cli.Main(cmd()) }

// cmd binds the flags to command.Flags and returns the run function (tests call it
// through cli.RunMain).
func cmd() (*flag.FlagSet, *cli.Common, cli.RunFunc) {
	var common cli.Common
	var f command.Flags
	fs := cli.NewFlagSet(command.Cmd, &common)
	f.Register(fs)
	return fs, &common, func(ctx context.Context, log *slog.Logger, args []string) error {
		return command.Run(ctx, log, f, args, os.Stdout)
	}
}
