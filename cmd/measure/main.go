// Command measure is a stage of the doqscan pipeline (see README.md). Its logic lives in
// internal/; this main only parses flags.
package main

import (
	"context"
	"log/slog"

	"github.com/doqscan/doqscan/internal/cli"
)

var cmd = cli.Command{
	Name:    "measure",
	Summary: "not implemented yet: applies the schema and exits",
	Usage:   "measure [flags]",
}

func main() {
	var common cli.Common
	fs := cli.NewFlagSet(cmd, &common)
	cli.Main(fs, &common, func(ctx context.Context, log *slog.Logger, args []string) error {
		s, err := cli.OpenStore(ctx, log)
		if err != nil {
			return err
		}
		s.Close()
		return cli.Environmentf("measure is not implemented yet")
	})
}
