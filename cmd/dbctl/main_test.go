package main

import (
	"testing"

	"github.com/doqscan/doqscan/internal/cli/clitest"
)

func TestHelp(t *testing.T) {
	clitest.Help(t, command, "dbctl [flags] up|status|url|stop", "Subcommands:", "dbctl stop")
}

// TestBadArgs: anything but one known subcommand is a usage error (exit 2, one line).
func TestBadArgs(t *testing.T) {
	clitest.OneLineErrors(t, command, []clitest.Case{
		clitest.Usage("subcommand"),
		clitest.Usage("subcommand", "up", "stop"),
		clitest.Usage(`"frob"`, "frob"),
		clitest.Usage("no-such-flag", "--no-such-flag", "up"),
	})
}
