package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
)

// IsUnavailable reports whether err means the database could not be reached or went
// away during the operation (connection refused or reset, server shut down or starting
// up, a dead pooled connection), as opposed to an error of the statement itself. A
// caller may wait for the database and retry the operation: every write of this
// package is idempotent.
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
	var netErr net.Error
	switch {
	case errors.As(err, &connErr), errors.As(err, &netErr):
		return true
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, syscall.ENOENT):
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
