// Command qlogs explains QUIC handshakes from qlog files of any vintage and exports a
// campaign's stored qlogs for qvis. The logic lives in internal/measure/qlogs.
package main

import (
	"context"
	"flag"
	"log/slog"
	"math"
	"os"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/measure/qlogs"
)

func main() { cli.Main(command()) }

// command binds the flags to qlogs.Config and returns the run function (tests call it
// through cli.RunMain). Flags may also follow the subcommand and the files.
func command() (*flag.FlagSet, *cli.Common, cli.RunFunc) {
	var common cli.Common
	var cfg qlogs.Config
	fs := cli.NewFlagSet(qlogs.Cmd, &common)
	cli.Int64Var(fs, &cfg.Export.CampaignID, "campaign", 0, 0, math.MaxInt64, "export: the campaign id")
	fs.StringVar(&cfg.Hour, "hour", "", "export: the hourly round (2026-11-22T04, or RFC 3339) whose campaign to export")
	fs.StringVar(&cfg.Export.Vantage, "vantage", "local", "export with --hour: vantage point id")
	fs.StringVar(&cfg.Export.Label, "label", "hourly", "export with --hour: campaign label")
	fs.StringVar(&cfg.Export.Out, "out", "", "export: directory to write the files into")
	cli.DurationVar(fs, &cfg.RTT, "rtt", 0, 0, qlogs.MaxRTT, "analyze: the path RTT that groups packets into flights (0: each qlog's own min_rtt)")
	return fs, &common, func(ctx context.Context, log *slog.Logger, args []string) error {
		return qlogs.Command(ctx, log, cfg, args, os.Stdout)
	}
}
