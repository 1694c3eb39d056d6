package main

import (
	"path/filepath"
	"testing"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/cli/clitest"
)

func TestHelp(t *testing.T) {
	clitest.Help(t, command, "dataset import [flags] DIR", "-dry-run", "dataset import --dry-run DIR", "dataset export [flags] [DIR]", "-weeks")
}

// TestBadArgs: a missing or unknown subcommand, a bad flag or name is a usage error
// (2), a directory that does not exist a missing prerequisite (5); one line each, flags
// before or after the subcommand, before the database is opened.
func TestBadArgs(t *testing.T) {
	clitest.NoDatabase(t) // reached only if the arguments pass
	dir := t.TempDir()
	missing := filepath.Join(dir, "absent")
	clitest.OneLineErrors(t, command, []clitest.Case{
		clitest.Usage("dataset import [flags] DIR"),
		clitest.Usage(`(got "import")`, "import"),
		clitest.Usage("want: dataset export [flags] [DIR]", "export", dir, dir),
		clitest.Usage(`--weeks: "2026-47"`, "export", "--weeks", "2026-47", dir),
		clitest.Usage(`(got "import `, "import", dir, "--dry-run"),
		clitest.Usage("bad name", "import", "--label", "BAD", dir),
		clitest.Usage("bad name", "--vantage", "Bad Vantage", "import", dir),
		clitest.Usage("no-such-flag", "import", "--no-such-flag", dir),
		clitest.Usage("--log-level", "import", "--log-level", "loud", dir),
		{Args: []string{"import", "--dry-run", missing}, Code: cli.ExitEnvironment, Want: "absent"},
	})
}
