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
const ExitLocked = cli.ExitLocked

// Config is what jobrun's flags ask for (DefaultConfig gives their defaults).
type Config struct {
	Job       string        // scan, verify, measure, report or blocklist (a key of Cadence)
	Vantage   string        // the lock's vantage point, passed to the command as DOQSCAN_VANTAGE
	Now       string        // run as if the time were this (RFC 3339); "": the wall clock
	LockCheck time.Duration // how often the lock's connection is pinged (sets LockCheck)
}

// DefaultConfig is Config with the flags' defaults: the vantage point of the
// environment (cli.DefaultVantage), $DOQSCAN_NOW, LockCheck.
func DefaultConfig() Config {
	return Config{Vantage: cli.DefaultVantage(), Now: os.Getenv("DOQSCAN_NOW"), LockCheck: LockCheck}
}

// Ranges of --lock-check: a shorter interval is no wait at all between pings, a longer
// one lets a dropped lock go unnoticed for more than a day.
const (
	MinLockCheck = 10 * time.Millisecond
	MaxLockCheck = 24 * time.Hour
)

// Validate checks cfg and returns the time the run is for: --job one of Cadence's,
// --lock-check MinLockCheck..MaxLockCheck, --now RFC 3339 (or empty: the wall clock).
// Errors are usage errors naming the flag (exit code 2).
func (cfg Config) Validate() (time.Time, error) {
	if _, ok := Cadence[cfg.Job]; !ok {
		return time.Time{}, cli.Usagef("--job must be one of scan, verify, measure, report, blocklist")
	}
	if err := cli.InRange("lock-check", cfg.LockCheck, MinLockCheck, MaxLockCheck); err != nil {
		return time.Time{}, err
	}
	if cfg.Now == "" {
		return time.Now(), nil
	}
	t, err := time.Parse(time.RFC3339, cfg.Now)
	if err != nil {
		return time.Time{}, cli.Usagef("bad --now: %v", err)
	}
	return t, nil
}

// Command is the jobrun command: it checks cfg and argv (usage errors: exit code 2),
// opens the store and runs argv as the job's run (RunCommand).
func Command(ctx context.Context, log *slog.Logger, cfg Config, argv []string) error {
	// A bad --job is named first, then a missing command, then the other flags.
	if _, ok := Cadence[cfg.Job]; ok && len(argv) == 0 {
		return cli.Usagef("no command given after --")
	}
	now, err := cfg.Validate()
	if err != nil {
		return err
	}
	LockCheck = cfg.LockCheck
	s, err := cli.OpenStore(ctx, log)
	if err != nil {
		return err
	}
	defer s.Close()
	return RunCommand(ctx, s, log, cfg.Job, cfg.Vantage, now, argv)
}

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
