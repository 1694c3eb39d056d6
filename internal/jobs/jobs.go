// Package jobs runs scheduled doqscan jobs (the weekly scan, verification, the hourly
// measurement, the report) under a PostgreSQL advisory lock, so two runs of the same job
// from one vantage point never overlap, and records every run in job_runs, including the
// runs that were missed: an hourly job that did not run for an hour leaves a 'missed' row
// and a warning instead of a silent gap.
package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/doqscan/doqscan/internal/runkey"
	"github.com/doqscan/doqscan/internal/store"
)

// Jobs and their cadence.
var Cadence = map[string]time.Duration{
	"scan":      7 * 24 * time.Hour,
	"verify":    7 * 24 * time.Hour,
	"conncheck": 7 * 24 * time.Hour,
	"measure":   time.Hour,
	"report":    time.Hour,
	"blocklist": time.Hour,
}

// ErrLocked says another run of the same job holds the lock (store.ErrLocked: the
// error is a *store.LockedError naming the holder).
var ErrLocked = store.ErrLocked

// Key returns the run key of a job at time t: the ISO week for weekly jobs
// ("2026-W47"), the hour for hourly ones ("2026-11-22T04").
func Key(job string, t time.Time) (string, error) {
	c, ok := Cadence[job]
	if !ok {
		return "", fmt.Errorf("unknown job %q", job)
	}
	t = t.UTC()
	if c >= 24*time.Hour {
		return runkey.Week(t), nil
	}
	return runkey.Hour(t), nil
}

// lockKey is the advisory lock of (job, vantage) (store.RunKey; its id is the same
// FNV-1a hash of "doqscan-job|<job>|<vantage>" the lock always had).
func lockKey(job, vantage string) string { return store.RunKey("job", job, vantage) }

// ErrLockLost says the connection holding the job's lock dropped while the job ran:
// PostgreSQL released the lock with the session, so another run could start.
var ErrLockLost = store.ErrLockLost

// LockCheck is how often the lock's connection is pinged while a job runs (a dropped
// TCP connection may say nothing until written to). A terminated backend or a closed
// connection is noticed at once.
var LockCheck = 10 * time.Second

// Run runs fn as the run of job for the period containing now, from vantage. If another
// run of the job holds the lock, it records 'skipped-locked' and returns ErrLocked. Before
// running, it records every period since the job's last run that has no row as 'missed'
// (at most maxMissed of them) and logs it. The run is recorded with the status
// store.RunStatusOf gives (ok, interrupted when ctx ends or fn's error is a
// cancellation or the database gone away, else failed).
//
// The lock is a session-level advisory lock on a connection of its own (not one of the
// pool's, which the pool may close or hand out), watched while fn runs. If that
// connection drops, the lock is gone: fn's context is cancelled with cause ErrLockLost
// (RunCommand stops the command with SIGTERM), the run is recorded 'failed' with the
// reason, and Run returns an error wrapping ErrLockLost. Stopping is the safe choice:
// with the lock released, a second run may start, and two runs of one job must not
// overlap.
func Run(ctx context.Context, s *store.Store, log *slog.Logger, job, vantage string, now time.Time,
	fn func(ctx context.Context, key string) error) error {
	key, err := Key(job, now)
	if err != nil {
		return err
	}
	if err := s.EnsureVantage(ctx, store.Vantage{ID: vantage}); err != nil {
		return err
	}
	lock, lockErr := s.TryLock(ctx, lockKey(job, vantage))
	host, _ := os.Hostname()
	if errors.Is(lockErr, store.ErrLocked) {
		log.Warn("job skipped: another run holds the lock", "job", job, "key", key, "vantage", vantage, "err", lockErr)
		_, err := s.Pool.Exec(ctx, `INSERT INTO job_runs (job, run_key, vantage_id, host, status, finished_at, detail)
			VALUES ($1,$2,$3,$4,'skipped-locked', now(), $5)
			ON CONFLICT (job, run_key, vantage_id) DO NOTHING`, job, key, vantage, host, lockErr.Error())
		if err != nil {
			return err
		}
		return lockErr
	}
	if lockErr != nil {
		return fmt.Errorf("job lock: %w", lockErr)
	}
	defer lock.Release()

	if err := recordMissed(ctx, s, log, job, vantage, now); err != nil {
		return err
	}
	if _, err := s.Pool.Exec(ctx, `INSERT INTO job_runs (job, run_key, vantage_id, host, status, started_at)
		VALUES ($1,$2,$3,$4,'running', now())
		ON CONFLICT (job, run_key, vantage_id) DO UPDATE SET status = 'running', started_at = now(),
		  finished_at = NULL, host = EXCLUDED.host, detail = ''`, job, key, vantage, host); err != nil {
		return err
	}
	log.Info("job started", "job", job, "key", key, "vantage", vantage)
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	watched := make(chan error, 1)
	go func() { watched <- lock.Watch(runCtx, LockCheck) }()
	fnDone := make(chan error, 1)
	go func() { fnDone <- fn(runCtx, key) }()
	var runErr, lost error
	select {
	case runErr = <-fnDone:
		cancel(nil)
		<-watched //nolint:errcheck // fn is done: a loss noticed now changes nothing
	case lost = <-watched: // nil: ctx ended (interrupted) and fn is stopping
		if lost != nil {
			log.Error("job lock lost: the database connection holding it dropped; stopping the command",
				"job", job, "key", key, "vantage", vantage, "err", lost)
			cancel(ErrLockLost)
		}
		runErr = <-fnDone
	}
	if lost != nil {
		// The command's own error (its stop) is detail: the run failed because the lock
		// was lost, whatever the command did on the way out.
		runErr = fmt.Errorf("%w (%v); the command was stopped: %v", ErrLockLost, lost, orDone(runErr))
	}
	status, detail := store.RunStatusOf(ctx, runErr), ""
	if runErr != nil {
		detail = runErr.Error()
	}
	if _, err := s.Pool.Exec(context.WithoutCancel(ctx), `UPDATE job_runs SET status = $4, finished_at = now(), detail = $5
		WHERE job = $1 AND run_key = $2 AND vantage_id = $3`, job, key, vantage, status, detail); err != nil && runErr == nil {
		runErr = err
	}
	log.Info("job finished", "job", job, "key", key, "vantage", vantage, "status", status)
	return runErr
}

func orDone(err error) error {
	if err == nil {
		return errors.New("it ended without error")
	}
	return err
}

// maxMissed bounds how many missed periods one run records (a scanner down for a month
// records a month of hours, not more).
const maxMissed = 24 * 31

func recordMissed(ctx context.Context, s *store.Store, log *slog.Logger, job, vantage string, now time.Time) error {
	// The last period that ran, from its run key (not started_at): the periods are those
	// of the clock the job runs under, which tests compress with --now.
	var lastKey string
	err := s.Pool.QueryRow(ctx, `SELECT coalesce(max(run_key), '') FROM job_runs
		WHERE job = $1 AND vantage_id = $2 AND status IN ('ok', 'failed', 'interrupted', 'running')`, job, vantage).Scan(&lastKey)
	if err != nil {
		return err
	}
	if lastKey == "" {
		return nil // first run ever: nothing can have been missed
	}
	last, err := KeyStart(job, lastKey)
	if err != nil {
		return err
	}
	c := Cadence[job]
	cur, _ := Key(job, now)
	var missed []string
	for t := last.Add(c); ; t = t.Add(c) {
		k, _ := Key(job, t)
		if k >= cur || t.After(now) || len(missed) >= maxMissed {
			break
		}
		missed = append(missed, k)
	}
	for _, k := range missed {
		tag, err := s.Pool.Exec(ctx, `INSERT INTO job_runs (job, run_key, vantage_id, status, finished_at, detail)
			VALUES ($1,$2,$3,'missed', now(), 'no run started in this period')
			ON CONFLICT (job, run_key, vantage_id) DO NOTHING`, job, k, vantage)
		if err != nil {
			return err
		}
		if tag.RowsAffected() > 0 {
			log.Warn("job period missed", "job", job, "key", k, "vantage", vantage)
		}
	}
	return nil
}

// KeyStart is the inverse of Key: the start of the period a run key names (the Monday
// 00:00 UTC of an ISO week, or the hour).
func KeyStart(job, key string) (time.Time, error) {
	c, ok := Cadence[job]
	if !ok {
		return time.Time{}, fmt.Errorf("unknown job %q", job)
	}
	if c < 24*time.Hour {
		return runkey.HourStart(key)
	}
	return runkey.WeekStart(key)
}
