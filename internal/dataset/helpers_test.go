package dataset_test

import (
	"database/sql"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	_ "modernc.org/sqlite"
)

func timeDate(y, m, d int) time.Time { return time.Date(y, time.Month(m), d, 0, 0, 0, 0, time.UTC) }

func sqliteURL(t *testing.T, path, query string) string {
	t.Helper()
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	return (&url.URL{Scheme: "file", Path: abs, RawQuery: query}).String()
}

// openRO opens a SQLite file read-only without touching it (no -wal or -shm beside it).
func openRO(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", sqliteURL(t, path, "mode=ro&immutable=1"))
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// openRW opens (or creates) a SQLite file for writing a fixture.
func openRW(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", sqliteURL(t, path, ""))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	return db
}
