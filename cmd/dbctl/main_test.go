package main

import (
	"testing"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/cli/clitest"
	"github.com/doqscan/doqscan/internal/store/storetest"
)

func TestHelp(t *testing.T) {
	clitest.Help(t, tool, "dbctl [flags] up|migrate|status|url|stop|retention|fleet-init|add-vantage ID|fleet-serve", "Subcommands:", "dbctl stop", "dbctl retention")
	clitest.SubcommandHelp(t, tool)
}

// TestBadArgs: anything but one known subcommand is a usage error (exit 2, one line).
func TestBadArgs(t *testing.T) {
	clitest.OneLineErrors(t, tool, []clitest.Case{
		clitest.Usage("subcommand"),
		clitest.Usage("up takes no arguments", "up", "stop"),
		clitest.Usage("keep", "retention", "--keep", "0"),
		clitest.Usage("keep", "--keep", "0", "retention"),
		clitest.Usage("add-vantage takes one vantage point id", "add-vantage"),
		clitest.Usage(`"frob"`, "frob"),
		clitest.Usage("no-such-flag", "--no-such-flag", "up"),
		// A flag of another subcommand is not this one's.
		clitest.Usage("keep", "status", "--keep", "1h"),
	})
}

// TestExitCodes: 0 (--help, status of a working database), 2 (bad arguments), 3 (a
// database that does not answer).
func TestExitCodes(t *testing.T) {
	clitest.ExitCodes(t, tool, []clitest.ExitCase{
		{Code: cli.ExitOK, Why: "help", Args: []string{"--help"}},
		{Code: cli.ExitOK, Why: "status", Args: []string{"status"}, Env: map[string]string{"DATABASE_URL": storetest.NewDatabase(t)}},
		{Code: cli.ExitUsage, Why: "bad arguments", Args: []string{"frob"}},
		{Code: cli.ExitDatabase, Why: "database unavailable", Args: []string{"status"}, Env: map[string]string{"DATABASE_URL": clitest.NoDatabaseURL}},
	})
}
