package main

import (
	"path/filepath"
	"testing"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/cli/clitest"
	"github.com/doqscan/doqscan/internal/store/storetest"
)

// run runs verify in-process through the real flag parsing and returns its exit code
// and stderr.
func run(t *testing.T, args ...string) (int, string) {
	t.Helper()
	return clitest.Run(t, command, args...)
}

// TestBadFlags: every flag out of its range or malformed is refused with exit code 2 and
// a message naming it, before anything runs; a missing file a flag names is 5.
func TestBadFlags(t *testing.T) {
	t.Setenv("DATABASE_URL", storetest.NewDatabase(t))
	missing := filepath.Join(t.TempDir(), "absent.txt") // reached only if the flags pass
	usage := func(args []string, want string) clitest.Case {
		return clitest.Case{Args: args, Code: cli.ExitUsage, Want: want}
	}
	clitest.OneLineErrors(t, command, []clitest.Case{
		usage([]string{"--concurrency", "-5"}, "--concurrency"),
		usage([]string{"--concurrency", "0"}, "--concurrency"),
		usage([]string{"--concurrency", "1000000"}, "--concurrency"),
		usage([]string{"--rate", "-1"}, "--rate"),
		usage([]string{"--rate", "NaN"}, "--rate"),
		usage([]string{"--rate", "1e9"}, "--rate"),
		usage([]string{"--batch", "0"}, "--batch"),
		usage([]string{"--batch", "10000000"}, "--batch"),
		usage([]string{"--progress", "0s"}, "--progress"),
		usage([]string{"--progress", "48h"}, "--progress"),
		usage([]string{"--handshake-timeout", "0s"}, "--handshake-timeout"),
		usage([]string{"--handshake-timeout", "1h"}, "--handshake-timeout"),
		usage([]string{"--query-timeout", "-1s"}, "--query-timeout"),
		usage([]string{"--target-timeout", "0s"}, "--target-timeout"),
		usage([]string{"--max-sni-attempts", "-3"}, "--max-sni-attempts"),
		usage([]string{"--max-sni-attempts", "1000"}, "--max-sni-attempts"),
		usage([]string{"--query-name", "a..b"}, "--query-name"),
		usage([]string{"--ports", "70000"}, "--ports"),
		usage([]string{"--alpns", "h3"}, "--alpns"),
		usage([]string{"--quic-versions", "draft-29"}, "--quic-versions"),
		usage([]string{"--sni-names", "198.19.0.1"}, "--sni-names"),
		usage([]string{"--week", "2026-47"}, "--week"),
		usage([]string{"--scan-id", "-1"}, "--scan-id"),
		usage([]string{"--scan-id", "3", "--week", "2026-W47"}, "--scan-id"),
		usage([]string{"--geoip-city", "x.mmdb"}, "--geoip-asn"),
		usage([]string{"--vantage", ""}, "--vantage"),
		{Args: []string{"--roots", "/nonexistent/roots.pem"}, Code: cli.ExitEnvironment, Want: "roots.pem"},
	}, "--targets", missing)
}

// TestTargetsFileErrors: a missing targets file is a missing prerequisite (5); a bad or
// 200 KB line is bad input (2), and the message names the file and the line.
func TestTargetsFileErrors(t *testing.T) {
	t.Setenv("DATABASE_URL", storetest.NewDatabase(t))
	clitest.TargetsFileErrors(t, command, "127.0.0.1:853\n\n127.0.0.2:99999\n")
}

// TestHelp: --help exits 0; the help names the flags, examples and exit codes.
func TestHelp(t *testing.T) {
	clitest.Help(t, command, "verify [flags]", "-quic-versions string", "-scan-id int", "verify --targets hosts.txt")
}
