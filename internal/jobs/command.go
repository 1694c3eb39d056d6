package jobs

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"time"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/store"
)

// ExitLocked (sysexits EX_TEMPFAIL) says the job was skipped because another run of it
// holds the lock; units treat it as success (SuccessExitStatus=75).
const ExitLocked = 75

// RunCommand runs argv as the job's run (see Run), with DOQSCAN_JOB, DOQSCAN_RUN_KEY and
// DOQSCAN_VANTAGE (the vantage point of the lock, so the command runs as it unless
// given --vantage) in its environment, through cli.RunChild: SIGINT, SIGTERM and SIGHUP are forwarded to
// it and waited for (a doqscan tool stores what it has and exits 130), it gets SIGTERM
// if jobrun dies, and SIGTERM when the lock's connection drops. The error carries the
// exit code: the command's own, ExitLocked when another run holds the lock, or
// cli.ExitDatabase when the lock was lost.
func RunCommand(ctx context.Context, s *store.Store, log *slog.Logger, job, vantage string, now time.Time, argv []string) error {
	err := Run(ctx, s, log, job, vantage, now, func(ctx context.Context, key string) error {
		c := exec.Command(argv[0], argv[1:]...)
		c.Stdin, c.Stdout, c.Stderr = nil, os.Stdout, os.Stderr
		c.Env = append(os.Environ(), "DOQSCAN_JOB="+job, "DOQSCAN_RUN_KEY="+key, cli.EnvVantage+"="+vantage)
		return cli.RunChild(ctx, c)
	})
	switch {
	case errors.Is(err, ErrLocked):
		return &cli.ExitError{Code: ExitLocked, Err: err}
	case errors.Is(err, ErrLockLost):
		return &cli.ExitError{Code: cli.ExitDatabase, Err: err}
	}
	return err
}
