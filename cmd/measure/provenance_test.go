package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/cli/clitest"
	"github.com/doqscan/doqscan/internal/provenance"
	"github.com/doqscan/doqscan/internal/store/storetest"
)

// TestDeprecatedNameFlag: --name still sets the query name (its bad value is refused as
// --query-name's) and logs a deprecation warning.
func TestDeprecatedNameFlag(t *testing.T) {
	storetest.UseDatabase(t)
	missing := filepath.Join(t.TempDir(), "absent.txt")
	code, out := clitest.Run(t, command, "--name", "a..b", "--targets", missing)
	if code != cli.ExitUsage || !strings.Contains(out, `--query-name "a..b"`) || !strings.Contains(out, "deprecated flag") {
		t.Fatalf("exit %d, stderr %q; want %d, a deprecation warning and --query-name's error", code, out, cli.ExitUsage)
	}
	if code, out := clitest.Run(t, command, "--query-name", "a..b", "--targets", missing); strings.Contains(out, "deprecated") || code != cli.ExitUsage {
		t.Fatalf("--query-name: exit %d, stderr %q", code, out)
	}
}

// TestRoundRecordsProvenance: a round (here of one closed loopback port) stores the vantage point's
// location and contact and the campaign's provenance.
func TestRoundRecordsProvenance(t *testing.T) {
	url := storetest.UseDatabase(t)
	targets := clitest.WriteFile(t, t.TempDir(), "loopback.txt", "127.0.0.1 doudp=9\n")
	want := provenance.Vantage{ID: "fra1", Location: "Frankfurt, DE", Contact: "noc@example.org"}
	code, out := clitest.Run(t, command, "--targets", targets, "--protocols", "doudp", "--timeout", "200ms", "--rtt-samples", "1",
		"--hour", "2026-11-22T04", "--vantage", want.ID,
		"--vantage-location", want.Location, "--vantage-contact", want.Contact)
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, out)
	}
	clitest.RunProvenance(t, url, "campaigns", "hourly", "measure", want)
}

// TestMissingBlocklistDir: a missing blocklist directory (given, or the default under
// DOQSCAN_HOME) stops the round with exit code 5 (it used to run without the blocklist).
func TestMissingBlocklistDir(t *testing.T) {
	storetest.UseDatabase(t)
	clitest.MissingBlocklistDir(t, command)
}
