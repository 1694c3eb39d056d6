// Package store is doqscan's PostgreSQL store: the schema and its migrations, idempotent
// bulk writes with COPY, and typed rows for every table of schema.sql.
package store

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/doqscan/doqscan"
)

//go:embed migrations
var migrationsFS embed.FS

// schemaLockID is the advisory lock taken while the schema is applied, so several tools
// starting at once apply it one after another.
const schemaLockID = 0x646f717363616e // "doqscan"

// ErrSchemaNewer says the database was migrated by a newer doqscan than this binary.
var ErrSchemaNewer = errors.New("database schema is newer than this binary")

// ErrUnavailable wraps failures to reach or authenticate to the database.
var ErrUnavailable = errors.New("database unavailable")

// Store is a connection pool to doqscan's database.
type Store struct {
	Pool *pgxpool.Pool
	// Log receives progress of long schema work (moving rows into partitions); nil: none.
	Log *slog.Logger
}

// migration is one versioned schema change.
type migration struct {
	version int
	name    string
	sql     string
}

var migrationName = regexp.MustCompile(`^([0-9]{4})_([a-z0-9_]+)\.sql$`)

// migrations returns schema.sql (version 1) followed by the embedded migration files.
func migrations() ([]migration, error) {
	out := []migration{{version: 1, name: "baseline schema.sql", sql: doqscan.SchemaSQL}}
	entries, err := fs.ReadDir(migrationsFS, "migrations")
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		m := migrationName.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		v, _ := strconv.Atoi(m[1])
		body, err := fs.ReadFile(migrationsFS, "migrations/"+e.Name())
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: v, name: m[2], sql: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	// Versions increase but may leave gaps: branches developed side by side take numbers
	// apart, and Migrate applies every version a database has not recorded, whatever
	// newer ones it has.
	for i := 1; i < len(out); i++ {
		if out[i].version == out[i-1].version {
			return nil, fmt.Errorf("migrations: version %d twice (%s, %s)", out[i].version, out[i-1].name, out[i].name)
		}
	}
	return out, nil
}

// SchemaVersion is the newest schema version this binary knows.
func SchemaVersion() int {
	m, err := migrations()
	if err != nil {
		panic(err) // embedded files; covered by tests
	}
	return m[len(m)-1].version
}

// Connection defaults, applied when neither the URL nor the libpq environment
// (PGCONNECT_TIMEOUT, PGOPTIONS) sets them: a server that accepts the connection and
// never answers fails the connect after DefaultConnectTimeout instead of hanging, and no
// statement runs longer than DefaultStatementTimeout (migrations lift it).
const (
	DefaultConnectTimeout   = 10 * time.Second
	DefaultStatementTimeout = 5 * time.Minute
)

// waitingLogAfter is how long a connect may take before Open says it is waiting.
const waitingLogAfter = time.Second

// Open connects to url (a libpq URL or DSN), checks that the server answers and applies
// the schema. Errors wrap ErrUnavailable or ErrSchemaNewer where that is the cause.
func Open(ctx context.Context, url string) (*Store, error) {
	return OpenLogged(ctx, url, nil)
}

// OpenLogged is Open that logs to log while it waits for the server ("waiting for
// database", once the connect has taken a second).
func OpenLogged(ctx context.Context, url string, log *slog.Logger) (*Store, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg, err := ParseConfig(url)
	if err != nil {
		return nil, err
	}
	if cfg.MaxConns < 8 {
		cfg.MaxConns = 8
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	cc := cfg.ConnConfig
	pinged, logged := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(logged)
		t := time.NewTimer(waitingLogAfter)
		defer t.Stop()
		select {
		case <-t.C:
			log.Warn("waiting for database", "host", cc.Host, "port", cc.Port, "database", cc.Database,
				"connect_timeout", cc.ConnectTimeout)
		case <-pinged:
		}
	}()
	err = pool.Ping(ctx)
	close(pinged)
	<-logged
	if err != nil {
		pool.Close()
		msg := oneLine(err)
		if errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) {
			msg = fmt.Sprintf("no answer from %s within the connect timeout (%v): %s", cc.Host, cc.ConnectTimeout, msg)
		}
		return nil, fmt.Errorf("%w: %s", ErrUnavailable, msg)
	}
	s := &Store{Pool: pool, Log: log}
	if err := s.Migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

// ParseConfig parses url and applies the connection defaults (DefaultConnectTimeout,
// DefaultStatementTimeout) where the URL and the environment leave them unset.
func ParseConfig(url string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("%w: bad DATABASE_URL: %s", ErrUnavailable, redactParseError(err))
	}
	cc := cfg.ConnConfig
	if cc.ConnectTimeout <= 0 {
		cc.ConnectTimeout = DefaultConnectTimeout
	}
	if cc.RuntimeParams == nil {
		cc.RuntimeParams = map[string]string{}
	}
	if _, ok := cc.RuntimeParams["statement_timeout"]; !ok && !strings.Contains(cc.RuntimeParams["options"], "statement_timeout") {
		cc.RuntimeParams["statement_timeout"] = strconv.FormatInt(DefaultStatementTimeout.Milliseconds(), 10)
	}
	return cfg, nil
}

// Close releases the pool.
func (s *Store) Close() { s.Pool.Close() }

// Migrate applies schema.sql and every newer migration, under an advisory lock, moves
// the rows of tables a migration set aside into their partitioned successors
// (MoveUnpartitioned), and creates the partitions of the coming months and weeks.
// Applying it again changes nothing. A database whose newest version is above
// SchemaVersion() is refused with ErrSchemaNewer before anything is written; one at
// SchemaVersion() is not written to at all (a role that may not alter the schema, such
// as a vantage point's on a central database, opens it too).
func (s *Store) Migrate(ctx context.Context) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	conn, err := s.Pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("%w: %s", ErrUnavailable, oneLine(err))
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", schemaLockID); err != nil {
		return fmt.Errorf("schema lock: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", schemaLockID) //nolint:errcheck // closing the connection releases the lock anyway

	current, err := currentVersion(ctx, conn.Conn())
	if err != nil {
		return err
	}
	applied, err := appliedVersions(ctx, conn.Conn())
	if err != nil {
		return err
	}
	known := ms[len(ms)-1].version
	if current > known {
		return fmt.Errorf("%w: database is at version %d, this binary knows up to %d; upgrade doqscan",
			ErrSchemaNewer, current, known)
	}
	if err := applyMigrations(ctx, conn.Conn(), ms, applied, known); err != nil {
		return err
	}
	if err := s.moveUnpartitioned(ctx, conn.Conn()); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "SELECT doqscan_ensure_ahead()"); err != nil {
		return fmt.Errorf("partitions ahead of time: %w", err)
	}
	return nil
}

// applyMigrations applies every migration up to version upTo that schema_migrations
// does not record (applied), in version order, each in its own transaction: schema.sql
// on an empty database, then the numbered migrations, gaps in the numbering allowed (a
// migration numbered below one already applied, merged later, still runs). schema.sql
// is version 1 and is not applied again to a database that has it: later migrations
// redefine some of its functions (the parent checks of the partitioned tables), which it
// would put back.
func applyMigrations(ctx context.Context, conn *pgx.Conn, ms []migration, applied map[int]bool, upTo int) error {
	for _, m := range ms {
		if applied[m.version] || m.version > upTo {
			continue
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			return err
		}
		// A migration may rewrite a large table: no statement timeout for it.
		if _, err := tx.Exec(ctx, "SET LOCAL statement_timeout = 0"); err != nil {
			tx.Rollback(ctx) //nolint:errcheck // the error being returned says why
			return err
		}
		if _, err := tx.Exec(ctx, m.sql); err != nil {
			tx.Rollback(ctx) //nolint:errcheck // the error being returned says why
			return fmt.Errorf("apply schema version %d (%s): %w", m.version, m.name, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)
			ON CONFLICT (version) DO NOTHING`, m.version, m.name); err != nil {
			tx.Rollback(ctx) //nolint:errcheck // the error being returned says why
			return err
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
	}
	return nil
}

// currentVersion returns the newest applied version, 0 on an empty database.
func currentVersion(ctx context.Context, conn *pgx.Conn) (int, error) {
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('schema_migrations') IS NOT NULL`).Scan(&exists); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	if !exists {
		return 0, nil
	}
	var v int
	if err := conn.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return v, nil
}

// appliedVersions returns every version schema_migrations records (none on an empty
// database).
func appliedVersions(ctx context.Context, conn *pgx.Conn) (map[int]bool, error) {
	out := map[int]bool{}
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('schema_migrations') IS NOT NULL`).Scan(&exists); err != nil || !exists {
		return out, err
	}
	rows, err := conn.Query(ctx, `SELECT version FROM schema_migrations`)
	if err != nil {
		return nil, fmt.Errorf("read schema versions: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out[v] = true
	}
	return out, rows.Err()
}

// Version reports the database's newest applied schema version.
func (s *Store) Version(ctx context.Context) (int, error) {
	conn, err := s.Pool.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Release()
	return currentVersion(ctx, conn.Conn())
}

// oneLine turns a connection error into one readable line.
func oneLine(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Message
	}
	return strings.Join(strings.Fields(err.Error()), " ")
}

// redactParseError describes a parse failure without repeating the URL, which may carry
// a password.
func redactParseError(err error) string {
	var pe *pgconn.ParseConfigError
	if errors.As(err, &pe) && pe.Unwrap() != nil && !strings.Contains(pe.Unwrap().Error(), pe.ConnString) {
		inner := pe.Unwrap().Error()
		if !strings.ContainsAny(inner, "\"`'=@") && !strings.Contains(inner, "://") {
			return "cannot parse it (" + inner + "); want postgres://user@host/db or key=value pairs"
		}
	}
	return "cannot parse it; want postgres://user@host/db or key=value pairs"
}
