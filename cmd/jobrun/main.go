// Command jobrun runs one scheduled doqscan job under a PostgreSQL advisory lock and
// records it in job_runs (see internal/jobs). systemd timers and cron call it.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"time"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/jobs"
)

// ExitLocked (sysexits EX_TEMPFAIL) says the job was skipped because another run of it
// holds the lock; units treat it as success (SuccessExitStatus=75).
const ExitLocked = 75

var cmd = cli.Command{
	Name:    "jobrun",
	Summary: "run a scheduled job under an advisory lock, recording it (and missed periods) in job_runs",
	Usage:   "jobrun --job scan|verify|measure|report|blocklist [--vantage ID] -- COMMAND [ARGS...]",
	Examples: []string{
		"jobrun --job scan --vantage vp1 -- bin/zprobe --vantage vp1 ...",
		"jobrun --job measure --vantage vp1 -- bin/measure --vantage vp1",
	},
	Notes: `The command gets DOQSCAN_JOB and DOQSCAN_RUN_KEY (ISO week or hour) in its environment.
Exit codes: the command's own, or 75 when another run of the job holds the lock.`,
}

func main() {
	var common cli.Common
	fs := cli.NewFlagSet(cmd, &common)
	job := fs.String("job", "", "job name: scan, verify, measure, report or blocklist")
	vantage := fs.String("vantage", envOr("DOQSCAN_VANTAGE", "vp1"), "vantage point id (one lock per job and vantage point)")
	nowFlag := fs.String("now", os.Getenv("DOQSCAN_NOW"), "run as if the time were this (RFC 3339; tests with a compressed clock; env DOQSCAN_NOW)")
	var exitCode int
	cli.Main(fs, &common, func(ctx context.Context, log *slog.Logger, args []string) error {
		if _, ok := jobs.Cadence[*job]; !ok {
			return cli.Usagef("--job must be one of scan, verify, measure, report, blocklist")
		}
		if len(args) == 0 {
			return cli.Usagef("no command given after --")
		}
		now := time.Now()
		if *nowFlag != "" {
			t, err := time.Parse(time.RFC3339, *nowFlag)
			if err != nil {
				return cli.Usagef("bad --now: %v", err)
			}
			now = t
		}
		s, err := cli.OpenStore(ctx, log)
		if err != nil {
			return err
		}
		defer s.Close()
		err = jobs.Run(ctx, s, log, *job, *vantage, now, func(ctx context.Context, key string) error {
			c := exec.CommandContext(ctx, args[0], args[1:]...)
			c.Stdin, c.Stdout, c.Stderr = nil, os.Stdout, os.Stderr
			c.Env = append(os.Environ(), "DOQSCAN_JOB="+*job, "DOQSCAN_RUN_KEY="+key)
			err := c.Run()
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				exitCode = ee.ExitCode()
				return fmt.Errorf("%s exited with %d", args[0], exitCode)
			}
			return err
		})
		if errors.Is(err, jobs.ErrLocked) {
			exitCode = ExitLocked
			return &cli.ExitError{Code: ExitLocked, Err: err}
		}
		if err != nil && exitCode != 0 {
			return &cli.ExitError{Code: exitCode, Err: err}
		}
		return err
	})
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
