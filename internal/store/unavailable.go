package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// IsUnavailable reports whether err means the database could not be reached, went
// away during the operation, or refused the work for now (connection refused or reset,
// server shut down or starting up, too many connections, a dead pooled connection, a
// serialization failure or deadlock), as opposed to an error of the statement itself
// (a constraint, a syntax error, a missing table): a later attempt of the same work
// can succeed. It is the one outage predicate of every stage: Retry retries what it
// accepts, and a caller that cannot wait (zprobe's ingest) defers the work. Every write
// of this package is idempotent.
//
// Only errors of the database's connection and server count, by type: pgconn's
// (connect errors, SQLSTATE class 08, 57P01..57P03, 53300, 40001, 40P01, a closed
// connection, what pgconn says is safe to retry or a timeout) and a *net.OpError (a
// socket's dial, read or write), a closed network connection, an unexpected EOF, or a
// deadline. An error of a local file is not one, whatever its errno: syscall.Errno
// satisfies net.Error, and a full disk under the raw output (ENOSPC) was reported as
// "database unavailable" (exit code 3).
func IsUnavailable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) { // the caller gave up, not the database
		return false
	}
	if errors.Is(err, ErrUnavailable) {
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
		case pgErr.Code == "40001", pgErr.Code == "40P01": // serialization_failure, deadlock_detected
			return true
		}
		return false
	}
	var connErr *pgconn.ConnectError
	var opErr *net.OpError
	var pathErr *fs.PathError
	switch {
	case errors.As(err, &connErr), errors.As(err, &opErr):
		return true
	case errors.As(err, &pathErr):
		return false // a file's error (the raw output, a spill file), not the connection's
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, net.ErrClosed), errors.Is(err, pgconn.ErrConnClosed):
		return true
	}
	return pgconn.SafeToRetry(err) || pgconn.Timeout(err)
}

// Unavailable returns err wrapped in ErrUnavailable when IsUnavailable(err), else err.
func Unavailable(err error) error {
	if err == nil || errors.Is(err, ErrUnavailable) || !IsUnavailable(err) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}
