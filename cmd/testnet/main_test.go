package main

import (
	"strings"
	"testing"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/cli/clitest"
)

func TestHelp(t *testing.T) {
	clitest.Help(t, tool, "testnet [flags] up|down|status|exec", "testnet exec -- ping", "Subcommands:")
	clitest.SubcommandHelp(t, tool)
	var b strings.Builder
	if err := tool().SubcommandHelp(&b, "up"); err != nil || !strings.Contains(b.String(), "-vantages int") || !strings.Contains(b.String(), "-no-peers") {
		t.Errorf("up --help (%v) lacks --vantages or --no-peers:\n%s", err, b.String())
	}
}

// Bad flags and arguments exit 2 with one line naming what is wrong, before any
// namespace is touched (Preflight comes after these checks).
func TestBadFlags(t *testing.T) {
	clitest.OneLineErrors(t, tool, []clitest.Case{
		clitest.Usage("no-such-flag", "--no-such-flag", "up"),
		clitest.Usage("--vantages", "--vantages", "0", "up"),
		clitest.Usage("--vantages", "--vantages", "1000", "up"),
		clitest.Usage("--vantage", "--vantage", "-1", "exec", "--", "true"),
		clitest.Usage("seed", "--seed", "x", "up"),
		clitest.Usage("subcommand"),
		clitest.Usage(`unknown subcommand "frob"`, "frob"),
		// up's flags are not status's.
		clitest.Usage("-vantages", "--vantages", "2", "status"),
		clitest.Usage("down takes no arguments", "down", "now"),
		// path's subcommands: an address for set, and something to set; none for show.
		clitest.Usage("want one address or prefix", "path", "set", "--loss", "5%"),
		clitest.Usage("at least one of --loss", "path", "set", "198.19.3.7"),
		clitest.Usage("bad loss", "path", "set", "198.19.3.7", "--loss", "150%"),
		clitest.Usage("-speed", "path", "set", "198.19.3.7", "--speed", "1"),
		clitest.Usage("takes no arguments", "path", "show", "x"),
		clitest.Usage("at most one", "path", "reset", "a", "b"),
		clitest.Usage(`unknown subcommand "frob": want set, show, reset`, "path", "frob"),
		clitest.Usage("testnet path: want a subcommand", "path"),
	})
}

// "testnet delayline" is a subcommand with its own flags: without --table it is a usage
// error (exit 2), and its own flags do not clash with testnet's.
func TestDelayLineSubcommandNeedsTable(t *testing.T) {
	if code, out := clitest.Run(t, tool, "delayline", "--seed", "3"); code != cli.ExitUsage {
		t.Errorf("exit %d, stderr %q; want %d", code, out, cli.ExitUsage)
	}
}

// TestExitCodes: 0 (--help), 2 (bad flags), 5 (a testbed that is not up: exec in a
// missing instance ran `ip netns exec`, whose 255 read as the command's exit code).
func TestExitCodes(t *testing.T) {
	clitest.ExitCodes(t, tool, []clitest.ExitCase{
		{Code: cli.ExitOK, Why: "help", Args: []string{"--help"}},
		{Code: cli.ExitOK, Why: "help of a subcommand", Args: []string{"help", "path"}},
		{Code: cli.ExitUsage, Why: "bad flags", Args: []string{"--vantages", "0", "up"}},
		{Code: cli.ExitEnvironment, Why: "no delay line to set a path on", Args: []string{"--name", "nosuchtb", "path", "set", "198.19.3.7", "--loss", "5%"}},
		{Code: cli.ExitEnvironment, Why: "no such testbed", Args: []string{"--name", "nosuchtb", "exec", "--", "true"}},
	})
}
