package main

import (
	"path/filepath"
	"testing"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/cli/clitest"
)

func TestHelp(t *testing.T) {
	clitest.Help(t, tool, "dataset import [flags] DIR", "Subcommands:", "dataset import --dry-run DIR", "dataset export [flags] [DIR]")
	clitest.SubcommandHelp(t, tool)
}

// TestBadArgs: a missing or unknown subcommand, a bad flag or name is a usage error
// (2), a directory that does not exist a missing prerequisite (5); one line each, flags
// before or after the subcommand, before the database is opened.
func TestBadArgs(t *testing.T) {
	clitest.NoDatabase(t) // reached only if the arguments pass
	dir := t.TempDir()
	missing := filepath.Join(dir, "absent")
	clitest.OneLineErrors(t, tool, []clitest.Case{
		clitest.Usage("want a subcommand: import, export"),
		clitest.Usage("want: dataset import [flags] DIR", "import"),
		clitest.Usage("want: dataset export [flags] [DIR]", "export", dir, dir),
		// export's flags are not import's, nor import's export's.
		clitest.Usage("-weeks", "import", "--weeks", "2026-W47", dir),
		clitest.Usage("-dry-run", "export", "--dry-run", dir),
		clitest.Usage(`--weeks: "2026-47"`, "export", "--weeks", "2026-47", dir),
		clitest.Usage(`(got "`+dir+" "+dir+`")`, "import", dir, dir),
		clitest.Usage("bad name", "import", "--label", "BAD", dir),
		clitest.Usage("bad name", "--vantage", "Bad Vantage", "import", dir),
		clitest.Usage("no-such-flag", "import", "--no-such-flag", dir),
		clitest.Usage("--log-level", "import", "--log-level", "loud", dir),
		{Args: []string{"import", "--dry-run", missing}, Code: cli.ExitEnvironment, Want: "absent"},
	})
}

// TestExitCodes runs every exit code dataset documents (docs/dataset.md), each from the
// cause it names.
func TestExitCodes(t *testing.T) {
	excerpt := "../../internal/dataset/testdata/pam2022-excerpt"
	bad := t.TempDir()
	clitest.WriteFile(t, bad, "05-07-2021-784.csv", "192.0.2.1\nnot an address\n")
	cut := t.TempDir()
	clitest.WriteFile(t, cut, "05-07-2021-784.csv", "192.0.2.1\n192.0.2.13")
	empty := t.TempDir()
	cases := []clitest.ExitCase{
		{Code: cli.ExitOK, Why: "read and checked", Args: []string{"import", "--dry-run", excerpt}},
		{Code: cli.ExitOK, Why: "read and checked, the flag after the directory", Args: []string{"import", excerpt, "--dry-run"}},
		{Code: cli.ExitFailure, Why: "a malformed file", Args: []string{"import", "--dry-run", bad}, Want: "05-07-2021-784.csv:2: "},
		{Code: cli.ExitFailure, Why: "a file cut short", Args: []string{"import", "--dry-run", cut}, Want: "05-07-2021-784.csv:2: "},
		{Code: cli.ExitUsage, Why: "usage", Args: []string{"import"}},
		{Code: cli.ExitUsage, Why: "nothing to import", Args: []string{"import", "--dry-run", empty}, Want: "nothing to import"},
		{Code: cli.ExitEnvironment, Why: "no such directory", Args: []string{"import", "--dry-run", filepath.Join(empty, "absent")}},
	}
	cases = append(cases, clitest.DatabaseCases(t, "import", excerpt)...)
	clitest.ExitCodes(t, tool, cases)
}
