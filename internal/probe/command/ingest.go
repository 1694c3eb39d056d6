package command

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/probe"
)

func runIngest(ctx context.Context, log *slog.Logger, args []string) error {
	fs := sub("ingest", "zprobe ingest [--raw] FILE.csv...",
		"zprobe ingest var/scans/2026-W47/fra1/weekly-shard0/*.csv")
	var raw string
	fs.StringVar(&raw, "raw", "", "a raw zmap CSV file kept by a scan (also positional)")
	if err := parse(fs, args); err != nil {
		return ignoreHelp(err)
	}
	files := fs.Args()
	if raw != "" {
		files = append([]string{raw}, files...)
	}
	if len(files) == 0 {
		return cli.Usagef("want at least one raw CSV file")
	}
	s, err := cli.OpenStore(ctx, log)
	if err != nil {
		return err
	}
	defer s.Close()
	for _, f := range files {
		r, err := probe.Replay(ctx, s, f, log)
		if err != nil {
			return err
		}
		log.Info("replayed", "file", f, "scan_id", r.ScanID, "port", r.Port, "replies", r.Replies, "rows_new", r.Inserted,
			"bad_lines", r.Bad, "by_kind", r.ByKind)
		fmt.Printf("%s: scan %d port %d: %d replies, %d new rows, %d bad lines\n", f, r.ScanID, r.Port, r.Replies, r.Inserted, r.Bad)
	}
	return nil
}
