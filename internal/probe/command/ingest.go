package command

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/listfile"
	"github.com/doqscan/doqscan/internal/probe"
)

func ingestFlags(fs *flag.FlagSet) runFunc {
	var raw string
	fs.StringVar(&raw, "raw", "", "a raw zmap CSV file kept by a scan (also positional)")
	return func(ctx context.Context, log *slog.Logger, args []string) error {
		files := args
		if raw != "" {
			files = append([]string{raw}, files...)
		}
		if len(files) == 0 {
			return cli.Usagef("want at least one raw CSV file")
		}
		for _, f := range files { // before the database: a missing file is the caller's mistake
			fh, err := listfile.Open(f) // a FIFO or directory: an error, never a wait (exit 5)
			if err != nil {
				return fmt.Errorf("raw CSV file: %w", err)
			}
			fh.Close()
		}
		s, err := cli.OpenStore(ctx, log)
		if err != nil {
			return err
		}
		defer s.Close()
		var failed error
		for _, f := range files {
			r, err := probe.Replay(ctx, s, f, log)
			if r != nil {
				log.Info("replayed", "file", f, "scan_id", r.ScanID, "port", r.Port, "lines", r.Lines, "replies", r.Replies,
					"rows_new", r.Inserted, "bad_lines", r.Bad, "bad_line_numbers", r.BadLines, "truncated_last_line", r.Truncated,
					"zmap_finished", r.Complete, "port_status", r.Status, "scan_status", r.ScanStatus, "by_kind", r.ByKind)
				fmt.Println(replayLine(f, r))
			}
			switch {
			case errors.Is(err, os.ErrNotExist):
				return cli.Environmentf("%v", err)
			case errors.Is(err, probe.ErrNothingRecovered):
				log.Error("nothing recovered", "file", f, "err", err)
				failed = errors.Join(failed, err)
			case err != nil:
				return err
			}
		}
		return failed
	}
}

// replayLine is the one-line account of a replay printed on stdout.
func replayLine(f string, r *probe.ReplayResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: scan %d port %d: %d lines, %d replies, %d new rows, %d bad lines", f, r.ScanID, r.Port,
		r.Lines, r.Replies, r.Inserted, r.Bad)
	if len(r.BadLines) > 0 {
		fmt.Fprintf(&b, " (line %s)", strings.Trim(fmt.Sprint(r.BadLines), "[]"))
	}
	if r.Truncated {
		b.WriteString(", last line cut off (not parsed)")
	}
	if !r.Complete {
		b.WriteString("; zmap did not finish this port (no metadata file)")
	}
	fmt.Fprintf(&b, "; port %s, scan %s", r.Status, r.ScanStatus)
	return b.String()
}
