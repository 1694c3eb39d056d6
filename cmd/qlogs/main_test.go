package main

import (
	"path/filepath"
	"testing"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/cli/clitest"
)

func TestHelp(t *testing.T) {
	clitest.Help(t, command, "qlogs [flags] analyze FILE|DIR...", "-rtt duration", "qlogs export --campaign 42")
	if code, out := clitest.Run(t, command, "export", "--help"); code != cli.ExitOK || out != "" {
		t.Errorf("export --help: exit %d, stderr %q; want 0 and the help on stdout only", code, out)
	}
}

// TestBadArgs: a missing or unknown command or a bad flag (before or after the command)
// is a usage error (2) in one line; a file that cannot be read is 5.
func TestBadArgs(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "absent.sqlog")
	clitest.OneLineErrors(t, command, []clitest.Case{
		clitest.Usage("want a command"),
		clitest.Usage(`"frob"`, "frob"),
		clitest.Usage("FILE or DIR", "analyze"),
		clitest.Usage("--rtt", "analyze", "--rtt", "-1s", missing),
		clitest.Usage("--rtt", "--rtt", "-1s", "analyze", missing),
		clitest.Usage("bogus", "analyze", "--bogus", missing),
		{Args: []string{"analyze", "--rtt", "5ms", missing}, Code: cli.ExitEnvironment, Want: "could not be read"},
		{Args: []string{"--rtt", "5ms", "analyze", missing}, Code: cli.ExitEnvironment, Want: "could not be read"},
	})
}
