package qlogs

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"time"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/measure/campaign"
)

// Tool is the qlogs command: the subcommands analyze and export, their flags bound to a
// Config; results go to stdout.
func Tool(stdout io.Writer) *cli.Tool {
	var cfg Config
	return &cli.Tool{Command: Cmd, Subcommands: []cli.Subcommand{
		{Name: "analyze", Summary: "explain the handshake of each qlog file (one JSON line per file)",
			Usage: "qlogs analyze [--rtt D] FILE|DIR...",
			Notes: analyzeNotes,
			Examples: []string{
				"qlogs analyze ../shared/datasets/dns-analysis-2021/qlog-sample/      # one JSON line per file (quic-go v0.21 draft-02 NDJSON)",
				"qlogs analyze client.sqlog old.qlog.gz | jq -c 'select(.cause != \"1rtt\")'",
				"qlogs analyze --rtt 5ms client.sqlog                                # flights grouped by a path RTT measured apart",
			},
			Flags: func(fs *flag.FlagSet) cli.RunFunc {
				cli.DurationVar(fs, &cfg.RTT, "rtt", 0, 0, MaxRTT, "the path RTT that groups packets into flights (0: each qlog's own min_rtt)")
				return func(ctx context.Context, log *slog.Logger, args []string) error {
					cfg.Paths = args
					return RunAnalyze(ctx, cfg, stdout, log)
				}
			}},
		{Name: "export", Summary: "write a campaign's stored qlogs as files to open in qvis",
			Usage: "qlogs export (--campaign ID | --hour HOUR [--vantage V] [--label L]) --out DIR",
			Notes: exportNotes,
			Examples: []string{
				"qlogs export --campaign 42 --out /tmp/qlogs                          # .sqlog/.qlog files to open in qvis",
				"qlogs export --vantage vp2 --hour 2026-11-22T04 --out /tmp/qlogs     # the campaign of that hourly round",
			},
			Flags: func(fs *flag.FlagSet) cli.RunFunc {
				cli.Int64Var(fs, &cfg.Export.CampaignID, "campaign", 0, 0, math.MaxInt64, "the campaign id")
				fs.StringVar(&cfg.Hour, "hour", "", "the hourly round (2026-11-22T04, or RFC 3339) whose campaign to export")
				fs.StringVar(&cfg.Export.Vantage, "vantage", "local", "with --hour: vantage point id")
				fs.StringVar(&cfg.Export.Label, "label", "hourly", "with --hour: campaign label")
				fs.StringVar(&cfg.Export.Out, "out", "", "directory to write the files into")
				return func(ctx context.Context, log *slog.Logger, args []string) error {
					cfg.Paths = args
					return RunExport(ctx, cfg, stdout, log)
				}
			}},
	}}
}

// Cmd describes `qlogs` for --help.
var Cmd = cli.Command{
	Name:    "qlogs",
	Summary: "explain QUIC handshakes from qlog files of any vintage; export a campaign's stored qlogs for qvis",
	Usage:   "qlogs [flags] analyze FILE|DIR...\n  qlogs [flags] export (--campaign ID | --hour HOUR [--vantage V] [--label L]) --out DIR",
	Examples: []string{
		"qlogs analyze ../shared/datasets/dns-analysis-2021/qlog-sample/      # one JSON line per file (quic-go v0.21 draft-02 NDJSON)",
		"qlogs analyze client.sqlog old.qlog.gz | jq -c 'select(.cause != \"1rtt\")'",
		"qlogs analyze --rtt 5ms client.sqlog                                # flights grouped by a path RTT measured apart",
		"qlogs export --campaign 42 --out /tmp/qlogs                          # .sqlog/.qlog files to open in qvis",
		"qlogs export --vantage vp2 --hour 2026-11-22T04 --out /tmp/qlogs     # the campaign of that hourly round",
	},
	Notes: analyzeNotes + "\n\n" + exportNotes,
}

const analyzeNotes = `analyze reads quic-go's JSON-SEQ (.sqlog, today), the qlog draft-02 NDJSON that quic-go
v0.21 to v0.2x wrote, qlog JSON documents ({"traces":[...]}) and a JSON array of NDJSON
records, each gzip-compressed or not (detected from the bytes, not the name). A directory
(or a link to one) means every file under it, links followed. A FIFO, socket, device, link
to nothing or empty directory gets an "unreadable" line; the other paths are still read. Each line has file, format, odcid, quic_version,
handshake_complete, retry, version_negotiation, amplification_stall, loss, round_trips,
cause (as in handshake_analyses); a file cut short is analysed up to the cut and marked
"truncated"; a file that cannot be analysed has "error": {"class", "message"} with class
unreadable, not-qlog, too-large or no-packets. --rtt gives the path RTT that groups
packets into flights (as the measure stage does with its RTT probe); without it each
qlog's own min_rtt is used, which CPU load can inflate on a short path. Exit code 5 if a file could not be read,
else 1 if one could not be analysed, else 0.`

const exportNotes = `export writes one file per stored qlog of the campaign into --out: a single trace as
quic-go wrote it (JSON-SEQ, .sqlog); the traces of a dial with Version Negotiation as one
qlog JSON document (.qlog). Both open in qvis. Exporting again rewrites the same files.
Exit code 2 if the campaign does not exist. See docs/qlogs.md.`

// MaxRTT bounds --rtt (a path RTT; the testbed's longest is 300 ms).
const MaxRTT = time.Minute

// Config is what the flags and arguments of `qlogs` ask for.
type Config struct {
	Paths []string // analyze: files and directories; export: none
	// RTT, for analyze: the path RTT measured apart from the qlogs (0: each qlog's own
	// min_rtt).
	RTT    time.Duration
	Export ExportConfig
	Hour   string // export: the round's hour (an hour key or RFC 3339), instead of Export.CampaignID
}

// RunAnalyze runs `qlogs analyze`: one JSON line per file of cfg.Paths on stdout. A file
// that could not be read is exit code 5.
func RunAnalyze(ctx context.Context, cfg Config, stdout io.Writer, log *slog.Logger) error {
	if len(cfg.Paths) == 0 {
		return cli.Usagef("analyze: want at least one FILE or DIR")
	}
	if err := cli.InRange("rtt", cfg.RTT, 0, MaxRTT); err != nil {
		return err
	}
	err := Analyze(ctx, cfg.Paths, cfg.RTT, stdout, log)
	if errors.Is(err, ErrUnreadable) {
		return &cli.ExitError{Code: cli.ExitEnvironment, Err: err}
	}
	return err
}

// RunExport runs `qlogs export`: the files written, one a line, on stdout. A campaign
// that does not exist is a usage error (exit code 2).
func RunExport(ctx context.Context, cfg Config, stdout io.Writer, log *slog.Logger) error {
	ec := cfg.Export
	if len(cfg.Paths) > 0 {
		return cli.Usagef("export: unexpected arguments %v", cfg.Paths)
	}
	if ec.Out == "" {
		return cli.Usagef("export: --out DIR is required")
	}
	switch {
	case ec.CampaignID != 0 && cfg.Hour != "":
		return cli.Usagef("export: --campaign and --hour both name a campaign: give one")
	case ec.CampaignID == 0 && cfg.Hour == "":
		return cli.Usagef("export: name the campaign: --campaign ID or --hour HOUR")
	case ec.CampaignID < 0:
		return cli.Usagef("export: --campaign %d is not an id", ec.CampaignID)
	case cfg.Hour != "":
		h, err := campaign.ParseRoundHour(cfg.Hour, "")
		if err != nil {
			return cli.Usagef("--hour: %v", err)
		}
		ec.Hour = h
	}
	s, err := cli.OpenStore(ctx, log)
	if err != nil {
		return err
	}
	defer s.Close()
	files, err := Export(ctx, s, ec, log)
	if errors.Is(err, ErrNoCampaign) {
		return &cli.ExitError{Code: cli.ExitUsage, Err: err}
	}
	for _, f := range files {
		fmt.Fprintln(stdout, f)
	}
	return err
}
