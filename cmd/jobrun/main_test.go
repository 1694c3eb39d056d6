package main

import (
	"testing"

	"github.com/doqscan/doqscan/internal/cli/clitest"
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
