package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/provenance"
	"github.com/doqscan/doqscan/internal/store"
	"github.com/doqscan/doqscan/internal/store/storetest"
)

// TestDeprecatedNameFlag: --name still sets the query name (its bad value is refused as
// --query-name's) and logs a deprecation warning.
func TestDeprecatedNameFlag(t *testing.T) {
	t.Setenv("DATABASE_URL", storetest.NewDatabase(t))
	missing := filepath.Join(t.TempDir(), "absent.txt")
	code, out := run(t, "--name", "a..b", "--targets", missing)
	if code != cli.ExitUsage || !strings.Contains(out, `--query-name "a..b"`) || !strings.Contains(out, "deprecated flag") {
		t.Fatalf("exit %d, stderr %q; want %d, a deprecation warning and --query-name's error", code, out, cli.ExitUsage)
	}
	if code, out := run(t, "--query-name", "a..b", "--targets", missing); strings.Contains(out, "deprecated") || code != cli.ExitUsage {
		t.Fatalf("--query-name: exit %d, stderr %q", code, out)
	}
}

// TestRoundRecordsProvenance: a round (here of one closed loopback port) stores the vantage point's
// location and contact and the campaign's provenance.
func TestRoundRecordsProvenance(t *testing.T) {
	url := storetest.NewDatabase(t)
	t.Setenv("DATABASE_URL", url)
	targets := filepath.Join(t.TempDir(), "loopback.txt")
	if err := os.WriteFile(targets, []byte("127.0.0.1 doudp=9\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	want := provenance.Vantage{ID: "fra1", Location: "Frankfurt, DE", Contact: "noc@example.org"}
	code, out := run(t, "--targets", targets, "--protocols", "doudp", "--timeout", "200ms", "--rtt-samples", "1",
		"--hour", "2026-11-22T04", "--vantage", want.ID,
		"--vantage-location", want.Location, "--vantage-contact", want.Contact)
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, out)
	}
	s, err := store.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var loc, contact string
	var raw []byte
	if err := s.Pool.QueryRow(context.Background(), `SELECT v.location, v.contact, c.provenance
		FROM vantage_points v JOIN campaigns c USING (vantage_id) WHERE vantage_id = $1`, want.ID).Scan(&loc, &contact, &raw); err != nil {
		t.Fatal(err)
	}
	var recs []provenance.Record
	if err := json.Unmarshal(raw, &recs); err != nil || len(recs) != 1 {
		t.Fatalf("provenance %s (%v): want one record", raw, err)
	}
	if loc != want.Location || contact != want.Contact || recs[0].Tool != "measure" || recs[0].Vantage != want ||
		recs[0].Build != provenance.ReadBuild() {
		t.Fatalf("vantage %q/%q, provenance %+v", loc, contact, recs[0])
	}
}

// TestMissingBlocklistDir: the default blocklist directory follows DOQSCAN_HOME; when it
// is missing the round stops with exit code 5 (it used to run without the blocklist).
func TestMissingBlocklistDir(t *testing.T) {
	t.Setenv("DATABASE_URL", storetest.NewDatabase(t))
	t.Setenv("DOQSCAN_HOME", t.TempDir())
	empty := filepath.Join(t.TempDir(), "none.txt")
	os.WriteFile(empty, nil, 0o644)
	code, out := run(t, "--targets", empty)
	if code != cli.ExitEnvironment || !strings.Contains(out, "blocklist") {
		t.Fatalf("exit %d, stderr %q; want %d naming the blocklist directory", code, out, cli.ExitEnvironment)
	}
}
