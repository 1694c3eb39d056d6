package main

import (
	"path/filepath"
	"testing"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/cli/clitest"
	"github.com/doqscan/doqscan/internal/store/storetest"
)

// TestBadFlags: every flag out of its range or malformed is refused with exit code 2 and
// a message naming it, before anything runs; a missing targets file is 5.
func TestBadFlags(t *testing.T) {
	storetest.UseDatabase(t)
	missing := filepath.Join(t.TempDir(), "absent.txt")
	clitest.OneLineErrors(t, command, []clitest.Case{
		clitest.Usage("--concurrency", "--concurrency", "0"),
		clitest.Usage("--concurrency", "--concurrency", "100000"),
		clitest.Usage("--max-queries", "--max-queries", "0"),
		clitest.Usage("--streams", "--streams", "1000"),
		clitest.Usage("--timeout", "--timeout", "1h"),
		clitest.Usage("--idle-waits", "--idle-waits", "soon"),
		clitest.Usage("--idle-waits", "--idle-waits", "2h"),
		clitest.Usage("--token-ages", "--token-ages", "later"),
		clitest.Usage("--token-ages", "--token-ages", "-1s"),
		clitest.Usage("--token-ages", "--token-ages", "2h"),
		clitest.Usage("--initial-sizes", "--initial-sizes", "1100"),
		clitest.Usage("--initial-sizes", "--initial-sizes", "big"),
		clitest.Usage("--key-shares", "--key-shares", "p256"),
		clitest.Usage("--protocols", "--protocols", "doudp"),
		clitest.Usage("--week", "--week", "2026-47"),
		clitest.Usage("--run-id", "--run-id", "-1"),
		clitest.Usage("--sample", "--sample", "-1"),
		clitest.Usage("--rtt-samples", "--rtt-samples", "-1"),
		clitest.Usage("--rtt-samples", "--rtt-samples", "101"),
		clitest.Usage("--only", "--only", "198.19.1.0"),
		clitest.Usage("--vantage", "--vantage", ""),
		clitest.Usage("unexpected arguments", "stray"),
		{Args: []string{"--targets", missing}, Code: cli.ExitEnvironment, Want: "absent.txt"},
	})
}

// TestHelp: --help exits 0; the help names the flags, examples and exit codes.
func TestHelp(t *testing.T) {
	clitest.Help(t, command, "conncheck [flags]", "-idle-waits string", "-token-ages string", "-initial-sizes string", "conncheck --targets resolvers.txt")
}
