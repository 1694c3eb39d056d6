package store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/doqscan/doqscan/internal/store"
	"github.com/doqscan/doqscan/internal/store/storetest"
)

var partitionedTables = []string{"measurements", "qlogs", "rtt_samples", "handshake_analyses", "scan_replies", "bench_samples"}

func TestHighVolumeTablesArePartitioned(t *testing.T) {
	s := storetest.Open(t)
	ctx := context.Background()
	for _, tb := range partitionedTables {
		var kind string
		if err := s.Pool.QueryRow(ctx, `SELECT relkind::text FROM pg_class WHERE oid = to_regclass($1)`, tb).Scan(&kind); err != nil {
			t.Fatal(err)
		}
		if kind != "p" {
			t.Errorf("%s: relkind %q, want a partitioned table (p)", tb, kind)
		}
	}
	f := newFixture(t, s)
	insertAll(t, s, f)
	// Every row is in its month's (week's) partition, named after it.
	want := map[string]string{
		"measurements": "measurements_p2026_11", "qlogs": "qlogs_p2026_11", "rtt_samples": "rtt_samples_p2026_11",
		"handshake_analyses": "handshake_analyses_p2026_11", "scan_replies": "scan_replies_p2026_w47",
	}
	for tb, part := range want {
		var got []string
		rows, err := s.Pool.Query(ctx, fmt.Sprintf(`SELECT DISTINCT tableoid::regclass::text FROM %s`, tb))
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var p string
			if err := rows.Scan(&p); err != nil {
				t.Fatal(err)
			}
			got = append(got, p)
		}
		rows.Close()
		if len(got) != 1 || got[0] != part {
			t.Errorf("%s: rows are in %v, want %s", tb, got, part)
		}
	}
}

// The partitions of the coming months exist before any row of theirs is written.
func TestPartitionsAheadOfTime(t *testing.T) {
	s := storetest.Open(t)
	ctx := context.Background()
	var now time.Time
	if err := s.Pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	next := time.Date(now.UTC().Year(), now.UTC().Month()+1, 1, 0, 0, 0, 0, time.UTC)
	year, week := now.UTC().AddDate(0, 0, 7).ISOWeek()
	for _, name := range []string{
		fmt.Sprintf("measurements_p%04d_%02d", next.Year(), next.Month()),
		fmt.Sprintf("bench_samples_p%04d_%02d", next.Year(), next.Month()),
		fmt.Sprintf("scan_replies_p%04d_w%02d", year, week),
	} {
		var ok bool
		if err := s.Pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		if !ok {
			t.Errorf("partition %s does not exist", name)
		}
	}
}

// A row whose partition key disagrees with its parent's is refused like an orphan: the
// keys stay unique only because the parent decides the key.
func TestPartitionKeyMustBeTheParents(t *testing.T) {
	s := storetest.Open(t)
	ctx := context.Background()
	f := newFixture(t, s)
	insertAll(t, s, f)
	m := f.measurements[0]
	m.RoundHour = m.RoundHour.Add(time.Hour) // same month, other hour
	m.QlogID = nil
	_, err := store.Insert(ctx, s, store.TableMeasurements, []store.Measurement{m})
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23503" {
		t.Fatalf("measurement with another hour than its campaign's: err %v, want a foreign_key_violation", err)
	}
	a := f.analyses[0]
	a.RoundHour = a.RoundHour.Add(time.Hour)
	if _, err := store.Insert(ctx, s, store.TableHandshakeAnalyses, []store.HandshakeAnalysis{a}); !errors.As(err, &pgErr) || pgErr.Code != "23503" {
		t.Fatalf("analysis with another hour than its measurement's: err %v, want a foreign_key_violation", err)
	}
	r := f.replies[0]
	r.ISOWeek = "2026-W48"
	if _, err := store.Insert(ctx, s, store.TableScanReplies, []store.ScanReply{r}); err == nil {
		t.Fatal("scan reply with another week than its scan's was accepted")
	}
}

// legacyRows fills a database at schema version 11 (unpartitioned tables) with rows of
// every partitioned table, over two months and two weeks.
const legacyRows = `
INSERT INTO vantage_points (vantage_id) VALUES ('vp');
INSERT INTO campaigns (vantage_id, round_hour) VALUES ('vp', '2026-10-31 23:00+00'), ('vp', '2026-11-01 00:00+00');
INSERT INTO qlogs (qlog_id, campaign_id, address, port, encoding, raw_size, data)
  SELECT md5('q' || c.campaign_id || '-' || i)::uuid, c.campaign_id, '198.19.0.1'::inet + i, 784, 'gzip', 10, '\x00'
    FROM campaigns c, generate_series(1, 400) i;
INSERT INTO measurements (measurement_id, campaign_id, address, protocol, port, phase, started_at, status, resolve_ns, qlog_id)
  SELECT md5('m' || c.campaign_id || '-' || i)::uuid, c.campaign_id, '198.19.0.1'::inet + i, 'doq', 784, 'measured',
         c.round_hour, 'ok', i * 1000, CASE WHEN i % 2 = 0 THEN md5('q' || c.campaign_id || '-' || i)::uuid END
    FROM campaigns c, generate_series(1, 400) i;
INSERT INTO handshake_analyses (measurement_id, cause, rtt_ns) SELECT measurement_id, '1rtt', resolve_ns FROM measurements;
INSERT INTO rtt_samples (campaign_id, address, transport, port, seq, sent_at, status)
  SELECT c.campaign_id, '198.19.0.1'::inet + i, 'quic', 784, 0, now(), 'ok' FROM campaigns c, generate_series(1, 400) i;
INSERT INTO scans (iso_week, vantage_id, ports) VALUES ('2026-W44', 'vp', '{784}'), ('2026-W45', 'vp', '{784}');
INSERT INTO scan_replies (scan_id, port, address, reply_kind, received_at)
  SELECT s.scan_id, 784, '198.19.0.1'::inet + i, 'quic-vn', now() FROM scans s, generate_series(1, 400) i;
INSERT INTO bench_runs (run_key, started_at, protocol, address, port, policy, load, workers, elapsed_s, sent, answered,
    qps, success_rate, report)
  VALUES ('k', '2026-11-02 10:00+00', 'doq', '198.19.0.1', 784, 'fresh', 'max', 1, 1, 1, 1, 1, 1, '{}');
INSERT INTO bench_samples (bench_id, second, sent, answered, failed) SELECT bench_id, s, 1, 1, 0 FROM bench_runs, generate_series(0, 99) s;
`

// contentOf fingerprints a table's rows without its partition key (order-independent).
func contentOf(t *testing.T, pool *pgxpool.Pool, table string) (n int64, sum string) {
	t.Helper()
	var cols string
	if err := pool.QueryRow(context.Background(), `SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum)
		FROM pg_attribute WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped
		  AND attname NOT IN ('round_hour', 'iso_week') AND NOT (attname = 'started_at' AND $1 = 'bench_samples')`,
		table).Scan(&cols); err != nil {
		t.Fatal(err)
	}
	q := fmt.Sprintf(`SELECT count(*), coalesce(md5(string_agg(r, ',' ORDER BY r)), '')
		FROM (SELECT ROW(%s)::text AS r FROM %s) x`, cols, table)
	if err := pool.QueryRow(context.Background(), q).Scan(&n, &sum); err != nil {
		t.Fatal(err)
	}
	return n, sum
}

// An existing database's rows move into the partitions in batches; a move stopped
// between batches loses and duplicates nothing, and the next Migrate finishes it.
func TestMoveIntoPartitionsResumes(t *testing.T) {
	ctx := context.Background()
	url := storetest.NewDatabase(t)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	old := &store.Store{Pool: pool}
	if err := store.MigrateTo(ctx, old, 11); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, legacyRows); err != nil {
		t.Fatal(err)
	}
	type fp struct {
		n   int64
		sum string
	}
	before := map[string]fp{}
	for _, tb := range partitionedTables {
		n, sum := contentOf(t, pool, tb)
		if n == 0 {
			t.Fatalf("%s: no legacy rows", tb)
		}
		before[tb] = fp{n, sum}
	}

	saved := store.MoveBatchBlocks
	store.MoveBatchBlocks = 2
	t.Cleanup(func() { store.MoveBatchBlocks = saved; store.SetAfterMoveBatch(nil) })
	stopCtx, stop := context.WithCancel(ctx)
	batches := 0
	store.SetAfterMoveBatch(func(table string, moved int64) {
		batches++
		if table == "measurements" && batches >= 3 {
			stop()
		}
	})
	if err := old.Migrate(stopCtx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Migrate with its context cancelled mid-move: %v, want the cancellation", err)
	}
	// Stopped mid-way: part of measurements moved, the rest still set aside, no row in
	// both or in neither.
	for _, tb := range []string{"measurements", "handshake_analyses"} {
		var inOld, inNew int64
		if err := pool.QueryRow(ctx, fmt.Sprintf(`SELECT (SELECT count(*) FROM %s_unpartitioned), (SELECT count(*) FROM %s)`, tb, tb)).
			Scan(&inOld, &inNew); err != nil {
			t.Fatal(err)
		}
		if inOld == 0 || inNew == 0 || inOld+inNew != before[tb].n {
			t.Fatalf("%s after a stopped move: %d set aside + %d moved, want both > 0 and %d in all", tb, inOld, inNew, before[tb].n)
		}
	}

	store.SetAfterMoveBatch(nil)
	s, err := store.Open(ctx, url)
	if err != nil {
		t.Fatalf("resume the move: %v", err)
	}
	defer s.Close()
	for _, tb := range partitionedTables {
		var left bool
		if err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, tb+"_unpartitioned").Scan(&left); err != nil {
			t.Fatal(err)
		}
		if left {
			t.Errorf("%s_unpartitioned still exists", tb)
		}
		if n, sum := contentOf(t, pool, tb); n != before[tb].n || sum != before[tb].sum {
			t.Errorf("%s: %d rows (checksum %s) after the move, want %d (%s)", tb, n, sum, before[tb].n, before[tb].sum)
		}
	}
	// The keys are the parents'.
	var wrong int64
	if err := pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM measurements m JOIN campaigns c USING (campaign_id) WHERE m.round_hour <> c.round_hour) +
		(SELECT count(*) FROM scan_replies r JOIN scans s USING (scan_id) WHERE r.iso_week <> s.iso_week) +
		(SELECT count(*) FROM handshake_analyses a JOIN measurements m USING (measurement_id) WHERE a.round_hour <> m.round_hour)`).
		Scan(&wrong); err != nil {
		t.Fatal(err)
	}
	if wrong != 0 {
		t.Fatalf("%d moved rows carry another partition key than their parent's", wrong)
	}
	var parts int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_inherits WHERE inhparent = 'measurements'::regclass
		AND inhrelid::regclass::text IN ('measurements_p2026_10', 'measurements_p2026_11')`).Scan(&parts); err != nil {
		t.Fatal(err)
	}
	if parts != 2 {
		t.Fatalf("measurements of October and November: %d partitions, want 2", parts)
	}
}

// Every migration re-applied over a database that has them all (analysis/tests'
// conftest applies the files without recording them, and a tool then applies them again)
// changes nothing.
func TestMigrationsReappliedChangeNothing(t *testing.T) {
	s := storetest.Open(t)
	ctx := context.Background()
	f := newFixture(t, s)
	insertAll(t, s, f)
	before := tableSnapshot(t, s)
	if _, err := s.Pool.Exec(ctx, `DELETE FROM schema_migrations WHERE version > 1`); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("re-apply: %v", err)
	}
	if after := tableSnapshot(t, s); after != before {
		t.Fatalf("schema changed when the migrations were applied again:\n%s", lineDiff(before, after))
	}
}

// lineDiff lists the lines only in a (-) and only in b (+).
func lineDiff(a, b string) string {
	in := func(s string) map[string]int {
		m := map[string]int{}
		for _, l := range strings.Split(s, "\n") {
			m[l]++
		}
		return m
	}
	ma, mb := in(a), in(b)
	var out []string
	for l, n := range ma {
		if mb[l] != n {
			out = append(out, fmt.Sprintf("- %s (%d vs %d)", l, n, mb[l]))
		}
	}
	for l, n := range mb {
		if ma[l] != n {
			out = append(out, fmt.Sprintf("+ %s (%d vs %d)", l, n, ma[l]))
		}
	}
	slices.Sort(out)
	return strings.Join(out, "\n")
}

// A database upgraded by a binary that knows one more migration keeps what the earlier
// migrations made of schema.sql's functions: the parent check of the partitioned tables
// (schema.sql, applied again on every upgrade, put its own version back, and the next
// handshake analysis was refused: column n.campaign_id does not exist).
func TestUpgradeKeepsThePartitionedParentChecks(t *testing.T) {
	s := storetest.Open(t)
	ctx := context.Background()
	// As if the newest migration were new to this database.
	if _, err := s.Pool.Exec(ctx, `DELETE FROM schema_migrations WHERE version = $1`, store.SchemaVersion()); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, s)
	insertAll(t, s, f) // handshake_analyses among them
}
