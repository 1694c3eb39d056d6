package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestIsUnavailableByType: only the database connection's errors mean "unavailable"
// (exit code 3, wait and retry): a local file's error never does, whatever its errno
// (a full disk under zprobe's raw output was reported as "database unavailable").
func TestIsUnavailableByType(t *testing.T) {
	fileErr := func(op string, errno syscall.Errno) error {
		return &fs.PathError{Op: op, Path: "/var/scans/2026-W47/x/weekly-shard0/853.csv", Err: errno}
	}
	netErr := func(op string, errno syscall.Errno) error {
		return &net.OpError{Op: op, Net: "unix", Err: os.NewSyscallError(op, errno)}
	}
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"full disk under the raw output", fmt.Errorf("raw output: %w", fileErr("write", syscall.ENOSPC)), false},
		{"raw file missing", fileErr("open", syscall.ENOENT), false},
		{"broken pipe of a file", fileErr("write", syscall.EPIPE), false},
		{"bare errno", syscall.ENOSPC, false},
		{"statement error", &pgconn.PgError{Code: "23505"}, false},
		{"canceled", fmt.Errorf("x: %w", context.Canceled), false},
		{"plain error", errors.New("database unavailable"), false},
		{"connection reset", fmt.Errorf("ingest: %w", netErr("read", syscall.ECONNRESET)), true},
		{"connection refused", netErr("dial", syscall.ECONNREFUSED), true},
		{"connect error", &pgconn.ConnectError{}, true},
		{"server shut down", &pgconn.PgError{Code: "57P01"}, true},
		{"connection exception", &pgconn.PgError{Code: "08006"}, true},
		{"unexpected EOF", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true},
		{"deadline", fmt.Errorf("x: %w", context.DeadlineExceeded), true},
		{"wrapped sentinel", fmt.Errorf("x: %w", ErrUnavailable), true},
		// Classes only one of the two former predicates had (IsUnavailable, and the
		// Transient of Retry): the one predicate has them all.
		{"too many connections", &pgconn.PgError{Code: "53300"}, true},
		{"serialization failure", fmt.Errorf("write: %w", &pgconn.PgError{Code: "40001"}), true},
		{"deadlock", &pgconn.PgError{Code: "40P01"}, true},
		{"closed pooled connection", fmt.Errorf("x: %w", pgconn.ErrConnClosed), true},
		{"closed network connection", fmt.Errorf("x: %w", net.ErrClosed), true},
	} {
		if got := IsUnavailable(c.err); got != c.want {
			t.Errorf("%s: IsUnavailable(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}
