// Command jobrun runs one scheduled doqscan job under a PostgreSQL advisory lock and
// records it in job_runs (see internal/jobs). systemd timers and cron call it.
package main

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/jobs"
)

var cmd = cli.Command{
	Name:    "jobrun",
	Summary: "run a scheduled job under an advisory lock, recording it (and missed periods) in job_runs",
	Usage:   "jobrun --job scan|verify|measure|report|blocklist [--vantage ID] -- COMMAND [ARGS...]",
	Examples: []string{
		"jobrun --job scan --vantage fra1 -- zprobe scan --testbed 198.19.0.0/16 --rate 10000   # this week's scan from fra1",
		"jobrun --job verify --vantage fra1 -- verify                                           # verifies this week's scans",
		"jobrun --job measure --vantage fra1 -- measure                                         # this hour's round",
	},
	Notes: `The command gets DOQSCAN_JOB, DOQSCAN_RUN_KEY (ISO week or hour) and DOQSCAN_VANTAGE (the
--vantage of the lock: the doqscan tools run as that vantage point unless given --vantage)
in its environment.
SIGINT, SIGTERM and SIGHUP are forwarded to the command and waited for; if jobrun is
killed, the command gets SIGTERM. The lock lives on a database connection of its own;
if that connection drops, the command is stopped with SIGTERM and the run recorded as
failed (another run could take the lock: two runs must not overlap).
Exit codes: the command's own, 75 when another run of the job holds the lock, 3 when the
lock's connection dropped.`,
}

func main() {
	var common cli.Common
	fs := cli.NewFlagSet(cmd, &common)
	job := fs.String("job", "", "job name: scan, verify, measure, report or blocklist")
	vantage := fs.String("vantage", cli.DefaultVantage(), "vantage point id: one lock per job and vantage point; passed to the command as DOQSCAN_VANTAGE (env "+cli.EnvVantage+"; default "+cli.DefaultVantageID+")")
	nowFlag := fs.String("now", os.Getenv("DOQSCAN_NOW"), "run as if the time were this (RFC 3339; tests with a compressed clock; env DOQSCAN_NOW)")
	fs.DurationVar(&jobs.LockCheck, "lock-check", jobs.LockCheck, "ping the lock's database connection this often while the command runs")
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
		return jobs.RunCommand(ctx, s, log, *job, *vantage, now, args)
	})
}
