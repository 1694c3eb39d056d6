package main

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/cli/clitest"
	"github.com/doqscan/doqscan/internal/jobs"
	"github.com/doqscan/doqscan/internal/store"
	"github.com/doqscan/doqscan/internal/store/storetest"
)

func TestHelp(t *testing.T) {
	clitest.Help(t, command, "jobrun --job scan|verify|measure|report|blocklist", "-lock-check duration", "jobrun --job measure --vantage fra1 -- measure")
}

// TestBadFlags: a bad job, a missing command, a bad --now or --lock-check is refused with exit code 2
// and one line naming it, before the database is opened.
func TestBadFlags(t *testing.T) {
	clitest.NoDatabase(t) // reached only if the flags pass
	clitest.OneLineErrors(t, command, []clitest.Case{
		clitest.Usage("--job", "--", "true"),
		clitest.Usage("--job", "--job", "weekly", "--", "true"),
		clitest.Usage("no command", "--job", "scan"),
		clitest.Usage("--now", "--job", "measure", "--now", "yesterday", "--", "true"),
		clitest.Usage("lock-check", "--lock-check", "often", "--job", "scan", "--", "true"),
		clitest.Usage("--lock-check", "--lock-check", "0s", "--job", "scan", "--", "true"),
		clitest.Usage("--lock-check", "--lock-check", "-1s", "--job", "scan", "--", "true"),
		clitest.Usage("--lock-check", "--lock-check", "48h", "--job", "scan", "--", "true"),
	})
}

// TestExitCodes runs the exit codes jobrun documents (its --help): the command's own,
// 2 for bad flags, 3 and 4 for the lock's database, 75 when another run holds the lock.
func TestExitCodes(t *testing.T) {
	cases := []clitest.ExitCase{
		{Code: cli.ExitOK, Why: "the command's own (0)", Args: []string{"--job", "scan", "--vantage", "exitcodes", "--", "true"},
			Env: map[string]string{"DATABASE_URL": storetest.NewDatabase(t)}},
		{Code: 7, Why: "the command's own (7)", Args: []string{"--job", "scan", "--vantage", "exitcodes", "--", "sh", "-c", "exit 7"},
			Env: map[string]string{"DATABASE_URL": storetest.NewDatabase(t)}},
		{Code: cli.ExitUsage, Why: "bad flags", Args: []string{"--job", "weekly", "--", "true"}},
	}
	cases = append(cases, clitest.DatabaseCases(t, "--job", "scan", "--", "true")...)
	clitest.ExitCodes(t, command, cases)

	t.Run("75 another run holds the lock", func(t *testing.T) {
		url := storetest.UseDatabase(t)
		s, err := store.Open(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		inside, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
		go func() {
			done <- jobs.Run(context.Background(), s, slog.New(slog.DiscardHandler), "verify", "held", time.Now(),
				func(context.Context, string) error { close(inside); <-release; return nil })
		}()
		<-inside
		code, out := clitest.Run(t, command, "--job", "verify", "--vantage", "held", "--", "true")
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if code != jobs.ExitLocked {
			t.Errorf("exit %d (%s), want %d", code, out, jobs.ExitLocked)
		}
	})
}
