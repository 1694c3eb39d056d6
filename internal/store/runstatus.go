package store

import (
	"context"
	"errors"

	"github.com/doqscan/doqscan/internal/outcome"
)

// RunStatus is the status of a run: scans and scan_runs (zprobe), verification_runs
// (verify), campaigns (measure) and job_runs (jobrun). One type, one rule (RunStatusOf)
// for all of them.
type RunStatus string

// Run statuses (schema.sql: the status columns of scans, scan_runs, verification_runs,
// campaigns, job_runs).
const (
	RunRunning       RunStatus = "running"        // started, not finished (or its process is gone: the next run settles it)
	RunOK            RunStatus = "ok"             // finished; every target has a classified outcome
	RunInterrupted   RunStatus = "interrupted"    // stopped from outside (signal, database gone away); the next run resumes it
	RunFailed        RunStatus = "failed"         // ended by an error of its own; what it stored is kept
	RunMissed        RunStatus = "missed"         // job_runs only: the scheduler was down when the period was due
	RunSkippedLocked RunStatus = "skipped-locked" // job_runs only: another run of the same job held the lock
)

// RunStatuses is the table of run statuses.
var RunStatuses = outcome.Table[RunStatus]{
	{Status: RunRunning, Meaning: "started and not finished, or its process died: the next run of the same key settles it"},
	{Status: RunOK, Meaning: "finished: every target has a classified outcome"},
	{Status: RunInterrupted, Meaning: "stopped from outside (SIGINT/SIGTERM, the database gone away); the next run resumes it"},
	{Status: RunFailed, Meaning: "ended by an error of its own (details logged); what it stored is kept"},
	{Status: RunMissed, Meaning: "job_runs only: the period came and went while the scheduler was down"},
	{Status: RunSkippedLocked, Meaning: "job_runs only: another run of the same job and period held the lock"},
}

// RunStatusOf is the one rule for the status a run records when it ends with err, ctx
// being the run's own context:
//
//   - err nil: ok (the work is complete, even if ctx ended just after);
//   - else interrupted if ctx has ended (a signal, jobrun's stop, a deadline), or err
//     (any part of an errors.Join) is a cancellation (context.Canceled, which a
//     signal's cli.Interrupted also is) or the database gone away (ErrUnavailable).
//     Interrupted wins over failed: a stop from outside is the likely cause of the
//     other errors, and the next run of the same key resumes the work (and records
//     failed if the failure was real);
//   - else failed.
//
// A loop that stops on a cancelled ctx without an error passes ctx.Err() as err.
func RunStatusOf(ctx context.Context, err error) RunStatus {
	switch {
	case err == nil:
		return RunOK
	case ctx.Err() != nil, errors.Is(err, context.Canceled), errors.Is(err, ErrUnavailable):
		return RunInterrupted
	}
	return RunFailed
}
