package dataset

import (
	"context"
	"database/sql"
	"fmt"
	"net/netip"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	_ "modernc.org/sqlite" // database/sql driver "sqlite" (pure Go)
)

// The study's SQLite files were written by GORM: every table has id, created_at,
// updated_at, deleted_at (soft delete: rows with deleted_at set are skipped).

// openSQLite opens a SQLite file read-only and immutable (the published files sit in
// read-only directories; nothing may create -wal or -shm files beside them).
func openSQLite(path string) (*sql.DB, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	u := url.URL{Scheme: "file", Path: abs, RawQuery: "mode=ro&immutable=1"}
	db, err := sql.Open("sqlite", u.String())
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	return db, nil
}

// sqliteTables lists the tables of a SQLite file; a file that is not SQLite is a
// malformed error.
func sqliteTables(ctx context.Context, db *sql.DB) (map[string]bool, error) {
	rows, err := db.QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type = 'table'`)
	if err != nil {
		return nil, malformed("not a readable SQLite database: %v", err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, malformed("not a readable SQLite database: %v", err)
		}
		out[n] = true
	}
	if err := rows.Err(); err != nil {
		return nil, malformed("not a readable SQLite database: %v", err)
	}
	return out, nil
}

// sqlRow is one row of a table read by column name; its methods convert SQLite's loose
// values and record the first conversion error with the column's name.
type sqlRow struct {
	cols map[string]int
	vals []any
	err  error
}

func (r *sqlRow) fail(col string, format string, a ...any) {
	if r.err == nil {
		r.err = malformed("column %s: %s", col, fmt.Sprintf(format, a...))
	}
}

func (r *sqlRow) raw(col string) any { return r.vals[r.cols[col]] }

func (r *sqlRow) str(col string) string {
	switch v := r.raw(col).(type) {
	case nil:
		return ""
	case string:
		return r.text(col, v)
	case []byte:
		return r.text(col, string(v))
	case int64:
		return strconv.FormatInt(v, 10)
	default:
		r.fail(col, "want text, found %T", v)
		return ""
	}
}

// text refuses a text value that is not UTF-8 or holds a NUL (checkString).
func (r *sqlRow) text(col, s string) string {
	if err := checkString(s, strings.Count(s, "\ufffd")); err != nil {
		r.fail(col, "%v", err)
		return ""
	}
	return s
}

func (r *sqlRow) int(col string) *int64 {
	switch v := r.raw(col).(type) {
	case nil:
		return nil
	case int64:
		return &v
	case float64:
		if v != float64(int64(v)) {
			r.fail(col, "want an integer, found %v", v)
			return nil
		}
		n := int64(v)
		return &n
	case string, []byte:
		s := strings.TrimSpace(r.str(col))
		if s == "" {
			return nil
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			r.fail(col, "want an integer, found %q", clip(s))
			return nil
		}
		return &n
	case bool:
		n := int64(0)
		if v {
			n = 1
		}
		return &n
	default:
		r.fail(col, "want an integer, found %T", v)
		return nil
	}
}

func (r *sqlRow) boolean(col string) *bool {
	if s, ok := r.raw(col).(string); ok {
		switch strings.ToLower(strings.TrimSpace(s)) {
		case "true":
			b := true
			return &b
		case "false":
			b := false
			return &b
		}
	}
	n := r.int(col)
	if n == nil {
		return nil
	}
	if *n != 0 && *n != 1 {
		r.fail(col, "want 0 or 1, found %d", *n)
		return nil
	}
	b := *n == 1
	return &b
}

func (r *sqlRow) bytes(col string) []byte {
	switch v := r.raw(col).(type) {
	case nil:
		return nil
	case []byte:
		return append([]byte(nil), v...)
	case string:
		return []byte(v)
	default:
		r.fail(col, "want a blob, found %T", v)
		return nil
	}
}

func (r *sqlRow) addr(col string) netip.Addr {
	s := strings.TrimSpace(r.str(col))
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		r.fail(col, "not an IP address: %q", clip(s))
		return netip.Addr{}
	}
	return a.Unmap()
}

func (r *sqlRow) port(col string) int32 {
	n := r.int(col)
	if n == nil || *n < 0 || *n > 65535 {
		r.fail(col, "want a port 0..65535")
		return 0
	}
	return int32(*n)
}

// gormTime parses GORM's datetime text ("2021-08-13 07:00:09.051163634+02:00").
var gormLayouts = []string{"2006-01-02 15:04:05.999999999-07:00", "2006-01-02 15:04:05.999999999Z07:00",
	time.RFC3339Nano, "2006-01-02 15:04:05.999999999", "2006-01-02T15:04:05.999999999"}

func (r *sqlRow) time(col string) *time.Time {
	switch v := r.raw(col).(type) {
	case nil:
		return nil
	case time.Time:
		t := v.UTC()
		return &t
	case int64:
		t := time.Unix(v, 0).UTC()
		return &t
	case string, []byte:
		s := strings.TrimSpace(r.str(col))
		if s == "" {
			return nil
		}
		for _, l := range gormLayouts {
			if t, err := time.Parse(l, s); err == nil {
				t = t.UTC()
				return &t
			}
		}
		r.fail(col, "not a time: %q", clip(s))
		return nil
	default:
		r.fail(col, "want a time, found %T", v)
		return nil
	}
}

// eachRow runs fn for every row of table (columns cols, in rowid order, soft-deleted rows
// skipped when the table has deleted_at). Errors name the table and the row's id.
func eachRow(ctx context.Context, db *sql.DB, table string, cols []string, fn func(r *sqlRow) error) error {
	has, err := tableColumns(ctx, db, table)
	if err != nil {
		return err
	}
	for _, c := range cols {
		if !has[c] {
			return malformed("table %s has no column %s", table, c)
		}
	}
	idCol := "rowid"
	if has["id"] {
		idCol = "id"
	}
	q := fmt.Sprintf("SELECT %s, %s FROM %s", quoteSQLite(idCol), joinQuoted(cols), quoteSQLite(table))
	if has["deleted_at"] {
		q += " WHERE deleted_at IS NULL"
	}
	q += " ORDER BY rowid"
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return malformed("table %s: %v", table, err)
	}
	defer rows.Close()
	idx := map[string]int{}
	for i, c := range cols {
		idx[c] = i + 1
	}
	dst := make([]any, len(cols)+1)
	for rows.Next() {
		vals := make([]any, len(cols)+1)
		for i := range dst {
			dst[i] = &vals[i]
		}
		if err := rows.Scan(dst...); err != nil {
			return malformed("table %s: %v", table, err)
		}
		r := &sqlRow{cols: idx, vals: vals}
		err := fn(r)
		if err == nil {
			err = r.err
		}
		if err != nil {
			return &rowError{table: table, id: fmt.Sprint(vals[0]), err: err}
		}
	}
	if err := rows.Err(); err != nil {
		return malformed("table %s: %v", table, err)
	}
	return nil
}

// rowError is a bad value in one row of a SQLite table.
type rowError struct {
	table, id string
	err       error
}

func (e *rowError) Error() string { return fmt.Sprintf("table %s, id %s: %v", e.table, e.id, e.err) }
func (e *rowError) Unwrap() error { return e.err }

func tableColumns(ctx context.Context, db *sql.DB, table string) (map[string]bool, error) {
	rows, err := db.QueryContext(ctx, fmt.Sprintf("SELECT name FROM pragma_table_info(%s)", quoteSQLiteString(table)))
	if err != nil {
		return nil, malformed("table %s: %v", table, err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, malformed("table %s: %v", table, err)
		}
		out[n] = true
	}
	return out, rows.Err()
}

func quoteSQLite(s string) string       { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
func quoteSQLiteString(s string) string { return `'` + strings.ReplaceAll(s, `'`, `''`) + `'` }
func joinQuoted(cols []string) string {
	q := make([]string, len(cols))
	for i, c := range cols {
		q[i] = quoteSQLite(c)
	}
	return strings.Join(q, ", ")
}
