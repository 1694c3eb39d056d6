package probe

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/probe/probetest"
	"github.com/doqscan/doqscan/internal/store"
	"github.com/doqscan/doqscan/internal/store/storetest"
)

// TestStreamCSVRawBeforeDB: while zmap is still writing (the pipe stays open), every
// reply that reached the database is already in the raw file on disk, so a zprobe
// killed at that moment leaves a raw file that holds at least what the database holds.
func TestStreamCSVRawBeforeDB(t *testing.T) {
	s := storetest.OpenVantage(t, "raw")
	ctx := context.Background()
	scanID, _, err := s.StartScan(ctx, store.Scan{ISOWeek: "2026-W47", VantageID: "raw", Ports: []int32{784}})
	if err != nil {
		t.Fatal(err)
	}
	data := syntheticCSV(t, 3000)
	rawPath := filepath.Join(t.TempDir(), "784.csv")
	raw, err := os.Create(rawPath)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	pr, pw := io.Pipe()
	in := NewIngest(s, scanID, testClassifier(t), nil)
	done := make(chan error, 1)
	go func() { done <- StreamCSV(ctx, pr, raw, 784, in, 50*time.Millisecond) }()
	if _, err := pw.Write(data); err != nil {
		t.Fatal(err)
	}
	// zmap's output stays open: wait until the rows of the written lines are in the
	// database (the stream flushes them every 50 ms).
	deadline := time.Now().Add(time.Minute)
	var n int64
	for n < 3000 {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of 3000 rows reached the database", n)
		}
		if err := s.Pool.QueryRow(ctx, "SELECT count(*) FROM scan_replies WHERE scan_id = $1", scanID).Scan(&n); err != nil {
			t.Fatal(err)
		}
	}
	onDisk := probetest.RawAddrs(t, rawPath)
	rows, err := store.SelectTable[store.ScanReply](ctx, s, store.TableScanReplies, "address")
	if err != nil {
		t.Fatal(err)
	}
	missing := 0
	for _, r := range rows {
		if !onDisk[r.Address] {
			missing++
		}
	}
	if missing > 0 {
		t.Fatalf("%d of %d rows in the database are not in the raw file on disk (%d lines there) while zmap still runs",
			missing, len(rows), len(onDisk))
	}
	pw.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(rawPath)
	if !bytes.Equal(got, data) {
		t.Fatal("raw file differs from zmap's output")
	}
}

// replayDir is a scan directory with the probes and manifest of one QUIC port (853).
func replayDir(t *testing.T) string {
	return scanDir(t, `"853":"quic-vn"`, "198.19.0.0/16", nil)
}

func runStatus(t *testing.T, s *store.Store, port int32) (scan, run store.RunStatus) {
	t.Helper()
	st, found, err := s.FindScan(context.Background(), "2026-W47", "test", "weekly", 0)
	if err != nil || !found {
		t.Fatalf("scan not found: %v", err)
	}
	return st.Status, st.Runs[port].Status
}

// TestReplayEmptyAndPartial: a replay says what it found in an empty or partial raw
// file (lines, replies, bad line numbers, a cut last line), does not claim success for
// an empty file of a port zmap did not finish, and settles the run left 'running' by a
// killed scan ('interrupted'; 'ok' once zmap's metadata shows the port finished).
func TestReplayEmptyAndPartial(t *testing.T) {
	s := storetest.Open(t)
	ctx := context.Background()
	dir := replayDir(t)
	csv := filepath.Join(dir, "853.csv")
	// A scan killed on port 853: its rows stay 'running'.
	if err := s.EnsureVantage(ctx, store.Vantage{ID: "test"}); err != nil {
		t.Fatal(err)
	}
	id, _, err := s.StartScan(ctx, store.Scan{ISOWeek: "2026-W47", VantageID: "test", Ports: []int32{853}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.StartScanRun(ctx, store.ScanRun{ScanID: id, Port: 853, ProbeKind: "quic-vn", RawOutput: csv}); err != nil {
		t.Fatal(err)
	}

	os.WriteFile(csv, nil, 0o644)
	r, err := Replay(ctx, s, csv, nil)
	if !errors.Is(err, ErrNothingRecovered) || r == nil || r.Lines != 0 {
		t.Fatalf("empty file: %+v %v, want ErrNothingRecovered", r, err)
	}
	if sc, run := runStatus(t, s, 853); sc != "interrupted" || run != "interrupted" {
		t.Errorf("after replaying an empty file: scan %s, port %s; want interrupted, interrupted", sc, run)
	}

	// Partial: the header and 100 lines, line 5 garbled, then 40 bytes of line 102.
	data := syntheticCSV(t, 101)
	lines := strings.SplitAfter(string(data), "\n")
	lines[4] = "garbage,line\n"
	partial := strings.Join(lines[:101], "") + lines[101][:40]
	os.WriteFile(csv, []byte(partial), 0o644)
	r, err = Replay(ctx, s, csv, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Lines != 100 || r.Replies != 99 || r.Bad != 1 || len(r.BadLines) != 1 || r.BadLines[0] != 5 || !r.Truncated || r.Complete {
		t.Errorf("partial file: %+v; want 100 lines, 99 replies, bad line 5, truncated, not complete", r)
	}
	if r.Status != "interrupted" || r.ScanStatus != "interrupted" {
		t.Errorf("partial file without zmap's metadata: port %s, scan %s; want interrupted", r.Status, r.ScanStatus)
	}

	// zmap finished the port (metadata) and the file is whole: the port and the scan are ok.
	os.WriteFile(csv, data, 0o644)
	os.WriteFile(filepath.Join(dir, "853.meta.json"), []byte(`{"total_sent": 65536}`), 0o644)
	r, err = Replay(ctx, s, csv, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != "ok" || r.ScanStatus != "ok" || r.Truncated || r.Replies != 101 || r.Inserted != 2 {
		t.Errorf("complete file: %+v; want ok/ok, 101 replies, 2 new rows", r)
	}
}

// TestStreamCSVFullDiskIsNotTheDatabase: a raw file that cannot be written (a full disk:
// /dev/full answers every write with ENOSPC) stops the stream with the file's error,
// which is not "database unavailable" (it was: exit code 3, and the rows were counted as
// deferred to a raw file that never held them). No row reaches the database before its
// line is on disk.
func TestStreamCSVFullDiskIsNotTheDatabase(t *testing.T) {
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skipf("/dev/full: %v (needed to simulate a full disk)", err)
	}
	defer full.Close()
	s := storetest.OpenVantage(t, "full")
	ctx := context.Background()
	scanID, _, err := s.StartScan(ctx, store.Scan{ISOWeek: "2026-W47", VantageID: "full", Ports: []int32{784}})
	if err != nil {
		t.Fatal(err)
	}
	in := NewIngest(s, scanID, testClassifier(t), nil)
	err = StreamCSV(ctx, bytes.NewReader(syntheticCSV(t, 3000)), full, 784, in, 50*time.Millisecond)
	if err == nil || !errors.Is(err, syscall.ENOSPC) || store.IsUnavailable(err) || errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("StreamCSV onto a full disk: %v; want ENOSPC, not the database's unavailability", err)
	}
	if in.Deferred != 0 {
		t.Errorf("%d rows counted as deferred to a raw file that holds none of them", in.Deferred)
	}
	var n int64
	if err := s.Pool.QueryRow(ctx, "SELECT count(*) FROM scan_replies WHERE scan_id = $1", scanID).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d rows in the database (%v) whose lines never reached the raw file", n, err)
	}
	t.Log(err)
}
