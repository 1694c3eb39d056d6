package main

import (
	"path/filepath"
	"testing"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/cli/clitest"
	"github.com/doqscan/doqscan/internal/listfile/listfiletest"
)

func TestExitCodes(t *testing.T) {
	dir := t.TempDir()
	bad := clitest.WriteFile(t, dir, "bad.txt", "ok.example A\nbad.example NOTATYPE\n")
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"--help"}, cli.ExitOK},
		{[]string{"--count", "1", "tcp://127.0.0.1"}, cli.ExitUsage},
		{[]string{"--count", "1", "doh-put://127.0.0.1"}, cli.ExitUsage},
		{[]string{"doudp://127.0.0.1"}, cli.ExitUsage}, // neither duration nor count
		{[]string{"--count", "1", "--policy", "sometimes", "doudp://127.0.0.1"}, cli.ExitUsage},
		{[]string{"--count", "1", "--rate", "5", "--ramp-max", "9", "doudp://127.0.0.1"}, cli.ExitUsage},
		{[]string{"--count", "1", "--queries", bad, "doudp://127.0.0.1"}, cli.ExitUsage},
		{[]string{"--count", "1", "--queries", filepath.Join(dir, "absent"), "doudp://127.0.0.1"}, cli.ExitEnvironment},
		{[]string{"--count", "1", "--queries", listfiletest.FIFO(t, dir, "fifo.txt"), "doudp://127.0.0.1"}, cli.ExitEnvironment},
		{[]string{"--count", "1", "--queries", dir, "doudp://127.0.0.1"}, cli.ExitEnvironment},
		{[]string{"--count", "1", "--streams", "4", "--policy", "fresh", "doq://127.0.0.1"}, cli.ExitUsage},
		{[]string{"--count", "1", "--streams", "-1", "doq://127.0.0.1"}, cli.ExitUsage},
		{[]string{"--count", "1", "--loss-sweep", "5,200", "doudp://127.0.0.1"}, cli.ExitUsage},
		{[]string{"--count", "1", "--compare-policies", "fresh,sometimes", "doudp://127.0.0.1"}, cli.ExitUsage},
		{[]string{"--count", "1", "doudp://198.18.0.1"}, cli.ExitEnvironment}, // a testbed address outside the testbed
		// Numeric flags out of range, NaN, infinite or overflowing are usage errors: none
		// falls back to a default or wraps (--workers 0 used to run one worker, --rate -1
		// as fast as answered, --timeout 0s with the default timeout).
		{[]string{"--count", "1", "--workers", "0", "doudp://127.0.0.1"}, cli.ExitUsage},
		{[]string{"--count", "1", "--workers", "4294967297", "doudp://127.0.0.1"}, cli.ExitUsage},
		{[]string{"--count", "1", "--rate", "-1", "doudp://127.0.0.1"}, cli.ExitUsage},
		{[]string{"--count", "1", "--rate", "NaN", "doudp://127.0.0.1"}, cli.ExitUsage},
		{[]string{"--count", "1", "--rate", "Inf", "doudp://127.0.0.1"}, cli.ExitUsage},
		{[]string{"--count", "1", "--ramp-max", "1e400", "--duration", "1s", "doudp://127.0.0.1"}, cli.ExitUsage},
		{[]string{"--count", "1", "--ramp-max", "10", "--ramp-loss", "1", "--duration", "1s", "doudp://127.0.0.1"}, cli.ExitUsage},
		{[]string{"--count", "1", "--timeout", "0s", "doudp://127.0.0.1"}, cli.ExitUsage},
		{[]string{"--count", "1", "--timeout", "-1s", "doudp://127.0.0.1"}, cli.ExitUsage},
		{[]string{"--count", "-1", "doudp://127.0.0.1"}, cli.ExitUsage},
		{[]string{"--count", "1", "--session-queries", "0", "doudp://127.0.0.1"}, cli.ExitUsage},
		{[]string{"--count", "1", "--progress", "-1s", "doudp://127.0.0.1"}, cli.ExitUsage},
	} {
		if got, stderr := clitest.Run(t, command, c.args...); got != c.code {
			t.Errorf("%v: exit %d, want %d (%s)", c.args, got, c.code, stderr)
		}
	}
}

// TestDocumentedExitCodes runs the exit codes docs/dnsbench.md documents that need a
// run: 0 when every query has a classified outcome (here one query to a closed loopback
// port: refused or timed out, a result), 3 and 4 when --store meets the database.
func TestDocumentedExitCodes(t *testing.T) {
	run := []string{"--count", "1", "--workers", "1", "--timeout", "200ms", "--progress", "0s", "doudp://127.0.0.1:9"}
	cases := []clitest.ExitCase{
		{Code: cli.ExitOK, Why: "every query has a classified outcome", Args: run},
		{Code: cli.ExitUsage, Why: "bad flags", Args: append([]string{"--workers", "0"}, run...)},
		{Code: cli.ExitEnvironment, Why: "missing query file", Args: append([]string{"--queries", filepath.Join(t.TempDir(), "absent")}, run...)},
	}
	cases = append(cases, clitest.DatabaseCases(t, append([]string{"--store"}, run...)...)...)
	clitest.ExitCodes(t, command, cases)
}
