package main

import (
	"path/filepath"
	"testing"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/cli/clitest"
	"github.com/doqscan/doqscan/internal/store/storetest"
)

// run runs measure in-process through the real flag parsing and returns its exit code
// and stderr.
func run(t *testing.T, args ...string) (int, string) {
	t.Helper()
	return clitest.Run(t, command, args...)
}

// TestBadFlagsExitUsage: every numeric flag out of its range is refused with exit code 2
// and a message naming the flag, before anything runs (none is replaced by its default).
func TestBadFlagsExitUsage(t *testing.T) {
	t.Setenv("DATABASE_URL", storetest.NewDatabase(t))
	missing := filepath.Join(t.TempDir(), "absent.txt") // reached only if the flags pass
	usage := func(flag, value string) clitest.Case {
		return clitest.Case{Args: []string{flag, value}, Code: cli.ExitUsage, Want: flag}
	}
	clitest.OneLineErrors(t, command, []clitest.Case{
		usage("--concurrency", "-5"),
		usage("--concurrency", "0"),
		usage("--concurrency", "100000"),
		usage("--timeout", "0s"),
		usage("--timeout", "-1s"),
		usage("--timeout", "3h"),
		usage("--rtt-samples", "-3"),
		usage("--rtt-samples", "0"),
		usage("--rtt-samples", "100000"),
		usage("--persistent", "1"),
		usage("--persistent", "-2"),
		usage("--persistent", "5000"),
		usage("--spread", "-1s"),
		usage("--spread", "2h"),
		usage("--every", "30m"),
		usage("--every", "90m"),
		usage("--every", "1000h"),
		usage("--run-id", "-1"),
		usage("--query-name", "a..b"),
		usage("--vantage", ""),
		usage("--protocols", "smtp"),
		usage("--modes", "warm"),
		usage("--key-shares", "p256"),
		usage("--doh-variants", "PUT"),
		usage("--db-deadline", "0s"),
		usage("--hour", "yesterday"),
		{Args: []string{"--hour", "2026-11-22T04", "--every", "1h"}, Code: cli.ExitUsage, Want: "--hour"},
		{Args: []string{"--concurrency", "x"}, Code: cli.ExitUsage, Want: "-concurrency"},
		{Args: []string{"stray"}, Code: cli.ExitUsage, Want: "unexpected arguments"},
	}, "--targets", missing)
}

// TestTargetsFileErrors: a missing targets file is a missing prerequisite (5); a bad or
// 200 KB line is bad input (2), and the message names the file and the line.
func TestTargetsFileErrors(t *testing.T) {
	t.Setenv("DATABASE_URL", storetest.NewDatabase(t))
	clitest.TargetsFileErrors(t, command, "127.0.0.1\n\n127.0.0.2 doq=853/h2\n")
}

// TestHelp: --help exits 0; the help names the flags and examples.
func TestHelp(t *testing.T) {
	clitest.Help(t, command, "measure [flags]", "-key-shares string", "-hour string", "measure --every 1h")
}
