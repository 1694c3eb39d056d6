// Package storetest gives tests a fresh, empty doqscan database on a real PostgreSQL
// server: $DOQSCAN_TEST_DATABASE_URL's server if set, else the project's private cluster
// (started if needed). Each call creates its own database and drops it when the test ends.
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/doqscan/doqscan/internal/store"
	"github.com/doqscan/doqscan/internal/store/pgcluster"
)

// ServerURL returns the URL of a database on the test server (the admin connection).
func ServerURL(t testing.TB) string {
	t.Helper()
	if u := os.Getenv("DOQSCAN_TEST_DATABASE_URL"); u != "" {
		return u
	}
	c, err := pgcluster.Default()
	if err != nil {
		t.Fatalf("no PostgreSQL for tests: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	u, _, err := c.Ensure(ctx)
	if err != nil {
		t.Fatalf("start the private PostgreSQL cluster: %v", err)
	}
	return u
}

// NewDatabase creates an empty database and returns its URL; it is dropped at cleanup.
func NewDatabase(t testing.TB) string {
	t.Helper()
	ctx := context.Background()
	admin := ServerURL(t)
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("connect to test server: %v", err)
	}
	defer conn.Close(ctx)
	b := make([]byte, 6)
	rand.Read(b)
	name := "doqscan_test_" + hex.EncodeToString(b)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create test database: %v", err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), admin)
		if err != nil {
			return
		}
		defer c.Close(context.Background())
		c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)") //nolint:errcheck // cleanup of a throwaway database
	})
	return WithDatabase(admin, name)
}

// UseDatabase creates an empty database (NewDatabase), points $DATABASE_URL at it for the
// rest of the test, as a command run by the test reads it, and returns its URL.
func UseDatabase(t testing.TB) string {
	t.Helper()
	url := NewDatabase(t)
	t.Setenv("DATABASE_URL", url)
	return url
}

// WithDatabase returns url pointing at database name (URL or keyword/value form).
func WithDatabase(u, name string) string {
	if strings.HasPrefix(u, "postgres://") || strings.HasPrefix(u, "postgresql://") {
		if pu, err := url.Parse(u); err == nil {
			pu.Path = "/" + name
			return pu.String()
		}
	}
	return u + " dbname=" + name
}

// Open returns a Store on a fresh database with the schema applied.
func Open(t testing.TB) *store.Store {
	t.Helper()
	s, _ := OpenURL(t)
	return s
}

// OpenURL is Open, and returns the database's URL too (for a command the test runs, or a
// connection of its own). The Store is closed when the test ends; closing it before is
// fine.
func OpenURL(t testing.TB) (*store.Store, string) {
	t.Helper()
	url := NewDatabase(t)
	s, err := store.Open(context.Background(), url)
	if err != nil {
		t.Fatalf("open test store: %v", err)
	}
	t.Cleanup(s.Close)
	return s, url
}

// OpenVantage returns a Store as Open does, with the vantage point id recorded.
func OpenVantage(t testing.TB, id string) *store.Store {
	t.Helper()
	s := Open(t)
	if err := s.EnsureVantage(context.Background(), store.Vantage{ID: id}); err != nil {
		t.Fatalf("record vantage %s: %v", id, err)
	}
	return s
}

// NewCluster starts a PostgreSQL server of the test's own (initdb in a temporary
// directory, run as the unprivileged postgres account when root, Unix socket only) for
// tests that stop and restart the server, and returns it with the URL of its doqscan
// database. It is stopped and removed at cleanup. Restart it with Ensure.
func NewCluster(t testing.TB) (*pgcluster.Cluster, string) {
	t.Helper()
	def, err := pgcluster.Default()
	if err != nil {
		t.Skipf("SKIP: no PostgreSQL server binaries for a cluster of the test's own: %v", err)
	}
	// Not t.TempDir(): its 0700 parents keep the postgres account out, and a Unix
	// socket path must stay under 108 bytes.
	dir, err := os.MkdirTemp("", "doqscan-pg-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	c := &pgcluster.Cluster{Dir: dir, BinDir: def.BinDir, OSUser: def.OSUser}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			t.Errorf("stop the test's PostgreSQL cluster: %v", err)
		}
		os.RemoveAll(dir)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	u, _, err := c.Ensure(ctx)
	if err != nil {
		t.Fatalf("start a PostgreSQL cluster of the test's own: %v", err)
	}
	return c, u
}

// QueryMap runs query, whose rows are (key, value) pairs, and returns them as a map; a
// failing query fails the test.
func QueryMap[K comparable, V any](t testing.TB, s *store.Store, query string, args ...any) map[K]V {
	t.Helper()
	rows, err := s.Pool.Query(context.Background(), query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[K]V{}
	for rows.Next() {
		var k K
		var v V
		if err := rows.Scan(&k, &v); err != nil {
			t.Fatal(err)
		}
		out[k] = v
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// WithUser returns url logging in as user (URL or keyword/value form).
func WithUser(u, user string) string {
	if strings.HasPrefix(u, "postgres://") || strings.HasPrefix(u, "postgresql://") {
		if pu, err := url.Parse(u); err == nil {
			pu.User = url.User(user)
			return pu.String()
		}
	}
	return u + " user=" + user
}

// VantageRole creates the role of vantage point id on the test server (store's
// AddVantageRole on s, the test database's admin store) with a name of the test's own
// (roles are server-wide), and returns the URL of the test database logging in as it.
// The role is dropped at cleanup. With the private cluster, whose Unix socket trusts
// every role, no certificate is needed.
func VantageRole(t testing.TB, s *store.Store, dbURL, id string) string {
	t.Helper()
	ctx := context.Background()
	role, err := s.AddVantageRole(ctx, id)
	if err != nil {
		t.Fatalf("vantage role: %v", err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), dbURL)
		if err != nil {
			return
		}
		defer c.Close(context.Background())
		ident := pgx.Identifier{role}.Sanitize()
		c.Exec(context.Background(), "DROP OWNED BY "+ident) //nolint:errcheck // cleanup of a throwaway role
		c.Exec(context.Background(), "DROP ROLE "+ident)     //nolint:errcheck // cleanup of a throwaway role
	})
	return WithUser(dbURL, role)
}

// NewerSchema returns the URL of a fresh database whose schema was migrated by a binary
// newer than this one (schema_migrations holds SchemaVersion()+1): a command that opens
// it stops with exit code 4.
func NewerSchema(t testing.TB) string {
	t.Helper()
	s, url := OpenURL(t)
	if _, err := s.Pool.Exec(context.Background(), "INSERT INTO schema_migrations (version, name) VALUES ($1, 'from a newer binary')",
		store.SchemaVersion()+1); err != nil {
		t.Fatal(err)
	}
	s.Close()
	return url
}
