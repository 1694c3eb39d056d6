// Command jobrun runs one scheduled doqscan job under a PostgreSQL advisory lock and
// records it in job_runs (see internal/jobs). systemd timers and cron call it.
package main

import (
	"context"
	"flag"
	"log/slog"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/jobs"
)

var cmd = cli.Command{
	Name:    "jobrun",
	Summary: "run a scheduled job under an advisory lock, recording it (and missed periods) in job_runs",
	Usage:   "jobrun --job scan|verify|measure|report|blocklist [--vantage ID] -- COMMAND [ARGS...]",
	Locks:   "the job (job, vantage)",
	// The command after "--" is run as given; its flags are its own.
	PassArgs: true,
	Examples: []string{
		"jobrun --job scan --vantage fra1 -- zprobe scan --testbed 198.19.0.0/16 --rate 50000 --cooldown 3   # this week's scan from fra1",
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

func main() { cli.Main(command()) }

// command binds the flags to jobs.Config (their defaults are jobs.DefaultConfig) and
// returns the run function (tests call it through cli.RunMain).
func command() (*flag.FlagSet, *cli.Common, cli.RunFunc) {
	var common cli.Common
	cfg := jobs.DefaultConfig()
	fs := cli.NewFlagSet(cmd, &common)
	fs.StringVar(&cfg.Job, "job", cfg.Job, "job name: scan, verify, measure, report or blocklist")
	fs.StringVar(&cfg.Vantage, "vantage", cfg.Vantage, "vantage point id: one lock per job and vantage point; passed to the command as DOQSCAN_VANTAGE (env "+cli.EnvVantage+"; default "+cli.DefaultVantageID+")")
	fs.StringVar(&cfg.Now, "now", cfg.Now, "run as if the time were this (RFC 3339; tests with a compressed clock; env DOQSCAN_NOW)")
	cli.DurationVar(fs, &cfg.LockCheck, "lock-check", cfg.LockCheck, jobs.MinLockCheck, jobs.MaxLockCheck, "ping the lock's database connection this often while the command runs")
	return fs, &common, func(ctx context.Context, log *slog.Logger, args []string) error {
		return jobs.Command(ctx, log, cfg, args)
	}
}
