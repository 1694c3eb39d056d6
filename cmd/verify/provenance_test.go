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

// TestRunRecordsVantageAndProvenance: a verification run stores the vantage point's
// location and contact given by flag (or, for another vantage, by environment) and its
// provenance: this tool, this build, the vantage point.
func TestRunRecordsVantageAndProvenance(t *testing.T) {
	url := storetest.NewDatabase(t)
	t.Setenv("DATABASE_URL", url)
	empty := filepath.Join(t.TempDir(), "none.txt")
	if err := os.WriteFile(empty, []byte("# no targets\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out := run(t, "--targets", empty, "--week", "2026-W47", "--label", "prov",
		"--vantage", "fra1", "--vantage-location", "Frankfurt, DE", "--vantage-contact", "noc@example.org")
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, out)
	}
	t.Setenv(cli.EnvVantage, "ams2")
	t.Setenv(cli.EnvVantageLocation, "Amsterdam, NL")
	t.Setenv(cli.EnvVantageContact, "ops@example.net")
	if code, out := run(t, "--targets", empty, "--week", "2026-W47", "--label", "prov"); code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, out)
	}

	s, err := store.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, want := range []provenance.Vantage{
		{ID: "fra1", Location: "Frankfurt, DE", Contact: "noc@example.org"},
		{ID: "ams2", Location: "Amsterdam, NL", Contact: "ops@example.net"},
	} {
		var loc, contact string
		var raw []byte
		err := s.Pool.QueryRow(context.Background(), `SELECT v.location, v.contact, r.provenance
			FROM vantage_points v JOIN verification_runs r USING (vantage_id) WHERE vantage_id = $1 AND r.label = 'prov'`,
			want.ID).Scan(&loc, &contact, &raw)
		if err != nil {
			t.Fatalf("%s: %v", want.ID, err)
		}
		if loc != want.Location || contact != want.Contact {
			t.Errorf("%s: vantage_points location/contact %q/%q, want %q/%q", want.ID, loc, contact, want.Location, want.Contact)
		}
		var recs []provenance.Record
		if err := json.Unmarshal(raw, &recs); err != nil || len(recs) != 1 {
			t.Fatalf("%s: provenance %s (%v): want one record", want.ID, raw, err)
		}
		r := recs[0]
		if r.Tool != "verify" || r.Vantage != want || r.Build != provenance.ReadBuild() || r.Host == "" {
			t.Errorf("%s: provenance %+v", want.ID, r)
		}
	}
}

// TestMissingBlocklistDir: a blocklist directory that does not exist stops the run with
// exit code 5 before anything is contacted (it used to mean "no blocklist").
func TestMissingBlocklistDir(t *testing.T) {
	t.Setenv("DATABASE_URL", storetest.NewDatabase(t))
	missing := filepath.Join(t.TempDir(), "blocklist")
	empty := filepath.Join(t.TempDir(), "none.txt")
	os.WriteFile(empty, nil, 0o644)
	code, out := run(t, "--targets", empty, "--blocklist-dir", missing)
	if code != cli.ExitEnvironment || !strings.Contains(out, missing) {
		t.Fatalf("exit %d, stderr %q; want %d naming %s", code, out, cli.ExitEnvironment, missing)
	}
	// The default follows DOQSCAN_HOME; an installation without blocklist/ is refused too.
	t.Setenv("DOQSCAN_HOME", t.TempDir())
	code, out = run(t, "--targets", empty)
	if code != cli.ExitEnvironment || !strings.Contains(out, "blocklist") {
		t.Fatalf("DOQSCAN_HOME without blocklist/: exit %d, stderr %q; want %d", code, out, cli.ExitEnvironment)
	}
	if code, out = run(t, "--targets", empty, "--blocklist-dir", ""); code != cli.ExitUsage {
		t.Fatalf("empty --blocklist-dir: exit %d, stderr %q; want %d", code, out, cli.ExitUsage)
	}
}
