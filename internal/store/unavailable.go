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

// IsUnavailable reports whether err means the database could not be reached or went
// away during the operation (connection refused or reset, server shut down or starting
// up, a dead pooled connection), as opposed to an error of the statement itself. A
// caller may wait for the database and retry the operation: every write of this
// package is idempotent.
//
// Only errors of the database's connection count: pgconn's (connect errors, SQLSTATE
// class 08 and 57P01..57P03, a closed connection, what pgconn says is safe to retry) and
// a *net.OpError (a socket's dial, read or write), or a deadline. An error of a local
// file is not one, whatever its errno: syscall.Errno satisfies net.Error, and a full disk
// under the raw output (ENOSPC) was reported as "database unavailable" (exit code 3).
func IsUnavailable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) { // the caller gave up, not the database
		return false
	}
	if errors.Is(err, ErrUnavailable) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// Class 08: connection exception; 57P01..57P03: admin/crash shutdown, cannot
		// connect now (starting up or shutting down).
		return strings.HasPrefix(pgErr.Code, "08") || pgErr.Code == "57P01" || pgErr.Code == "57P02" || pgErr.Code == "57P03"
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
		errors.Is(err, net.ErrClosed):
		return true
	}
	return errors.Is(err, pgconn.ErrConnClosed) || pgconn.SafeToRetry(err)
}

// Unavailable returns err wrapped in ErrUnavailable when IsUnavailable(err), else err.
func Unavailable(err error) error {
	if err == nil || errors.Is(err, ErrUnavailable) || !IsUnavailable(err) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}
