package store

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// pgerrcode.UniqueViolation (SQLSTATE 23505, "unique_violation").
var pgerrcode = struct{ UniqueViolation string }{UniqueViolation: "23505"}

// A row type is a struct whose exported fields carry `db:"column"` tags naming columns
// of one table; nullable columns are pointers. Insert loads a batch with COPY into a
// temporary table and moves it into the table with ON CONFLICT DO NOTHING, so loading
// the same rows twice adds nothing: every table's natural key decides what "the same" is.

type rowShape struct {
	cols   []string
	fields []int
}

var shapes sync.Map // reflect.Type -> *rowShape

func shapeOf(t reflect.Type) *rowShape {
	if s, ok := shapes.Load(t); ok {
		return s.(*rowShape)
	}
	s := &rowShape{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("db")
		if tag == "" || tag == "-" || !f.IsExported() {
			continue
		}
		s.cols = append(s.cols, tag)
		s.fields = append(s.fields, i)
	}
	shapes.Store(t, s)
	return s
}

// Columns returns the column names of a row type, in field order.
func Columns[T any]() []string {
	var zero T
	return append([]string(nil), shapeOf(reflect.TypeOf(zero)).cols...)
}

// rowSource feeds COPY from a slice of structs without building [][]any first.
type rowSource[T any] struct {
	rows  []T
	shape *rowShape
	i     int
	vals  []any
}

func (r *rowSource[T]) Next() bool { r.i++; return r.i <= len(r.rows) }
func (r *rowSource[T]) Err() error { return nil }
func (r *rowSource[T]) Values() ([]any, error) {
	v := reflect.ValueOf(&r.rows[r.i-1]).Elem()
	for j, fi := range r.shape.fields {
		r.vals[j] = v.Field(fi).Interface()
	}
	return r.vals, nil
}

// Insert writes rows into table idempotently and returns how many were new.
func Insert[T any](ctx context.Context, s *Store, table string, rows []T) (int64, error) {
	if len(rows) == 0 {
		return 0, nil
	}
	tx, err := s.Pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("insert %s: %w", table, err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // no-op after Commit; on failure the first error is returned
	n, err := InsertTx(ctx, tx, table, rows)
	if err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("insert %s: commit: %w", table, err)
	}
	return n, nil
}

// InsertParallel is Insert split into `workers` batches loaded on as many connections at
// once (each its own transaction: a batch lands whole or not at all, and a re-run of any
// of them adds nothing). It returns how many rows were new.
func InsertParallel[T any](ctx context.Context, s *Store, table string, rows []T, workers int) (int64, error) {
	if workers < 2 || len(rows) < 2*workers {
		return Insert(ctx, s, table, rows)
	}
	var total atomic.Int64
	errs := make(chan error, workers)
	per := (len(rows) + workers - 1) / workers
	for w := 0; w < workers; w++ {
		part := rows[min(w*per, len(rows)):min((w+1)*per, len(rows))]
		go func() {
			n, err := Insert(ctx, s, table, part)
			total.Add(n)
			errs <- err
		}()
	}
	var first error
	for w := 0; w < workers; w++ {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return total.Load(), first
}

// InsertTx is Insert inside a caller's transaction (so parents and children of one batch
// land together or not at all).
func InsertTx[T any](ctx context.Context, tx pgx.Tx, table string, rows []T) (int64, error) {
	if len(rows) == 0 {
		return 0, nil
	}
	var zero T
	shape := shapeOf(reflect.TypeOf(zero))
	ident := pgx.Identifier{table}.Sanitize()

	// A role under row-level security (a vantage point's, on a central database) may
	// not COPY into the table at all: it takes the path through a temporary table.
	rls, err := rowSecurityActive(ctx, tx, table)
	if err != nil {
		return 0, fmt.Errorf("insert %s: %w", table, err)
	}
	if rls {
		return insertVia(ctx, tx, table, ident, shape, rows)
	}
	// Fast path: COPY straight into the table. A first run's rows are all new; if any
	// row's key exists already (a re-run), the COPY fails as a whole with a unique
	// violation, is rolled back to the savepoint, and the slow path below skips the
	// existing rows one by one.
	if _, err := tx.Exec(ctx, "SAVEPOINT doqscan_copy"); err != nil {
		return 0, fmt.Errorf("insert %s: %w", table, err)
	}
	n, err := tx.CopyFrom(ctx, pgx.Identifier{table}, shape.cols,
		&rowSource[T]{rows: rows, shape: shape, vals: make([]any, len(shape.cols))})
	if err == nil {
		if _, err := tx.Exec(ctx, "RELEASE SAVEPOINT doqscan_copy"); err != nil {
			return 0, fmt.Errorf("insert %s: %w", table, err)
		}
		return n, nil
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != pgerrcode.UniqueViolation {
		return 0, fmt.Errorf("insert %s: copy: %w", table, err)
	}
	if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT doqscan_copy"); err != nil {
		return 0, fmt.Errorf("insert %s: %w", table, err)
	}
	return insertVia(ctx, tx, table, ident, shape, rows)
}

// rlsActive caches whether row-level security applies to a (database, login role,
// table): it does not change while a process runs.
var rlsActive sync.Map // "host|port|database|user|table" -> bool

func rowSecurityActive(ctx context.Context, tx pgx.Tx, table string) (bool, error) {
	c := tx.Conn().Config()
	key := fmt.Sprintf("%s|%d|%s|%s|%s", c.Host, c.Port, c.Database, c.User, table)
	if v, ok := rlsActive.Load(key); ok {
		return v.(bool), nil
	}
	var on bool
	if err := tx.QueryRow(ctx, `SELECT coalesce(row_security_active(to_regclass($1)), false)`, table).Scan(&on); err != nil {
		return false, err
	}
	rlsActive.Store(key, on)
	return on, nil
}

// insertVia loads rows with COPY into a temporary table and moves them into the table
// with ON CONFLICT DO NOTHING, skipping rows whose key exists.
func insertVia[T any](ctx context.Context, tx pgx.Tx, table, ident string, shape *rowShape, rows []T) (int64, error) {
	tmp := "doqscan_load_" + table
	if _, err := tx.Exec(ctx, fmt.Sprintf(
		"CREATE TEMP TABLE IF NOT EXISTS %s (LIKE %s INCLUDING DEFAULTS) ON COMMIT DROP",
		pgx.Identifier{tmp}.Sanitize(), ident)); err != nil {
		return 0, fmt.Errorf("insert %s: %w", table, err)
	}
	src := &rowSource[T]{rows: rows, shape: shape, vals: make([]any, len(shape.cols))}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{tmp}, shape.cols, src); err != nil {
		return 0, fmt.Errorf("insert %s: copy: %w", table, err)
	}
	cols := quoteCols(shape.cols)
	tag, err := tx.Exec(ctx, fmt.Sprintf(
		"INSERT INTO %s (%s) SELECT %s FROM %s ON CONFLICT DO NOTHING; ",
		ident, cols, cols, pgx.Identifier{tmp}.Sanitize()))
	if err != nil {
		return 0, fmt.Errorf("insert %s: %w", table, err)
	}
	if _, err := tx.Exec(ctx, "TRUNCATE "+pgx.Identifier{tmp}.Sanitize()); err != nil {
		return 0, fmt.Errorf("insert %s: %w", table, err)
	}
	return tag.RowsAffected(), nil
}

// Select runs query and collects its rows into T by column name.
func Select[T any](ctx context.Context, s *Store, query string, args ...any) ([]T, error) {
	rows, err := s.Pool.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByNameLax[T])
}

// SelectTable reads every row of table into T (tests and small tables only).
func SelectTable[T any](ctx context.Context, s *Store, table, orderBy string) ([]T, error) {
	q := fmt.Sprintf("SELECT %s FROM %s", quoteCols(Columns[T]()), pgx.Identifier{table}.Sanitize())
	if orderBy != "" {
		q += " ORDER BY " + orderBy
	}
	return Select[T](ctx, s, q)
}

func quoteCols(cols []string) string {
	q := make([]string, len(cols))
	for i, c := range cols {
		q[i] = pgx.Identifier{c}.Sanitize()
	}
	return strings.Join(q, ", ")
}
