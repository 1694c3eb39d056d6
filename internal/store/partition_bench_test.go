package store_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/doqscan/doqscan/internal/store"
	"github.com/doqscan/doqscan/internal/store/storetest"
	"github.com/doqscan/doqscan/internal/testsupport"
)

// BenchmarkPartitionedAtScale (run with -benchtime 1x) prints what the time partitions cost and save with many
// measurement rows already stored (DOQSCAN_BENCH_STORED, default 1,000,000; docs/fleet.md
// gives the figures and sizes): the same database holds the partitioned measurements
// table and measurements_flat, today's unpartitioned shape of it (primary key
// measurement_id alone, the same columns, indexes and statement-level parent check),
// each filled with the same rows: hourly campaigns of 1,200 resolvers x 16 rows (the
// study's fresh-mode round) over up to twelve months, generated without indexes and
// indexed afterwards. Then, alternating between the tables:
//
//   - COPY (store.InsertParallel, 2 connections) of a new campaign's rows, one hour after
//     the last stored campaign, into each: rows/s and the ratio partitioned/unpartitioned
//     (goal >= 0.95);
//   - the report's per-campaign query (measurement_facts' fill: a campaign's successful
//     measurements grouped by protocol, phase, mode, key share, family) on 20 stored
//     campaigns, median time, with and without the campaign's round_hour.
//
// With DOQSCAN_BENCH_SEQUENTIAL=1 one table is filled, measured and dropped before the
// other is filled: about 30 GB at the peak for 10^8 rows instead of 50, but the two
// tables' figures then come from different minutes of the machine: run it idle.
// The database is dropped when the benchmark ends.
func BenchmarkPartitionedAtScale(b *testing.B) {
	stored := int64(1_000_000)
	if v := os.Getenv("DOQSCAN_BENCH_STORED"); v != "" {
		n, err := strconv.ParseFloat(v, 64)
		if err != nil || n < 19_200 {
			b.Fatalf("DOQSCAN_BENCH_STORED=%q: want a row count >= 19200", v)
		}
		stored = int64(n)
	}
	sequential := os.Getenv("DOQSCAN_BENCH_SEQUENTIAL") == "1"
	rounds := 3 // COPYs into each table per benchmark iteration
	if v := os.Getenv("DOQSCAN_BENCH_ROUNDS"); v != "" {
		var err error
		if rounds, err = strconv.Atoi(v); err != nil || rounds < 1 {
			b.Fatalf("DOQSCAN_BENCH_ROUNDS=%q: want a positive count", v)
		}
	}
	const perRound = 1200 * 16
	copyRows := 12_500 * 16 // one COPY: a campaign of 12,500 resolvers
	ctx := context.Background()
	url := storetest.NewDatabase(b)
	if strings.Contains(url, "://") {
		url += map[bool]string{true: "&", false: "?"}[strings.Contains(url, "?")] + "statement_timeout=0"
	} else {
		url += " statement_timeout=0"
	}
	s, err := store.Open(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if err := s.EnsureVantage(ctx, store.Vantage{ID: "bench"}); err != nil {
		b.Fatal(err)
	}
	exec := func(q string, args ...any) {
		b.Helper()
		if _, err := s.Pool.Exec(ctx, q, args...); err != nil {
			b.Fatalf("%s: %v", q[:min(len(q), 60)], err)
		}
	}
	createFlat := func() {
		exec(`CREATE TABLE measurements_flat (LIKE measurements INCLUDING DEFAULTS INCLUDING CONSTRAINTS)`)
		exec(`ALTER TABLE measurements_flat ADD PRIMARY KEY (measurement_id)`)
		exec(`CREATE INDEX ON measurements_flat (campaign_id, protocol, phase)`)
		exec(`CREATE TRIGGER measurements_flat_parent AFTER INSERT ON measurements_flat
			REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION doqscan_check_parent()`)
	}

	// Campaigns one every `step` hours from 2025-12-01 over up to twelve months.
	campaigns := max(stored/perRound, 1)
	step := max(int64(365*24)/campaigns, 1)
	start := time.Date(2025, 12, 1, 0, 0, 0, 0, time.UTC)
	exec(`INSERT INTO campaigns (vantage_id, label, round_hour, status)
		SELECT 'bench', 'stored', $1::timestamptz + make_interval(hours => (g * $2)::int), 'ok'
		  FROM generate_series(0, $3 - 1) g`, start, step, campaigns)
	var sample []int64
	rows, err := s.Pool.Query(ctx, `SELECT campaign_id FROM campaigns WHERE label = 'stored' ORDER BY md5(campaign_id::text) LIMIT 20`)
	if err != nil {
		b.Fatal(err)
	}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			b.Fatal(err)
		}
		sample = append(sample, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}

	fill := func(table string) { fillStored(ctx, b, s, table, campaigns*perRound) }
	size := func(table string) {
		var bytes int64
		if err := s.Pool.QueryRow(ctx, `SELECT coalesce((SELECT sum(pg_total_relation_size(relid)) FROM pg_partition_tree($1)), pg_total_relation_size($1))::int8`, table).Scan(&bytes); err != nil {
			b.Fatal(err)
		}
		fmt.Printf("size: %s %.2f GB, %.0f bytes/row with indexes\n", table, float64(bytes)/1e9, float64(bytes)/float64(campaigns*perRound))
	}

	// perCampaign times the report's per-campaign query on each sample campaign, on the
	// variants in turn (so that other load on the machine falls on all alike), the best
	// of three runs each; medians over the campaigns.
	type variant struct {
		name, table string
		prune       bool // name the campaign's round_hour: PostgreSQL reads only its partition
	}
	perCampaign := func(variants []variant) map[string]time.Duration {
		ds := map[string][]time.Duration{}
		for _, id := range sample {
			var hour time.Time
			if err := s.Pool.QueryRow(ctx, `SELECT round_hour FROM campaigns WHERE campaign_id = $1`, id).Scan(&hour); err != nil {
				b.Fatal(err)
			}
			for _, v := range variants {
				cond, args := "", []any{[]int64{id}}
				if v.prune {
					cond, args = " AND m.round_hour = ANY($2::timestamptz[])", append(args, []time.Time{hour})
				}
				q := fmt.Sprintf(`SELECT m.campaign_id, m.protocol, m.phase, m.mode, m.key_share,
					family(m.address), count(*), string_agg(float8send(coalesce(m.resolve_ns::float8, 'NaN')), ''::bytea)
					FROM %s m WHERE m.campaign_id = ANY($1::bigint[]) AND m.status = 'ok' AND m.rcode IS NOT NULL%s
					GROUP BY 1, 2, 3, 4, 5, 6`, v.table, cond)
				best := time.Duration(1 << 62)
				for range 3 {
					t := time.Now()
					if _, err := s.Pool.Exec(ctx, q, args...); err != nil {
						b.Fatal(err)
					}
					best = min(best, time.Since(t))
				}
				ds[v.name] = append(ds[v.name], best)
			}
		}
		out := map[string]time.Duration{}
		for k, v := range ds {
			slices.Sort(v)
			out[k] = v[len(v)/2]
		}
		return out
	}
	variants := map[string][]variant{
		"measurements":      {{"partitioned", "measurements", false}, {"partitioned, with round_hour", "measurements", true}},
		"measurements_flat": {{"unpartitioned", "measurements_flat", false}},
	}

	// The COPYs go into the hours after the last stored campaign: into the month being
	// written, as a running fleet's do.
	hour := start.Add(time.Duration(campaigns*step) * time.Hour)
	rates := map[string][]float64{}
	queries := map[string]time.Duration{}
	measure := func(tables []string) {
		for i := 0; i < b.N*rounds; i++ {
			for _, table := range tables {
				hour = hour.Add(time.Hour)
				cid, _, err := s.StartCampaign(ctx, store.Campaign{VantageID: "bench", Label: "copy", RoundHour: hour})
				if err != nil {
					b.Fatal(err)
				}
				batch := make([]store.Measurement, copyRows)
				for j := range batch {
					k := store.MeasurementKey{CampaignID: cid, Address: netip.AddrFrom4([4]byte{10, 1, byte(j / 16 >> 8), byte(j / 16)}),
						Protocol: []string{"doudp", "dotcp", "dot", "doh", "doq", "doh3"}[j%6], Port: 853, Mode: "fresh",
						Phase: []string{"warmup", "measured"}[(j/6)%2], Seq: int16(j % 16)}
					batch[j] = store.Measurement{MeasurementID: k.ID(), CampaignID: cid, Address: k.Address, Protocol: k.Protocol,
						Port: 853, Mode: "fresh", Phase: k.Phase, Seq: k.Seq, StartedAt: hour, HandshakeNS: ptr(int64(j)),
						ResolveNS: ptr(int64(j)), Status: "ok", Rcode: ptr(int16(0)), Answers: []string{"192.0.2.1"},
						TLSVersion: ptr(int32(0x0304)), ALPN: ptr("doq"), RoundHour: hour}
				}
				b.StartTimer()
				t := time.Now()
				n, err := store.InsertParallel(ctx, s, table, batch, 2)
				el := time.Since(t)
				b.StopTimer()
				if err != nil || n != int64(copyRows) {
					b.Fatalf("COPY into %s: %d of %d rows, %v", table, n, copyRows, err)
				}
				rates[table] = append(rates[table], float64(n)/el.Seconds())
				fmt.Printf("COPY of %d rows into %s: %.0f rows/s (load average %s)\n", n, table, float64(n)/el.Seconds(), testsupport.LoadAverage())
			}
		}
		var vs []variant
		for _, table := range tables {
			vs = append(vs, variants[table]...)
		}
		for k, v := range perCampaign(vs) {
			queries[k] = v
		}
	}

	b.ResetTimer()
	b.StopTimer()
	if sequential {
		createFlat()
		fill("measurements_flat")
		size("measurements_flat")
		measure([]string{"measurements_flat"})
		exec(`DROP TABLE measurements_flat`)
		exec(`CHECKPOINT`)
		fill("measurements")
		size("measurements")
		measure([]string{"measurements"})
	} else {
		createFlat()
		fill("measurements")
		fill("measurements_flat")
		size("measurements")
		size("measurements_flat")
		measure([]string{"measurements", "measurements_flat"})
	}
	med := func(xs []float64) float64 { ys := slices.Clone(xs); slices.Sort(ys); return ys[len(ys)/2] }
	p, f := med(rates["measurements"]), med(rates["measurements_flat"])
	how := "alternating"
	if sequential {
		how = "one table after the other"
	}
	fmt.Printf("stored %d rows: COPY of %d rows: partitioned %.0f rows/s, unpartitioned %.0f rows/s, ratio %.3f (goal >= 0.95; medians of %d, %s)\n",
		campaigns*perRound, copyRows, p, f, p/f, len(rates["measurements"]), how)
	fmt.Printf("stored %d rows: per-campaign query (median of %d campaigns, best of 3 each): partitioned %v (with round_hour: %v), unpartitioned %v\n",
		campaigns*perRound, len(sample), queries["partitioned"].Round(10*time.Microsecond),
		queries["partitioned, with round_hour"].Round(10*time.Microsecond), queries["unpartitioned"].Round(10*time.Microsecond))
	b.ReportMetric(p/f, "copy_ratio")
	b.ReportMetric(p, "partitioned_rows/s")
	b.ReportMetric(float64(queries["partitioned, with round_hour"].Microseconds()), "pruned_query_us")
}

// fillStored fills table (measurements or its unpartitioned copy) with the stored
// campaigns' rows (label 'stored'), `want` rows in all: the primary key and indexes are
// dropped first and built again afterwards (sorted builds: hours faster than a random-UUID
// index grown row by row at 10^8, and as dense as a freshly reindexed table), and the
// rows go in by chunks of campaigns over two connections, with progress. The statement-
// level parent check is skipped during the fill (session_replication_role = replica:
// the campaigns exist by construction); a role that may not set it runs the check.
func fillStored(ctx context.Context, b *testing.B, s *store.Store, table string, want int64) {
	b.Helper()
	exec := func(q string, args ...any) {
		b.Helper()
		if _, err := s.Pool.Exec(ctx, q, args...); err != nil {
			b.Fatalf("%s: %v", q[:min(len(q), 60)], err)
		}
	}
	var pk, pkDef string
	if err := s.Pool.QueryRow(ctx, `SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint
		WHERE conrelid = $1::regclass AND contype = 'p'`, table).Scan(&pk, &pkDef); err != nil {
		b.Fatalf("%s: primary key: %v", table, err)
	}
	var indexes []string
	rows, err := s.Pool.Query(ctx, `SELECT indexname, indexdef FROM pg_indexes
		WHERE schemaname = current_schema() AND tablename = $1 AND indexname <> $2 ORDER BY 1`, table, pk)
	if err != nil {
		b.Fatal(err)
	}
	var drop []string
	for rows.Next() {
		var name, def string
		if err := rows.Scan(&name, &def); err != nil {
			b.Fatal(err)
		}
		drop, indexes = append(drop, name), append(indexes, def)
	}
	rows.Close()
	exec(fmt.Sprintf(`ALTER TABLE %s DROP CONSTRAINT %s`, table, pk))
	for _, name := range drop {
		exec(`DROP INDEX ` + name)
	}

	var ids []int64
	if err := s.Pool.QueryRow(ctx, `SELECT array_agg(campaign_id ORDER BY campaign_id) FROM campaigns WHERE label = 'stored'`).Scan(&ids); err != nil {
		b.Fatal(err)
	}
	gen := `INSERT INTO ` + table + ` (measurement_id, campaign_id, address, protocol, port, variant, mode, key_share, phase,
		    started_at, handshake_ns, resolve_ns, status, rcode, answers, tls_version, quic_version, alpn, round_hour)
		SELECT md5(c.campaign_id || '|' || r || '|' || p.n)::uuid, c.campaign_id, '10.0.0.0'::inet + r, p.proto,
		       p.port, p.variant, 'fresh', CASE WHEN p.tls THEN 'x25519' ELSE '' END, p.phase,
		       c.round_hour + make_interval(secs => r % 3000), CASE WHEN p.proto <> 'doudp' THEN 40000000 + r END,
		       20000000 + (r * 7919) % 10000000, 'ok', 0, ARRAY['192.0.2.1'], CASE WHEN p.tls THEN 772 END,
		       CASE WHEN p.proto IN ('doq', 'doh3') THEN 1 END, CASE WHEN p.proto = 'doq' THEN 'doq' END, c.round_hour
		  FROM campaigns c CROSS JOIN generate_series(0, 1199) r CROSS JOIN (VALUES
		       (0, 'doudp', 53, '', false, 'warmup'), (1, 'doudp', 53, '', false, 'measured'),
		       (2, 'dotcp', 53, '', false, 'warmup'), (3, 'dotcp', 53, '', false, 'measured'),
		       (4, 'dot', 853, '', true, 'warmup'), (5, 'dot', 853, '', true, 'measured'),
		       (6, 'doh', 443, 'GET', true, 'warmup'), (7, 'doh', 443, 'GET', true, 'measured'),
		       (8, 'doh', 443, 'POST', true, 'warmup'), (9, 'doh', 443, 'POST', true, 'measured'),
		       (10, 'doq', 853, '', true, 'warmup'), (11, 'doq', 853, '', true, 'measured'),
		       (12, 'doh3', 443, 'GET', true, 'warmup'), (13, 'doh3', 443, 'GET', true, 'measured'),
		       (14, 'doh3', 443, 'POST', true, 'warmup'), (15, 'doh3', 443, 'POST', true, 'measured'))
		       AS p(n, proto, port, variant, tls, phase)
		 WHERE c.campaign_id = ANY($1::bigint[])`
	const chunk = 64 // campaigns per statement: 1.2 M rows
	var done atomic.Int64
	t0 := time.Now()
	work := make(chan []int64)
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			conn, err := s.Pool.Acquire(ctx)
			if err != nil {
				errs <- err
				return
			}
			defer conn.Release()
			if _, err := conn.Exec(ctx, `SET session_replication_role = replica`); err != nil {
				fmt.Printf("fill of %s runs the parent check: %v\n", table, err)
			}
			defer conn.Exec(ctx, `RESET session_replication_role`) // the pool's connection goes back as it came
			var first error
			for part := range work {
				if first != nil {
					continue
				}
				tag, err := conn.Exec(ctx, gen, part)
				if err != nil {
					first = err
					continue
				}
				done.Add(tag.RowsAffected())
			}
			errs <- first
		}()
	}
	last := time.Now()
	for i := 0; i < len(ids); i += chunk {
		work <- ids[i:min(i+chunk, len(ids))]
		if time.Since(last) > 30*time.Second {
			last = time.Now()
			n, el := done.Load(), time.Since(t0)
			fmt.Printf("filling %s: %d of %d rows, %.0f rows/s, ETA %v\n", table, n, want, float64(n)/el.Seconds(),
				time.Duration(float64(want-n)/(float64(n)+1)*float64(el)).Round(time.Second))
		}
	}
	close(work)
	for range 2 {
		if err := <-errs; err != nil {
			b.Fatalf("fill %s: %v", table, err)
		}
	}
	if n := done.Load(); n != want {
		b.Fatalf("fill %s: %d rows, want %d", table, n, want)
	}
	fmt.Printf("filled %s: %d rows in %v\n", table, want, time.Since(t0).Round(time.Second))
	t1 := time.Now()
	conn, err := s.Pool.Acquire(ctx) // one session: its maintenance_work_mem
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Release()
	for _, q := range append([]string{`SET maintenance_work_mem = '2GB'`,
		fmt.Sprintf(`ALTER TABLE %s ADD CONSTRAINT %s %s`, table, pk, pkDef)}, indexes...) {
		// a partitioned parent's definition reads "ON ONLY": built here for every partition
		if _, err := conn.Exec(ctx, strings.Replace(q, " ON ONLY ", " ON ", 1)); err != nil {
			b.Fatalf("%s: %v", q, err)
		}
	}
	if _, err := conn.Exec(ctx, `RESET maintenance_work_mem`); err != nil {
		b.Fatal(err)
	}
	exec(`VACUUM ANALYZE ` + table)
	exec(`CHECKPOINT`)
	fmt.Printf("indexed %s (%s and %d more) and vacuumed in %v\n", table, pk, len(indexes), time.Since(t1).Round(time.Second))
}

// BenchmarkMoveIntoPartitions (-benchtime 1x) prints how fast Migrate moves an existing
// database's measurements (DOQSCAN_BENCH_STORED rows, default 1,000,000, with one RTT
// sample each) from the unpartitioned tables of schema version 11 into the partitions.
func BenchmarkMoveIntoPartitions(b *testing.B) {
	n := int64(1_000_000)
	if v := os.Getenv("DOQSCAN_BENCH_STORED"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 1200 {
			b.Fatalf("DOQSCAN_BENCH_STORED=%q", v)
		}
		n = int64(f)
	}
	ctx := context.Background()
	url := storetest.NewDatabase(b)
	if strings.Contains(url, "://") {
		url += map[bool]string{true: "&", false: "?"}[strings.Contains(url, "?")] + "statement_timeout=0"
	} else {
		url += " statement_timeout=0"
	}
	cfg, err := store.ParseConfig(url)
	if err != nil {
		b.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	old := &store.Store{Pool: pool}
	if err := store.MigrateTo(ctx, old, 11); err != nil {
		b.Fatal(err)
	}
	campaigns := max(n/(1200*16), 1)
	for _, q := range []string{
		`INSERT INTO vantage_points (vantage_id) VALUES ('bench')`,
		fmt.Sprintf(`INSERT INTO campaigns (vantage_id, round_hour) SELECT 'bench', '2026-01-01 00:00+00'::timestamptz + make_interval(hours => g * 7)
			FROM generate_series(0, %d - 1) g`, campaigns),
		`INSERT INTO measurements (measurement_id, campaign_id, address, protocol, port, phase, seq, started_at, status, resolve_ns)
			SELECT md5(c.campaign_id || '|' || r || '|' || p)::uuid, c.campaign_id, '10.0.0.0'::inet + r, 'doq', 853,
			       CASE WHEN p % 2 = 0 THEN 'warmup' ELSE 'measured' END, p / 2, c.round_hour, 'ok', 20000000 + r
			  FROM campaigns c, generate_series(0, 1199) r, generate_series(0, 15) p`,
		`INSERT INTO rtt_samples (campaign_id, address, transport, port, seq, sent_at, rtt_ns, status)
			SELECT c.campaign_id, '10.0.0.0'::inet + r, 'quic', 853, p, c.round_hour, 20000000, 'ok'
			  FROM campaigns c, generate_series(0, 1199) r, generate_series(0, 15) p`,
		`VACUUM ANALYZE measurements`, `VACUUM ANALYZE rtt_samples`, `CHECKPOINT`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			b.Fatalf("%.60s: %v", q, err)
		}
	}
	var rows int64
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM measurements) + (SELECT count(*) FROM rtt_samples)`).Scan(&rows); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	t0 := time.Now()
	if err := old.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	el := time.Since(t0)
	b.StopTimer()
	fmt.Printf("moved %d rows (%d measurements, as many RTT samples) into the partitions in %v: %.0f rows/s\n",
		rows, rows/2, el.Round(time.Second), float64(rows)/el.Seconds())
}
