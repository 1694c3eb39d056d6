package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/cli/clitest"
	"github.com/doqscan/doqscan/internal/listfile/listfiletest"
	"github.com/doqscan/doqscan/internal/store/storetest"
)

func TestHelp(t *testing.T) {
	clitest.Help(t, tool, "qlogs [flags] analyze FILE|DIR...", "Subcommands:", "qlogs export --campaign 42")
	var b strings.Builder
	if err := tool().SubcommandHelp(&b, "analyze"); err != nil || !strings.Contains(b.String(), "-rtt duration") {
		t.Errorf("analyze --help (%v) lacks --rtt:\n%s", err, b.String())
	}
	if code, out := clitest.Run(t, tool, "export", "--help"); code != cli.ExitOK || out != "" {
		t.Errorf("export --help: exit %d, stderr %q; want 0 and the help on stdout only", code, out)
	}
	clitest.SubcommandHelp(t, tool)
}

// TestBadArgs: a missing or unknown command or a bad flag (before or after the command)
// is a usage error (2) in one line; a file that cannot be read is 5.
func TestBadArgs(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "absent.sqlog")
	clitest.OneLineErrors(t, tool, []clitest.Case{
		clitest.Usage("want a subcommand: analyze, export"),
		clitest.Usage(`"frob"`, "frob"),
		clitest.Usage("FILE or DIR", "analyze"),
		clitest.Usage("--rtt", "analyze", "--rtt", "-1s", missing),
		clitest.Usage("--rtt", "--rtt", "-1s", "analyze", missing),
		clitest.Usage("bogus", "analyze", "--bogus", missing),
		// export's flags are not analyze's.
		clitest.Usage("-out", "analyze", "--out", "/tmp/x", missing),
		{Args: []string{"analyze", "--rtt", "5ms", missing}, Code: cli.ExitEnvironment, Want: "could not be read"},
		{Args: []string{"--rtt", "5ms", "analyze", missing}, Code: cli.ExitEnvironment, Want: "could not be read"},
	})
}

// TestExitCodes runs every exit code qlogs documents (docs/qlogs.md), each from the cause
// it names.
func TestExitCodes(t *testing.T) {
	fixtures := "../../internal/measure/qlogana/testdata/dns-analysis-2021/qlogs"
	dir := t.TempDir()
	notQlog := clitest.WriteFile(t, dir, "notes.txt", "not a qlog\n")
	cases := []clitest.ExitCase{
		{Code: cli.ExitOK, Why: "every file analysed", Args: []string{"analyze", fixtures}},
		{Code: cli.ExitFailure, Why: "a file that is no analysable qlog", Args: []string{"analyze", fixtures, notQlog}},
		{Code: cli.ExitUsage, Why: "no file given", Args: []string{"analyze"}},
		{Code: cli.ExitUsage, Why: "no such campaign", Args: []string{"export", "--campaign", "999", "--out", dir},
			Env: map[string]string{"DATABASE_URL": storetest.NewDatabase(t)}},
		{Code: cli.ExitEnvironment, Why: "a file that could not be read", Args: []string{"analyze", fixtures, filepath.Join(dir, "absent.qlog")}},
		{Code: cli.ExitEnvironment, Why: "a FIFO", Args: []string{"analyze", listfiletest.FIFO(t, dir, "pipe.qlog"), fixtures}},
	}
	cases = append(cases, clitest.DatabaseCases(t, "export", "--campaign", "1", "--out", dir)...)
	clitest.ExitCodes(t, tool, cases)
}
