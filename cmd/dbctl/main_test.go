package main

import (
	"testing"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/cli/clitest"
)

func TestHelp(t *testing.T) {
	clitest.Help(t, command, "dbctl [flags] up|status|url|stop", "Subcommands:", "dbctl stop")
}

// TestBadArgs: anything but one known subcommand is a usage error (exit 2, one line).
func TestBadArgs(t *testing.T) {
	usage := func(want string, args ...string) clitest.Case {
		return clitest.Case{Args: args, Code: cli.ExitUsage, Want: want}
	}
	clitest.OneLineErrors(t, command, []clitest.Case{
		usage("subcommand"),
		usage("subcommand", "up", "stop"),
		usage(`"frob"`, "frob"),
		usage("no-such-flag", "--no-such-flag", "up"),
	})
}
