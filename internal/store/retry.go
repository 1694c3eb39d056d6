package store

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// RetryPolicy says how long work waits for an unavailable database.
type RetryPolicy struct {
	// Deadline is how long the database may stay unavailable (counted from the first
	// failed attempt) before Retry gives up with ErrUnavailable; NoDeadline: until the
	// context ends.
	Deadline time.Duration
	// Attempt bounds one attempt (a hung server, or a network that drops packets, never
	// fails a statement by itself); 0: DefaultAttemptTimeout; NoDeadline: unbounded
	// (an attempt that may take long, e.g. replaying a raw scan file).
	Attempt time.Duration
	// Interruptible: each attempt runs under ctx itself, so that ctx's end stops one
	// under way (a long replay), and ctx's end ends the retries with ctx's error (the
	// work was interrupted, not given up for the database). Otherwise an attempt under
	// way finishes, and once ctx is done the next failure gives up with ErrUnavailable
	// (the caller keeps the work elsewhere, e.g. the campaign's spill file).
	Interruptible bool
	// MinBackoff and MaxBackoff bound the wait between attempts (doubling);
	// 0: 250 ms and 5 s.
	MinBackoff, MaxBackoff time.Duration
	// Attrs, if set, adds attributes to every warning (e.g. how much work is waiting).
	Attrs func() []any
}

// NoDeadline is RetryPolicy.Deadline for work that waits for the database as long as
// its context lasts.
const NoDeadline time.Duration = -1

// DefaultAttemptTimeout bounds one attempt of a retried database operation.
const DefaultAttemptTimeout = 30 * time.Second

// Retry runs fn until it succeeds: the one retry of every stage. A failure that means
// the database is unavailable (IsUnavailable) is logged as a warning with the attempt
// count and the outage so far, and retried with backoff until the database has been
// unavailable for p.Deadline; then Retry returns an error wrapping ErrUnavailable and
// the last failure. Any other error is returned at once. Each attempt gets a context of
// its own bounded by p.Attempt that ctx's cancellation does not end (a write that is
// under way finishes), but once ctx is done the next failure ends the retries; with
// p.Interruptible ctx's cancellation reaches the attempt and ends the retries with
// ctx's error.
func Retry(ctx context.Context, p RetryPolicy, log *slog.Logger, what string, fn func(context.Context) error) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if p.Attempt == 0 {
		p.Attempt = DefaultAttemptTimeout
	}
	if p.MinBackoff <= 0 {
		p.MinBackoff = 250 * time.Millisecond
	}
	if p.MaxBackoff < p.MinBackoff {
		p.MaxBackoff = max(5*time.Second, p.MinBackoff)
	}
	var first time.Time
	backoff := p.MinBackoff
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithoutCancel(ctx), context.CancelFunc(func() {})
		if p.Interruptible {
			actx = ctx
		}
		if p.Attempt > 0 {
			actx, cancel = context.WithTimeout(actx, p.Attempt)
		}
		err := fn(actx)
		cancel()
		if err == nil {
			if attempt > 1 {
				log.Warn("database back: "+what+" done", append([]any{"attempts", attempt,
					"outage", time.Since(first).Round(time.Millisecond)}, attrs(p)...)...)
			}
			return nil
		}
		if !IsUnavailable(err) {
			return err
		}
		if p.Interruptible && ctx.Err() != nil {
			return fmt.Errorf("%s: %w (database unavailable: %s)", what, ctx.Err(), oneLine(err))
		}
		if first.IsZero() {
			first = time.Now()
		}
		outage := time.Since(first)
		if (p.Deadline != NoDeadline && outage >= p.Deadline) || ctx.Err() != nil {
			log.Error("database unavailable: giving up on "+what, append([]any{"attempts", attempt,
				"outage", outage.Round(time.Millisecond), "deadline", p.Deadline, "err", oneLine(err)}, attrs(p)...)...)
			return fmt.Errorf("%w: %s: still failing after %v (%d attempts; deadline %v): %s",
				ErrUnavailable, what, outage.Round(time.Millisecond), attempt, p.Deadline, oneLine(err))
		}
		wait, deadline := backoff, any("none")
		if p.Deadline != NoDeadline {
			wait, deadline = min(backoff, p.Deadline-outage), p.Deadline
		}
		log.Warn("waiting for database: "+what+" failed, retrying", append([]any{"attempt", attempt,
			"retry_in", wait.Round(time.Millisecond), "outage", outage.Round(time.Millisecond),
			"deadline", deadline, "err", oneLine(err)}, attrs(p)...)...)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			if p.Interruptible {
				return fmt.Errorf("%s: %w (database unavailable: %s)", what, ctx.Err(), oneLine(err))
			}
		}
		backoff = min(2*backoff, p.MaxBackoff)
	}
}

func attrs(p RetryPolicy) []any {
	if p.Attrs == nil {
		return nil
	}
	return p.Attrs()
}
