package main

import (
	"testing"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/cli/clitest"
	"github.com/doqscan/doqscan/internal/provenance"
	"github.com/doqscan/doqscan/internal/store/storetest"
)

// TestRunRecordsVantageAndProvenance: a verification run stores the vantage point's
// location and contact given by flag (or, for another vantage, by environment) and its
// provenance: this tool, this build, the vantage point.
func TestRunRecordsVantageAndProvenance(t *testing.T) {
	url := storetest.UseDatabase(t)
	empty := clitest.WriteFile(t, t.TempDir(), "none.txt", "# no targets\n")
	code, out := clitest.Run(t, command, "--targets", empty, "--week", "2026-W47", "--label", "prov",
		"--vantage", "fra1", "--vantage-location", "Frankfurt, DE", "--vantage-contact", "noc@example.org")
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, out)
	}
	t.Setenv(cli.EnvVantage, "ams2")
	t.Setenv(cli.EnvVantageLocation, "Amsterdam, NL")
	t.Setenv(cli.EnvVantageContact, "ops@example.net")
	if code, out := clitest.Run(t, command, "--targets", empty, "--week", "2026-W47", "--label", "prov"); code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, out)
	}
	for _, want := range []provenance.Vantage{
		{ID: "fra1", Location: "Frankfurt, DE", Contact: "noc@example.org"},
		{ID: "ams2", Location: "Amsterdam, NL", Contact: "ops@example.net"},
	} {
		clitest.RunProvenance(t, url, "verification_runs", "prov", "verify", want)
	}
}

// TestMissingBlocklistDir: a blocklist directory that does not exist (given, or the
// default under DOQSCAN_HOME) stops the run with exit code 5 before anything is
// contacted (it used to mean "no blocklist"); an empty --blocklist-dir is 2.
func TestMissingBlocklistDir(t *testing.T) {
	storetest.UseDatabase(t)
	clitest.MissingBlocklistDir(t, command)
}
