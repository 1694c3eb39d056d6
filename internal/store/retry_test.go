package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// retryCount runs Retry with a short policy over fn's errors (one per attempt, the last
// repeated) and returns how many attempts it made and its error.
func retryCount(p RetryPolicy, errs ...error) (int, error) {
	n := 0
	err := Retry(context.Background(), p, nil, "op", func(context.Context) error {
		n++
		return errs[min(n, len(errs))-1]
	})
	return n, err
}

// TestRetryDecidesByIsUnavailable: Retry retries exactly what IsUnavailable accepts.
// Each case was decided differently by one of the two former policies: a local file's
// error (ENOSPC under a spill file) was retried as a database outage, too many
// connections and a closed pooled connection were not waited for by zprobe.
func TestRetryDecidesByIsUnavailable(t *testing.T) {
	p := RetryPolicy{Deadline: time.Minute, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond}
	fileErr := &fs.PathError{Op: "write", Path: "/var/spill/round.jsonl", Err: syscall.ENOSPC}
	n, err := retryCount(p, fmt.Errorf("spill: %w", fileErr))
	if n != 1 || !errors.Is(err, syscall.ENOSPC) || errors.Is(err, ErrUnavailable) {
		t.Errorf("file error: %d attempts, %v; want one attempt and the file's error", n, err)
	}
	for _, e := range []error{&pgconn.PgError{Code: "53300"}, &pgconn.PgError{Code: "40P01"}, fmt.Errorf("x: %w", pgconn.ErrConnClosed)} {
		n, err := retryCount(p, e, e, nil)
		if n != 3 || err != nil {
			t.Errorf("%v: %d attempts, %v; want 3 attempts and success", e, n, err)
		}
	}
}

// TestRetryInterruptible: with Interruptible the attempt runs under ctx, and ctx's end
// ends the wait for the database with ctx's error; without it, the attempt's context
// outlives ctx and the retries end with ErrUnavailable.
func TestRetryInterruptible(t *testing.T) {
	down := &pgconn.PgError{Code: "57P03"}
	for _, interruptible := range []bool{false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		p := RetryPolicy{Deadline: NoDeadline, Attempt: NoDeadline, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond,
			Interruptible: interruptible}
		attempts, attemptCancelled := 0, false
		err := Retry(ctx, p, nil, "op", func(actx context.Context) error {
			attempts++
			if attempts == 2 {
				cancel()
				attemptCancelled = actx.Err() != nil
			}
			return down
		})
		cancel()
		if attemptCancelled != interruptible {
			t.Errorf("interruptible %v: the attempt's context ended with ctx: %v", interruptible, attemptCancelled)
		}
		if got := errors.Is(err, context.Canceled); got != interruptible || errors.Is(err, ErrUnavailable) == interruptible {
			t.Errorf("interruptible %v: %v", interruptible, err)
		}
	}
}
