package store_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/store"
	"github.com/doqscan/doqscan/internal/store/pgcluster"
	"github.com/doqscan/doqscan/internal/store/storetest"
)

// Retention detaches, exports, verifies and only then drops a partition older than the
// age kept; one whose export fails stays detached (its rows in the database, refused
// for new writes) and the next run finishes it. A dropped month is never re-created.
func TestRetentionArchivesBeforeDropping(t *testing.T) {
	bin, err := pgcluster.BinDir()
	if err != nil {
		t.Skipf("SKIP: no PostgreSQL binaries for pg_dump: %v", err)
	}
	s, url := storetest.OpenURL(t)
	ctx := context.Background()
	f := newFixture(t, s) // November 2026, ISO week 47
	insertAll(t, s, f)
	old := time.Date(2026, 1, 10, 3, 0, 0, 0, time.UTC)
	cid, _, err := s.StartCampaign(ctx, store.Campaign{VantageID: "vp-test", RoundHour: old})
	if err != nil {
		t.Fatal(err)
	}
	m := f.measurements[0]
	k := store.MeasurementKey{CampaignID: cid, Address: m.Address, Protocol: "doq", Port: 784, Mode: "fresh", Phase: "measured"}
	m.MeasurementID, m.CampaignID, m.RoundHour, m.QlogID = k.ID(), cid, old, nil
	if _, err := store.Insert(ctx, s, store.TableMeasurements, []store.Measurement{m}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pol := store.RetentionPolicy{Keep: 180 * 24 * time.Hour, ArchiveDir: dir, DumpURL: "host=/nonexistent dbname=x",
		BinDir: bin, Now: time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)}
	var said []string
	err = s.Retain(ctx, pol, nil, func(l string) { said = append(said, l) })
	if err == nil {
		t.Fatal("retention with a pg_dump that cannot connect succeeded")
	}
	state := func(name string) string {
		var st string
		if err := s.Pool.QueryRow(ctx, `SELECT state FROM partition_archive WHERE partition = $1`, name).Scan(&st); err != nil {
			return "none: " + err.Error()
		}
		return st
	}
	first := "handshake_analyses_p2026_01" // the first partition retention takes
	if st := state(first); st != "detached" {
		t.Fatalf("%s after a failed export: state %q, want detached", first, st)
	}
	var exists bool
	if err := s.Pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, first).Scan(&exists); err != nil || !exists {
		t.Fatalf("%s was dropped although its export failed", first)
	}

	pol.DumpURL = url
	said = nil
	if err := s.Retain(ctx, pol, nil, func(l string) { said = append(said, l) }); err != nil {
		t.Fatalf("retention: %v", err)
	}
	for _, name := range []string{"measurements_p2026_01", "qlogs_p2026_01", "rtt_samples_p2026_01", first} {
		if st := state(name); st != "dropped" {
			t.Errorf("%s: state %q, want dropped", name, st)
		}
		if _, err := os.Stat(filepath.Join(dir, name+".dump")); err != nil {
			t.Errorf("%s: no archive file: %v", name, err)
		}
	}
	if st := state("measurements_p2026_11"); st != "none: no rows in result set" {
		t.Errorf("this month's partition: %q, want untouched", st)
	}
	var n int
	if err := s.Pool.QueryRow(ctx, `SELECT count(*) FROM measurements`).Scan(&n); err != nil || n != len(f.measurements) {
		t.Errorf("%d measurements left, want this month's %d", n, len(f.measurements))
	}
	// A late round for the dropped month is refused, not stored in a new partition.
	if _, _, err := s.StartCampaign(ctx, store.Campaign{VantageID: "vp-test", Label: "late", RoundHour: old}); err == nil {
		t.Error("a campaign in an archived month was accepted")
	}
	parts, err := s.Partitions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range parts {
		if p.Name == "measurements_p2026_01" {
			found = p.State == "dropped" && p.ExportLen > 0
		}
	}
	if !found {
		t.Errorf("Partitions does not list measurements_p2026_01 as dropped with its export: %+v", parts)
	}
}

// A partition ends at the first instant after its month or ISO week.
func TestPartitionEnd(t *testing.T) {
	for name, want := range map[string]string{
		"measurements_p2026_11":   "2026-12-01",
		"qlogs_p2026_12":          "2027-01-01",
		"scan_replies_p2026_w47":  "2026-11-23", // week 47 of 2026: Monday 16 November
		"scan_replies_p2026_w01":  "2026-01-05", // 2026-W01 starts on Monday 29 December 2025
		"scan_replies_p2020_w53":  "2021-01-04", // a 53-week year
		"bench_samples_p2026_01":  "2026-02-01",
		"handshake_analyses_junk": "",
	} {
		got, ok := store.PartitionEnd(name)
		if (want == "") != !ok || (ok && got.Format(time.DateOnly) != want) {
			t.Errorf("%s: %v %v, want %q", name, got, ok, want)
		}
	}
}
