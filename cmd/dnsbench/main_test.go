package main

import (
	"path/filepath"
	"testing"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/cli/clitest"
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
		{[]string{"--count", "1", "--streams", "4", "--policy", "fresh", "doq://127.0.0.1"}, cli.ExitUsage},
		{[]string{"--count", "1", "--streams", "-1", "doq://127.0.0.1"}, cli.ExitUsage},
		{[]string{"--count", "1", "--loss-sweep", "5,200", "doudp://127.0.0.1"}, cli.ExitUsage},
		{[]string{"--count", "1", "--compare-policies", "fresh,sometimes", "doudp://127.0.0.1"}, cli.ExitUsage},
		{[]string{"--count", "1", "doudp://198.18.0.1"}, cli.ExitEnvironment}, // a testbed address outside the testbed
	} {
		if got, stderr := clitest.Run(t, command, c.args...); got != c.code {
			t.Errorf("%v: exit %d, want %d (%s)", c.args, got, c.code, stderr)
		}
	}
}
