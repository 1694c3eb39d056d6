package main

import (
	"path/filepath"
	"testing"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/cli/clitest"
	"github.com/doqscan/doqscan/internal/listfile/listfiletest"
	"github.com/doqscan/doqscan/internal/store/storetest"
)

// TestBadFlags: every flag out of its range or malformed is refused with exit code 2 and
// a message naming it, before anything runs; a missing file a flag names is 5.
func TestBadFlags(t *testing.T) {
	storetest.UseDatabase(t)
	missing := filepath.Join(t.TempDir(), "absent.txt") // reached only if the flags pass
	clitest.OneLineErrors(t, command, []clitest.Case{
		clitest.Usage("--concurrency", "--concurrency", "-5"),
		clitest.Usage("--concurrency", "--concurrency", "0"),
		clitest.Usage("--concurrency", "--concurrency", "1000000"),
		clitest.Usage("--rate", "--rate", "-1"),
		clitest.Usage("--rate", "--rate", "NaN"),
		clitest.Usage("--rate", "--rate", "1e9"),
		clitest.Usage("--batch", "--batch", "0"),
		clitest.Usage("--batch", "--batch", "10000000"),
		clitest.Usage("--progress", "--progress", "0s"),
		clitest.Usage("--progress", "--progress", "48h"),
		clitest.Usage("--handshake-timeout", "--handshake-timeout", "0s"),
		clitest.Usage("--handshake-timeout", "--handshake-timeout", "1h"),
		clitest.Usage("--query-timeout", "--query-timeout", "-1s"),
		clitest.Usage("--target-timeout", "--target-timeout", "0s"),
		clitest.Usage("--max-sni-attempts", "--max-sni-attempts", "-3"),
		clitest.Usage("--max-sni-attempts", "--max-sni-attempts", "1000"),
		clitest.Usage("--query-name", "--query-name", "a..b"),
		clitest.Usage("--ports", "--ports", "70000"),
		clitest.Usage("--alpns", "--alpns", "h3"),
		clitest.Usage("--quic-versions", "--quic-versions", "draft-29"),
		clitest.Usage("--sni-names", "--sni-names", "198.19.0.1"),
		clitest.Usage("--week", "--week", "2026-47"),
		clitest.Usage("--scan-id", "--scan-id", "-1"),
		clitest.Usage("--scan-id", "--scan-id", "3", "--week", "2026-W47"),
		clitest.Usage("--geoip-asn", "--geoip-city", "x.mmdb"),
		clitest.Usage("--vantage", "--vantage", ""),
		clitest.Usage("unexpected arguments", "stray"),
		{Args: []string{"--roots", "/nonexistent/roots.pem"}, Code: cli.ExitEnvironment, Want: "roots.pem"},
		{Args: []string{"--roots", listfiletest.FIFO(t, t.TempDir(), "roots.pem")}, Code: cli.ExitEnvironment, Want: "roots.pem: not a regular file: a named pipe"},
	}, "--targets", missing)
}

// TestTargetsFileErrors: a missing targets file is a missing prerequisite (5); a bad or
// 200 KB line is bad input (2), and the message names the file and the line.
func TestTargetsFileErrors(t *testing.T) {
	clitest.TargetsFileErrors(t, command, "127.0.0.1:853\n\n127.0.0.2:99999\n")
}

// TestHelp: --help exits 0; the help names the flags, examples and exit codes.
func TestHelp(t *testing.T) {
	clitest.Help(t, command, "verify [flags]", "-quic-versions string", "-scan-id int", "verify --targets hosts.txt")
}

// TestExitCodes runs the exit codes verify documents (docs/verify.md) that the other
// tests here do not: 0 (a run of an empty targets file), 3 and 4 from the database, 5 a
// missing blocklist directory.
func TestExitCodes(t *testing.T) {
	dir := t.TempDir()
	empty := clitest.WriteFile(t, dir, "none.txt", "# no target\n")
	args := []string{"--targets", empty, "--blocklist-dir", t.TempDir(), "--vantage", "exitcodes", "--label", "exitcodes"}
	cases := []clitest.ExitCase{
		{Code: cli.ExitOK, Why: "a run", Args: args, Env: map[string]string{"DATABASE_URL": storetest.NewDatabase(t)}},
		{Code: cli.ExitUsage, Why: "a flag out of range", Args: append([]string{"--rate", "NaN"}, args...)},
		{Code: cli.ExitEnvironment, Why: "missing blocklist directory", Args: append(args, "--blocklist-dir", filepath.Join(dir, "absent"))},
	}
	cases = append(cases, clitest.DatabaseCases(t, args...)...)
	clitest.ExitCodes(t, command, cases)
}
