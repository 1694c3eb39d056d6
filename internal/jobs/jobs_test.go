package jobs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/store"
	"github.com/doqscan/doqscan/internal/store/storetest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestKey(t *testing.T) {
	at := time.Date(2026, 11, 22, 4, 37, 0, 0, time.UTC)
	if k, _ := Key("scan", at); k != "2026-W47" {
		t.Errorf("scan key %s", k)
	}
	if k, _ := Key("measure", at); k != "2026-11-22T04" {
		t.Errorf("measure key %s", k)
	}
	if _, err := Key("nope", at); err == nil {
		t.Error("unknown job accepted")
	}
}

func TestOverlappingRunsAreSkipped(t *testing.T) {
	s := storetest.Open(t)
	ctx := context.Background()
	now := time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC)
	inside := make(chan struct{})
	release := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, s, quiet, "measure", "vp1", now, func(context.Context, string) error {
			close(inside)
			<-release
			return nil
		})
	}()
	<-inside
	ran := false
	err := Run(ctx, s, quiet, "measure", "vp1", now.Add(10*time.Minute), func(context.Context, string) error {
		ran = true
		return nil
	})
	if !errors.Is(err, ErrLocked) || ran {
		t.Fatalf("second run: err %v, ran %v; want ErrLocked without running", err, ran)
	}
	// Another vantage point is not blocked by vp1's lock.
	if err := Run(ctx, s, quiet, "measure", "vp2", now, func(context.Context, string) error { return nil }); err != nil {
		t.Fatalf("vp2: %v", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var status string
	s.Pool.QueryRow(ctx, `SELECT status FROM job_runs WHERE job='measure' AND vantage_id='vp1' AND run_key='2026-11-22T04'`).Scan(&status)
	if status != "ok" {
		t.Errorf("vp1 run status %q", status)
	}
}

func TestMissedHoursAreRecorded(t *testing.T) {
	s := storetest.Open(t)
	ctx := context.Background()
	base := time.Now().UTC().Truncate(time.Hour)
	ok := func(context.Context, string) error { return nil }
	if err := Run(ctx, s, quiet, "measure", "vp1", base, ok); err != nil {
		t.Fatal(err)
	}
	// Three hours later (by the job's clock, not the wall clock).
	base = base.Add(3 * time.Hour)
	if err := Run(ctx, s, quiet, "measure", "vp1", base, ok); err != nil {
		t.Fatal(err)
	}
	var missed int
	s.Pool.QueryRow(ctx, `SELECT count(*) FROM job_runs WHERE status = 'missed'`).Scan(&missed)
	if missed != 2 {
		t.Errorf("%d missed hours recorded, want 2", missed)
	}
	// Running the same hour again adds no row.
	var before, after int
	s.Pool.QueryRow(ctx, `SELECT count(*) FROM job_runs`).Scan(&before)
	Run(ctx, s, quiet, "measure", "vp1", base, ok)
	s.Pool.QueryRow(ctx, `SELECT count(*) FROM job_runs`).Scan(&after)
	if before != after {
		t.Errorf("re-run added rows: %d -> %d", before, after)
	}
}

func TestFailureIsRecorded(t *testing.T) {
	s := storetest.Open(t)
	ctx := context.Background()
	err := Run(ctx, s, quiet, "scan", "vp1", time.Now(), func(context.Context, string) error { return errors.New("zmap died") })
	if err == nil {
		t.Fatal("failure swallowed")
	}
	var status, detail string
	s.Pool.QueryRow(ctx, `SELECT status, detail FROM job_runs`).Scan(&status, &detail)
	if status != "failed" || detail != "zmap died" {
		t.Errorf("recorded %q %q", status, detail)
	}
}

// TestInterruptionIsRecorded: a job stopped from outside (its context cancelled, as a
// signal to jobrun does) is recorded 'interrupted', by the rule scans, verification runs
// and campaigns use (store.RunStatusOf), not 'failed'; and an interrupted period is not
// counted as missed by the next run.
func TestInterruptionIsRecorded(t *testing.T) {
	s := storetest.Open(t)
	ctx, cancel := context.WithCancel(context.Background())
	now := time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC)
	err := Run(ctx, s, quiet, "measure", "vp1", now, func(ctx context.Context, _ string) error {
		cancel()
		<-ctx.Done()
		return fmt.Errorf("measure: %w", ctx.Err())
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v, want the cancellation", err)
	}
	var status string
	s.Pool.QueryRow(context.Background(), `SELECT status FROM job_runs WHERE run_key = '2026-11-22T04'`).Scan(&status)
	if status != string(store.RunInterrupted) {
		t.Errorf("recorded %q, want interrupted", status)
	}
	if err := Run(context.Background(), s, quiet, "measure", "vp1", now.Add(time.Hour), func(context.Context, string) error { return nil }); err != nil {
		t.Fatal(err)
	}
	var missed int
	s.Pool.QueryRow(context.Background(), `SELECT count(*) FROM job_runs WHERE status = 'missed'`).Scan(&missed)
	if missed != 0 {
		t.Errorf("%d periods recorded missed after an interrupted one, want 0", missed)
	}
}

func TestKeyStartInvertsKey(t *testing.T) {
	for _, job := range []string{"scan", "measure"} {
		for at := time.Date(2020, 12, 25, 7, 30, 0, 0, time.UTC); at.Year() < 2028; at = at.Add(61 * time.Hour) {
			k, _ := Key(job, at)
			st, err := KeyStart(job, k)
			if err != nil {
				t.Fatal(err)
			}
			if k2, _ := Key(job, st); k2 != k || st.After(at) || at.Sub(st) >= Cadence[job] {
				t.Fatalf("%s at %v: key %s starts %v (key %s)", job, at, k, st, k2)
			}
		}
	}
	if _, err := KeyStart("scan", "2026-W99"); err == nil {
		t.Error("week 99 accepted")
	}
}

func TestMissedWeeksUnderCompressedClock(t *testing.T) {
	s := storetest.Open(t)
	ctx := context.Background()
	ok := func(context.Context, string) error { return nil }
	w1 := time.Date(2026, 12, 21, 3, 0, 0, 0, time.UTC)        // 2026-W52
	for _, at := range []time.Time{w1, w1.AddDate(0, 0, 21)} { // then 2027-W03
		if err := Run(ctx, s, quiet, "scan", "vp1", at, ok); err != nil {
			t.Fatal(err)
		}
	}
	var keys []string
	rows, _ := s.Pool.Query(ctx, `SELECT run_key FROM job_runs WHERE status = 'missed' ORDER BY run_key`)
	for rows.Next() {
		var k string
		rows.Scan(&k)
		keys = append(keys, k)
	}
	if len(keys) != 2 || keys[0] != "2026-W53" || keys[1] != "2027-W01" {
		t.Errorf("missed %v, want [2026-W53 2027-W01]", keys)
	}
}

// TestLockLossCancelsTheRun: terminating the backend that holds the lock cancels fn's
// context with ErrLockLost at once (no ping interval involved), and the run is recorded
// as failed with the reason; the lock is then free for the next run.
func TestLockLossCancelsTheRun(t *testing.T) {
	s := storetest.Open(t)
	ctx := context.Background()
	now := time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC)
	defer func(d time.Duration) { LockCheck = d }(LockCheck)
	LockCheck = time.Hour
	inside := make(chan struct{})
	cause := make(chan error, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, s, quiet, "measure", "vp1", now, func(ctx context.Context, _ string) error {
			close(inside)
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return ctx.Err()
		})
	}()
	<-inside
	var n int
	if err := s.Pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_locks WHERE locktype = 'advisory'
		AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("terminated %d lock holders (%v), want 1", n, err)
	}
	if c := <-cause; !errors.Is(c, ErrLockLost) {
		t.Errorf("fn's context ended with %v, want ErrLockLost", c)
	}
	if err := <-done; !errors.Is(err, ErrLockLost) {
		t.Errorf("Run: %v, want ErrLockLost", err)
	}
	var status, detail string
	s.Pool.QueryRow(ctx, `SELECT status, detail FROM job_runs WHERE job='measure' AND vantage_id='vp1'`).Scan(&status, &detail)
	if status != "failed" || !strings.Contains(detail, ErrLockLost.Error()) {
		t.Errorf("job_runs: %s %q", status, detail)
	}
	if err := Run(ctx, s, quiet, "measure", "vp1", now.Add(time.Hour), func(context.Context, string) error { return nil }); err != nil {
		t.Errorf("the next run: %v", err)
	}
}
