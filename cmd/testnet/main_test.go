package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/testbed/command"
)

// run runs testnet in-process through the real flag parsing and returns its exit code
// and stderr. Only arguments refused before anything touches the system are used here.
func run(t *testing.T, args ...string) (int, string) {
	t.Helper()
	fs, common, runFn := cmd()
	var stderr bytes.Buffer
	code := cli.RunMain(fs, common, args, &stderr, runFn)
	return code, stderr.String()
}

func TestHelp(t *testing.T) {
	if code, out := run(t, "--help"); code != cli.ExitOK {
		t.Fatalf("--help: exit %d, stderr %q", code, out)
	}
	fs, _, _ := cmd()
	var b bytes.Buffer
	cli.PrintHelp(&b, command.Cmd, fs)
	for _, want := range []string{"testnet [flags] up|down|status|exec", "testnet exec -- ping", "-vantages int", "-no-peers", "Exit codes"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("help lacks %q:\n%s", want, b.String())
		}
	}
}

// Bad flags and arguments exit 2 with one line naming what is wrong, before any
// namespace is touched (Preflight comes after these checks).
func TestBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--no-such-flag", "up"}, "no-such-flag"},
		{[]string{"--vantages", "0", "up"}, "--vantages"},
		{[]string{"--vantages", "1000", "status"}, "--vantages"},
		{[]string{"--vantage", "-1", "exec", "--", "true"}, "--vantage"},
		{[]string{"--seed", "x", "up"}, "seed"},
		{nil, "subcommand"},
	} {
		t.Run(strings.Join(c.args, "="), func(t *testing.T) {
			code, out := run(t, c.args...)
			if code != cli.ExitUsage || !strings.Contains(out, c.want) || strings.Count(strings.TrimSpace(out), "\n") != 0 {
				t.Errorf("exit %d, stderr %q; want %d and one line naming %s", code, out, cli.ExitUsage, c.want)
			}
		})
	}
}

// "testnet delayline" is a subcommand with its own flags: without --table it is a usage
// error (exit 2), and its own flags do not clash with testnet's.
func TestDelayLineSubcommandNeedsTable(t *testing.T) {
	if code, out := run(t, "delayline", "--seed", "3"); code != cli.ExitUsage {
		t.Errorf("exit %d, stderr %q; want %d", code, out, cli.ExitUsage)
	}
}
