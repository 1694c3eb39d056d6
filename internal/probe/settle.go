package probe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/doqscan/doqscan/internal/store"
)

// resumedPort is the summary of a port an earlier run of the scan finished.
func resumedPort(r store.ScanRunState, kind ProbeKind) PortSummary {
	ps := PortSummary{Port: uint16(r.Port), Probe: kind, Status: r.Status, ByKind: map[Kind]int64{}, RawOutput: r.RawOutput, Resumed: true}
	setIfPresent(&ps.ProbesSent, r.ProbesSent)
	setIfPresent(&ps.Replies, r.Replies)
	setIfPresent(&ps.Blocklisted, r.Blocklisted)
	return ps
}

// settlePort stores what the raw file of an earlier run of a port holds (idempotently)
// when that run did not end 'ok'. If zmap had finished the port (metaPath exists) and
// the file is whole, the port is done ('ok', not sent again); otherwise a run left
// 'running' is closed as 'interrupted' and the caller sends the port again.
func settlePort(ctx context.Context, c ScanConfig, scanID int64, port uint16, kind ProbeKind, r store.ScanRunState, dir string,
	cl *Classifier, log *slog.Logger) (PortSummary, bool, error) {
	ps := PortSummary{Port: port, Probe: kind, Status: r.Status, RawOutput: r.RawOutput, Resumed: true}
	if r.RawOutput == "" {
		return ps, false, nil
	}
	plog := log.With("port", port, "raw", r.RawOutput)
	var in *Ingest
	err := store.Retry(ctx, dbPolicy(c.DBWait), plog, "recover port", func(ctx context.Context) error {
		f, err := os.Open(r.RawOutput)
		if errors.Is(err, os.ErrNotExist) {
			plog.Warn("the earlier run's raw file is gone: nothing to recover", "status", r.Status)
			in = nil
			return nil
		}
		if err != nil {
			return err
		}
		defer f.Close()
		in = NewIngest(c.Store, scanID, cl, plog)
		if fp, _, err := ParseRawName(r.RawOutput); err == nil && len(fp) > 1 {
			in.Ports = fp
		}
		return IngestCSV(ctx, f, port, in)
	})
	if err != nil {
		return ps, false, fmt.Errorf("port %d: recover the earlier run's raw output: %w", port, err)
	}
	if in == nil {
		return ps, false, nil
	}
	meta, merr := ReadZmapMeta(metaFor(r.RawOutput))
	done := merr == nil && !in.Truncated && filepath.Dir(r.RawOutput) == mustAbs(dir)
	plog.Info("earlier run of the port recovered from its raw file", "status", r.Status, "zmap_finished", done,
		"lines", in.Lines, "replies", in.Replies, "rows_new", in.Inserted, "bad_lines", in.Bad, "truncated_last_line", in.Truncated)
	ps.Replies, ps.Inserted, ps.BadLines, ps.ByKind = in.Replies, in.Inserted, in.Bad, in.Counts[port]
	if len(in.Ports) > 1 {
		ps.Replies = countOf(in.Counts[port])
	}
	if ps.ByKind == nil {
		ps.ByKind = map[Kind]int64{}
	}
	status, sent := store.RunInterrupted, r.ProbesSent
	if done {
		ps.ProbesSent = meta.TotalSent / int64(max(len(in.Ports), 1))
		status, sent = store.RunOK, &ps.ProbesSent
		ps.PcapDrop, ps.SendFails = meta.PcapDrop, meta.SendToFailures
	} else if r.Status != store.RunRunning {
		return ps, false, nil
	}
	ps.Status = status
	err = store.Retry(ctx, dbPolicy(c.DBWait), plog, "recover port", func(ctx context.Context) error {
		return store.Unavailable(c.Store.FinishScanRun(ctx, scanID, r.Port, status, sent, &ps.Replies, r.Blocklisted))
	})
	return ps, done, err
}

// countOf is the number of replies of one port's counts.
func countOf(byKind map[Kind]int64) int64 {
	var n int64
	for _, v := range byKind {
		n += v
	}
	return n
}
