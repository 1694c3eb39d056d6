package store

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Migration 0012 partitions the high-volume tables by time and sets an existing
// database's tables aside as <table>_unpartitioned. moveUnpartitioned moves their rows
// into the partitioned tables: block range by block range (a TID range scan, so a batch
// never re-reads what earlier batches emptied), each batch one transaction that deletes
// the rows from the old table and inserts them, with their partition key taken from the
// parent row, into the new one. A kill loses at most the batch under way, which rolls
// back whole; the next Migrate starts again and finds only the rows not yet moved. A
// table is dropped once it is empty.

// moveSpec says how one set-aside table's rows find their partition key.
type moveSpec struct {
	table string // the partitioned table; the old one is table + "_unpartitioned"
	key   string // the partition key column
	join  string // parent table joined to the moved rows m as p
	on    string // join condition
	value string // the key's value
}

// moveOrder lists the set-aside tables parents first (a measurement's qlog must be in
// place before it; handshake_analyses move with their measurements, and last for any
// left over).
var moveOrder = []moveSpec{
	{"qlogs", "round_hour", "campaigns", "p.campaign_id = m.campaign_id", "p.round_hour"},
	{"measurements", "round_hour", "campaigns", "p.campaign_id = m.campaign_id", "p.round_hour"},
	{"rtt_samples", "round_hour", "campaigns", "p.campaign_id = m.campaign_id", "p.round_hour"},
	{"scan_replies", "iso_week", "scans", "p.scan_id = m.scan_id", "p.iso_week"},
	{"bench_samples", "started_at", "bench_runs", "p.bench_id = m.bench_id", "p.started_at"},
	{"handshake_analyses", "round_hour", "measurements", "p.measurement_id = m.measurement_id", "p.round_hour"},
}

// MoveBatchBlocks is how many 8 KiB heap blocks of an old table one batch moves
// (16 MiB: some 60,000 measurement rows).
var MoveBatchBlocks int64 = 2048

// afterMoveBatch, when set (tests), runs after each committed batch.
var afterMoveBatch func(table string, moved int64)

// moveUnpartitioned moves every set-aside table's rows (see above); nothing to do on a
// database that has none.
func (s *Store) moveUnpartitioned(ctx context.Context, conn *pgx.Conn) error {
	log := s.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	for _, sp := range moveOrder {
		old := sp.table + "_unpartitioned"
		var exists bool
		if err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, old).Scan(&exists); err != nil {
			return fmt.Errorf("move %s: %w", old, err)
		}
		if !exists {
			continue
		}
		if err := moveTable(ctx, conn, sp, log); err != nil {
			return fmt.Errorf("move %s into partitions (resumable: run dbctl migrate again): %w", old, err)
		}
	}
	return nil
}

func moveTable(ctx context.Context, conn *pgx.Conn, sp moveSpec, log *slog.Logger) error {
	old := sp.table + "_unpartitioned"
	var cols []string
	rows, err := conn.Query(ctx, `SELECT attname FROM pg_attribute
		WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped ORDER BY attnum`, old)
	if err != nil {
		return err
	}
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			rows.Close()
			return err
		}
		cols = append(cols, pgx.Identifier{c}.Sanitize())
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	var blocks, estRows int64
	if err := conn.QueryRow(ctx, `SELECT pg_relation_size(to_regclass($1)) / current_setting('block_size')::bigint,
		greatest(reltuples, 0)::bigint FROM pg_class WHERE oid = to_regclass($1)`, old).Scan(&blocks, &estRows); err != nil {
		return err
	}
	mcols := "m." + strings.Join(cols, ", m.")
	// LEFT JOIN: a row without its parent fails the NOT NULL of the key (and rolls the
	// batch back) instead of vanishing.
	moveSQL := fmt.Sprintf(`WITH moved AS (DELETE FROM %[1]s WHERE ctid >= $1::tid AND ctid < $2::tid RETURNING *),
		keyed AS (SELECT %[2]s, %[3]s AS %[4]s FROM moved m LEFT JOIN %[5]s p ON %[6]s),
		ins AS (INSERT INTO %[7]s (%[8]s, %[4]s) SELECT * FROM keyed ON CONFLICT DO NOTHING RETURNING 1)%[9]s
		SELECT (SELECT count(*) FROM moved), (SELECT count(*) FROM ins)`,
		pgx.Identifier{old}.Sanitize(), mcols, sp.value, pgx.Identifier{sp.key}.Sanitize(), pgx.Identifier{sp.join}.Sanitize(),
		sp.on, pgx.Identifier{sp.table}.Sanitize(), strings.Join(cols, ", "), withAnalyses(sp))
	var analysesSQL string
	if sp.table == "measurements" {
		var ok bool
		if err := conn.QueryRow(ctx, `SELECT to_regclass('handshake_analyses_unpartitioned') IS NOT NULL`).Scan(&ok); err != nil {
			return err
		}
		if ok {
			analysesSQL = `WITH a AS (DELETE FROM handshake_analyses_unpartitioned a USING doqscan_moved_ids d
				WHERE a.measurement_id = d.measurement_id RETURNING a.*, d.round_hour)
				INSERT INTO handshake_analyses SELECT * FROM a ON CONFLICT DO NOTHING`
		} else {
			moveSQL = strings.Replace(moveSQL, withAnalyses(sp), "", 1)
		}
	}
	log.Info("moving rows into partitions", "table", sp.table, "from", old, "rows_estimate", estRows, "blocks", blocks)
	start, lastLog := time.Now(), time.Now()
	var movedTotal, insertedTotal int64
	for from := int64(0); ; from += MoveBatchBlocks {
		if from >= blocks {
			// Rows written after the size was read (none are: the old table has no
			// writer) or a table grown meanwhile: look again before dropping it.
			var left bool
			if err := conn.QueryRow(ctx, fmt.Sprintf(`SELECT EXISTS (SELECT 1 FROM %s)`, pgx.Identifier{old}.Sanitize())).Scan(&left); err != nil {
				return err
			}
			if !left {
				break
			}
			if err := conn.QueryRow(ctx, `SELECT pg_relation_size(to_regclass($1)) / current_setting('block_size')::bigint`, old).Scan(&blocks); err != nil {
				return err
			}
			from = 0
		}
		var moved, inserted int64
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SET LOCAL statement_timeout = 0"); err != nil {
				return err
			}
			if analysesSQL != "" {
				if _, err := tx.Exec(ctx, `CREATE TEMP TABLE IF NOT EXISTS doqscan_moved_ids
					(measurement_id uuid, round_hour timestamptz) ON COMMIT DELETE ROWS`); err != nil {
					return err
				}
			}
			if err := tx.QueryRow(ctx, moveSQL, fmt.Sprintf("(%d,0)", from), fmt.Sprintf("(%d,0)", from+MoveBatchBlocks)).
				Scan(&moved, &inserted); err != nil {
				return err
			}
			if analysesSQL != "" {
				if _, err := tx.Exec(ctx, analysesSQL); err != nil {
					return fmt.Errorf("handshake_analyses of the moved measurements: %w", err)
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		movedTotal += moved
		insertedTotal += inserted
		if afterMoveBatch != nil {
			afterMoveBatch(sp.table, moved)
		}
		if time.Since(lastLog) >= 5*time.Second {
			lastLog = time.Now()
			done := min(from+MoveBatchBlocks, blocks)
			el := time.Since(start)
			eta := time.Duration(0)
			if done > 0 {
				eta = time.Duration(float64(el) * float64(blocks-done) / float64(done)).Round(time.Second)
			}
			log.Info("moving rows into partitions", "table", sp.table, "blocks_done", done, "blocks", blocks,
				"rows_moved", movedTotal, "rows_per_s", int64(float64(movedTotal)/el.Seconds()), "eta", eta)
		}
	}
	if _, err := conn.Exec(ctx, "DROP TABLE "+pgx.Identifier{old}.Sanitize()); err != nil {
		return err
	}
	log.Info("moved rows into partitions", "table", sp.table, "rows", movedTotal, "new", insertedTotal,
		"elapsed", time.Since(start).Round(time.Millisecond))
	return nil
}

// withAnalyses records the ids and hours of moved measurements, whose handshake
// analyses move in the same transaction.
func withAnalyses(sp moveSpec) string {
	if sp.table != "measurements" {
		return ""
	}
	return `, ids AS (INSERT INTO doqscan_moved_ids SELECT measurement_id, round_hour FROM keyed)`
}
