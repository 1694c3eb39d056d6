package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Transient reports whether err means the database could not be reached or dropped the
// connection (refused or timed-out connect, a connection closed mid-statement, the
// server shutting down or starting up, too many connections): a later attempt of the
// same work can succeed. Errors the server raised about the statement itself (a
// constraint, a syntax error, a missing table) are not transient.
func Transient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	if errors.Is(err, ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case strings.HasPrefix(pgErr.Code, "08"): // connection_exception
			return true
		case pgErr.Code == "57P01", pgErr.Code == "57P02", pgErr.Code == "57P03": // admin/crash shutdown, cannot connect now
			return true
		case pgErr.Code == "53300": // too_many_connections
			return true
		case pgErr.Code == "40001", pgErr.Code == "40P01": // serialization failure, deadlock
			return true
		}
		return false
	}
	var connErr *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connErr) || errors.As(err, &netErr) || pgconn.SafeToRetry(err) || pgconn.Timeout(err)
}

// RetryPolicy says how long work waits for an unavailable database.
type RetryPolicy struct {
	// Deadline is how long the database may stay unavailable (counted from the first
	// failed attempt) before Retry gives up with ErrUnavailable; NoDeadline: until the
	// context ends.
	Deadline time.Duration
	// Attempt bounds one attempt (a hung server, or a network that drops packets, never
	// fails a statement by itself); 0: DefaultAttemptTimeout.
	Attempt time.Duration
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

// Retry runs fn until it succeeds. A transient failure (Transient) is logged as a
// warning with the attempt count and the outage so far, and retried with backoff until
// the database has been unavailable for p.Deadline; then Retry returns an error
// wrapping ErrUnavailable and the last failure. Any other error is returned at once.
// Each attempt gets a context of its own that ctx's cancellation does not end (a write
// that is under way finishes), but once ctx is done the next failure ends the retries.
func Retry(ctx context.Context, p RetryPolicy, log *slog.Logger, what string, fn func(context.Context) error) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if p.Attempt <= 0 {
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
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.Attempt)
		err := fn(actx)
		cancel()
		if err == nil {
			if attempt > 1 {
				log.Warn("database back: "+what+" done", append([]any{"attempts", attempt,
					"outage", time.Since(first).Round(time.Millisecond)}, attrs(p)...)...)
			}
			return nil
		}
		if !Transient(err) {
			return err
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
