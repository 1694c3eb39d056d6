package main

import (
	"testing"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/cli/clitest"
)

func TestHelp(t *testing.T) {
	clitest.Help(t, cmd, "testnet [flags] up|down|status|exec", "testnet exec -- ping", "-vantages int", "-no-peers")
}

// Bad flags and arguments exit 2 with one line naming what is wrong, before any
// namespace is touched (Preflight comes after these checks).
func TestBadFlags(t *testing.T) {
	clitest.OneLineErrors(t, cmd, []clitest.Case{
		clitest.Usage("no-such-flag", "--no-such-flag", "up"),
		clitest.Usage("--vantages", "--vantages", "0", "up"),
		clitest.Usage("--vantages", "--vantages", "1000", "status"),
		clitest.Usage("--vantage", "--vantage", "-1", "exec", "--", "true"),
		clitest.Usage("seed", "--seed", "x", "up"),
		clitest.Usage("subcommand"),
	})
}

// "testnet delayline" is a subcommand with its own flags: without --table it is a usage
// error (exit 2), and its own flags do not clash with testnet's.
func TestDelayLineSubcommandNeedsTable(t *testing.T) {
	if code, out := clitest.Run(t, cmd, "delayline", "--seed", "3"); code != cli.ExitUsage {
		t.Errorf("exit %d, stderr %q; want %d", code, out, cli.ExitUsage)
	}
}

// TestExitCodes: 0 (--help), 2 (bad flags), 5 (a testbed that is not up: exec in a
// missing instance ran `ip netns exec`, whose 255 read as the command's exit code).
func TestExitCodes(t *testing.T) {
	clitest.ExitCodes(t, cmd, []clitest.ExitCase{
		{Code: cli.ExitOK, Why: "help", Args: []string{"--help"}},
		{Code: cli.ExitUsage, Why: "bad flags", Args: []string{"--vantages", "0", "up"}},
		{Code: cli.ExitEnvironment, Why: "no such testbed", Args: []string{"--name", "nosuchtb", "exec", "--", "true"}},
	})
}
