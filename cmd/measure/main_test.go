package main

import (
	"path/filepath"
	"testing"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/cli/clitest"
	"github.com/doqscan/doqscan/internal/store/storetest"
)

// TestBadFlagsExitUsage: every numeric flag out of its range is refused with exit code 2
// and a message naming the flag, before anything runs (none is replaced by its default).
func TestBadFlagsExitUsage(t *testing.T) {
	storetest.UseDatabase(t)
	missing := filepath.Join(t.TempDir(), "absent.txt") // reached only if the flags pass
	clitest.OneLineErrors(t, command, []clitest.Case{
		clitest.Usage("--concurrency", "--concurrency", "-5"),
		clitest.Usage("--concurrency", "--concurrency", "0"),
		clitest.Usage("--concurrency", "--concurrency", "100000"),
		clitest.Usage("--timeout", "--timeout", "0s"),
		clitest.Usage("--timeout", "--timeout", "-1s"),
		clitest.Usage("--timeout", "--timeout", "3h"),
		clitest.Usage("--rtt-samples", "--rtt-samples", "-3"),
		clitest.Usage("--rtt-samples", "--rtt-samples", "0"),
		clitest.Usage("--rtt-samples", "--rtt-samples", "100000"),
		clitest.Usage("--persistent", "--persistent", "1"),
		clitest.Usage("--persistent", "--persistent", "-2"),
		clitest.Usage("--persistent", "--persistent", "5000"),
		clitest.Usage("--spread", "--spread", "-1s"),
		clitest.Usage("--spread", "--spread", "2h"),
		clitest.Usage("--every", "--every", "30m"),
		clitest.Usage("--every", "--every", "90m"),
		clitest.Usage("--every", "--every", "1000h"),
		clitest.Usage("--run-id", "--run-id", "-1"),
		clitest.Usage("--query-name", "--query-name", "a..b"),
		clitest.Usage("--vantage", "--vantage", ""),
		clitest.Usage("--protocols", "--protocols", "smtp"),
		clitest.Usage("--modes", "--modes", "warm"),
		clitest.Usage("--key-shares", "--key-shares", "p256"),
		clitest.Usage("--doh-variants", "--doh-variants", "PUT"),
		clitest.Usage("--db-deadline", "--db-deadline", "0s"),
		clitest.Usage("--hour", "--hour", "yesterday"),
		clitest.Usage("--hour", "--hour", "2026-11-22T04", "--every", "1h"),
		clitest.Usage("-concurrency", "--concurrency", "x"),
		clitest.Usage("--concurrency", "--concurrency", "4294967297"),
		clitest.Usage("--timeout", "--timeout", "9999999999h"),
		clitest.Usage("--run-id", "--run-id", "9223372036854775808"),
		clitest.Usage("--spread", "--spread", "NaN"),
		clitest.Usage("unexpected arguments", "stray"),
	}, "--targets", missing)
}

// TestTargetsFileErrors: a missing targets file is a missing prerequisite (5); a bad or
// 200 KB line is bad input (2), and the message names the file and the line.
func TestTargetsFileErrors(t *testing.T) {
	clitest.TargetsFileErrors(t, command, "127.0.0.1\n\n127.0.0.2 doq=853/h2\n")
}

// TestHelp: --help exits 0; the help names the flags and examples.
func TestHelp(t *testing.T) {
	clitest.Help(t, command, "measure [flags]", "-key-shares string", "-hour string", "measure --every 1h")
}

// TestExitCodes runs the exit codes measure documents (docs/measure.md) that the other
// tests here do not: 0 (a round of one loopback resolver whose port is closed: every
// exchange classified), 3 and 4 from the database, 5 a missing blocklist directory or
// no target at all.
func TestExitCodes(t *testing.T) {
	dir := t.TempDir()
	one := clitest.WriteFile(t, dir, "one.txt", "127.0.0.1 doudp=9\n")
	blocklistDir := t.TempDir()
	args := []string{"--targets", one, "--blocklist-dir", blocklistDir, "--vantage", "exitcodes", "--protocols", "doudp",
		"--modes", "fresh", "--rtt-samples", "1", "--timeout", "200ms"}
	cases := []clitest.ExitCase{
		{Code: cli.ExitOK, Why: "a round", Args: args, Env: map[string]string{"DATABASE_URL": storetest.NewDatabase(t)}},
		{Code: cli.ExitUsage, Why: "a flag out of range", Args: append([]string{"--concurrency", "0"}, args...)},
		{Code: cli.ExitEnvironment, Why: "missing blocklist directory", Args: append(args, "--blocklist-dir", filepath.Join(dir, "absent"))},
		{Code: cli.ExitEnvironment, Why: "no target", Args: append(args, "--targets", clitest.WriteFile(t, dir, "none.txt", "# none\n")),
			Env: map[string]string{"DATABASE_URL": storetest.NewDatabase(t)}},
	}
	cases = append(cases, clitest.DatabaseCases(t, args...)...)
	clitest.ExitCodes(t, command, cases)
}
