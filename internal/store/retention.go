package store

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Retention of the time partitions (dbctl retention; docs/fleet.md). A partition whose
// month (or ISO week) ended more than the configured age ago is
//
//  1. detached from its table (state "detached": no tool reads or writes it any more,
//     and doqscan_attach_partition refuses to create it again, so a late row for it is
//     refused rather than stored in a new, partial partition),
//  2. exported with pg_dump (custom format, one file per partition: "exported"),
//  3. verified: the file is read back with pg_restore and its rows' checksum compared
//     with the detached table's ("verified"),
//  4. and only then dropped ("dropped").
//
// Every step is recorded in partition_archive before the next starts, so a run that was
// killed or failed resumes where it stopped; a partition whose copy does not verify is
// never dropped. qlogs may instead be thinned to a sample after a shorter age: the whole
// partition is exported and verified first, then the qlogs outside the sample deleted
// ("sampled"; measurements keep their qlog_id, which the export resolves).

// Partition is one time partition of a partitioned table, attached or archived.
type Partition struct {
	Parent    string
	Name      string
	Bounds    string
	End       time.Time // the end of its month or week (UTC)
	State     string    // attached | detached | exported | verified | dropped | sampled
	Rows      int64     // estimated (attached) or counted at detach
	Bytes     int64     // on disk now (attached or detached), or at detach (dropped)
	Export    string
	ExportLen int64
	Detail    string
}

var partitionName = regexp.MustCompile(`^([a-z_]+)_p([0-9]{4})_(w?)([0-9]{2})$`)

// partitionEnd is the end of a partition's month or ISO week, from its name.
func partitionEnd(name string) (time.Time, bool) {
	m := partitionName.FindStringSubmatch(name)
	if m == nil {
		return time.Time{}, false
	}
	y, _ := strconv.Atoi(m[2])
	n, _ := strconv.Atoi(m[4])
	if m[3] == "" {
		return time.Date(y, time.Month(n)+1, 1, 0, 0, 0, 0, time.UTC), true
	}
	// Monday of ISO week n: the week holding January 4th is week 1.
	jan4 := time.Date(y, 1, 4, 0, 0, 0, 0, time.UTC)
	monday := jan4.AddDate(0, 0, -((int(jan4.Weekday()) + 6) % 7))
	return monday.AddDate(0, 0, 7*n), true
}

// Partitions lists every partition of the partitioned tables (attached, and those
// retention detached or dropped), oldest first per table.
func (s *Store) Partitions(ctx context.Context) ([]Partition, error) {
	rows, err := s.Pool.Query(ctx, `
		SELECT p.relname::text, c.relname::text, pg_get_expr(c.relpartbound, c.oid),
		       coalesce(a.state, 'attached'), greatest(c.reltuples, 0)::bigint, pg_total_relation_size(c.oid),
		       coalesce(a.export_path, ''), coalesce(a.export_bytes, 0), coalesce(a.detail, '')
		  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent
		  LEFT JOIN partition_archive a ON a.partition = c.relname
		 WHERE p.relname IN ('measurements', 'qlogs', 'rtt_samples', 'handshake_analyses', 'scan_replies', 'bench_samples')
		UNION ALL
		SELECT a.parent, a.partition, a.bounds, a.state, coalesce(a.rows, 0),
		       coalesce(pg_total_relation_size(to_regclass(a.partition)), a.bytes, 0),
		       a.export_path, coalesce(a.export_bytes, 0), a.detail
		  FROM partition_archive a
		 WHERE NOT EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = to_regclass(a.partition))
		ORDER BY 1, 2`)
	if err != nil {
		return nil, fmt.Errorf("list partitions: %w", err)
	}
	defer rows.Close()
	var out []Partition
	for rows.Next() {
		var p Partition
		if err := rows.Scan(&p.Parent, &p.Name, &p.Bounds, &p.State, &p.Rows, &p.Bytes, &p.Export, &p.ExportLen, &p.Detail); err != nil {
			return nil, err
		}
		p.End, _ = partitionEnd(p.Name)
		out = append(out, p)
	}
	return out, rows.Err()
}

// RetentionPolicy says what dbctl retention does.
type RetentionPolicy struct {
	// Keep is how long after its month (week) ended a partition stays in the database.
	Keep time.Duration
	// QlogSampleAfter, if > 0 and below Keep, thins qlogs partitions that ended longer
	// ago than it to QlogSample (a fraction, 0..1) of their qlogs, chosen by qlog_id.
	QlogSampleAfter time.Duration
	QlogSample      float64
	// ArchiveDir receives the pg_dump files.
	ArchiveDir string
	// DumpURL is the libpq connection string pg_dump and pg_restore use; BinDir holds
	// them ("": $PATH).
	DumpURL string
	BinDir  string
	// DryRun lists what would be done and changes nothing.
	DryRun bool
	// Now is the time ages are counted from (zero: the database's now()).
	Now time.Time
}

// ErrExportMismatch says an exported partition's copy did not read back as its rows:
// the partition is kept.
var ErrExportMismatch = errors.New("exported copy does not match the partition")

// Retain applies p to every partition and reports what it did, one line per partition
// touched. It stops at the first failure, leaving that partition in the state its last
// completed step recorded.
func (s *Store) Retain(ctx context.Context, p RetentionPolicy, log *slog.Logger, report func(string)) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if p.Keep <= 0 {
		return errors.New("retention: the age to keep must be positive")
	}
	now := p.Now
	if now.IsZero() {
		if err := s.Pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
			return err
		}
	}
	parts, err := s.Partitions(ctx)
	if err != nil {
		return err
	}
	for _, part := range parts {
		if part.End.IsZero() || part.State == "dropped" {
			continue
		}
		age := now.Sub(part.End)
		switch {
		case age > p.Keep:
			if p.DryRun {
				report(fmt.Sprintf("would archive and drop %s (%s, ended %s)", part.Name, part.State, part.End.Format(time.DateOnly)))
				continue
			}
			if err := s.retire(ctx, p, part, log); err != nil {
				return fmt.Errorf("retention of %s: %w", part.Name, err)
			}
			report(fmt.Sprintf("archived %s to %s and dropped it", part.Name, s.exportPath(p, part.Name)))
		case part.Parent == "qlogs" && p.QlogSampleAfter > 0 && age > p.QlogSampleAfter && part.State == "attached":
			if p.DryRun {
				report(fmt.Sprintf("would archive %s and keep %.2f%% of its qlogs", part.Name, 100*p.QlogSample))
				continue
			}
			n, err := s.sampleQlogs(ctx, p, part, log)
			if err != nil {
				return fmt.Errorf("qlog sampling of %s: %w", part.Name, err)
			}
			report(fmt.Sprintf("archived %s, deleted %d qlogs outside the %.2f%% sample", part.Name, n, 100*p.QlogSample))
		}
	}
	return nil
}

func (s *Store) exportPath(p RetentionPolicy, name string) string {
	return filepath.Join(p.ArchiveDir, name+".dump")
}

func (s *Store) setState(ctx context.Context, part Partition, state string, set map[string]any) error {
	cols, vals := []string{"state", "updated_at"}, []any{state, time.Now()}
	for k, v := range set {
		cols = append(cols, k)
		vals = append(vals, v)
	}
	assign := make([]string, len(cols))
	ph := make([]string, len(cols))
	for i, c := range cols {
		assign[i] = c + " = EXCLUDED." + c
		ph[i] = "$" + strconv.Itoa(i+4)
	}
	q := fmt.Sprintf(`INSERT INTO partition_archive (partition, parent, bounds, %s) VALUES ($1, $2, $3, %s)
		ON CONFLICT (partition) DO UPDATE SET %s`, strings.Join(cols, ", "), strings.Join(ph, ", "), strings.Join(assign, ", "))
	_, err := s.Pool.Exec(ctx, q, append([]any{part.Name, part.Parent, part.Bounds}, vals...)...)
	return err
}

// retire takes one partition through detach, export, verify and drop, from the state it
// is in.
func (s *Store) retire(ctx context.Context, p RetentionPolicy, part Partition, log *slog.Logger) error {
	ident := pgx.Identifier{part.Name}.Sanitize()
	if part.State == "attached" {
		if _, err := s.Pool.Exec(ctx, fmt.Sprintf("ALTER TABLE %s DETACH PARTITION %s",
			pgx.Identifier{part.Parent}.Sanitize(), ident)); err != nil {
			return fmt.Errorf("detach: %w", err)
		}
		var rows, bytes int64
		if err := s.Pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*), pg_total_relation_size('%s'::regclass) FROM %s`,
			part.Name, ident)).Scan(&rows, &bytes); err != nil {
			return err
		}
		if err := s.setState(ctx, part, "detached", map[string]any{"rows": rows, "bytes": bytes}); err != nil {
			return err
		}
		log.Info("partition detached", "partition", part.Name, "rows", rows, "bytes", bytes)
		part.State = "detached"
	}
	path := s.exportPath(p, part.Name)
	if part.State == "detached" || part.State == "exported" {
		if err := s.exportVerified(ctx, p, part, path, log); err != nil {
			return err
		}
		part.State = "verified"
	}
	if part.State == "verified" {
		if _, err := s.Pool.Exec(ctx, "DROP TABLE IF EXISTS "+ident); err != nil {
			return fmt.Errorf("drop: %w", err)
		}
		if err := s.setState(ctx, part, "dropped", nil); err != nil {
			return err
		}
		log.Info("partition dropped", "partition", part.Name, "archive", path)
	}
	return nil
}

// exportVerified dumps the partition to path and checks the file against the table.
func (s *Store) exportVerified(ctx context.Context, p RetentionPolicy, part Partition, path string, log *slog.Logger) error {
	if err := os.MkdirAll(p.ArchiveDir, 0o750); err != nil {
		return err
	}
	var schema string
	if err := s.Pool.QueryRow(ctx, `SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.oid = to_regclass($1)`, part.Name).Scan(&schema); err != nil {
		return err
	}
	tmp := path + ".part"
	cmd := exec.CommandContext(ctx, binPath(p.BinDir, "pg_dump"), "--format=custom", "--no-owner",
		"--table="+pgx.Identifier{schema, part.Name}.Sanitize(), "--file="+tmp, "--dbname="+p.DumpURL)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pg_dump: %v: %s", err, strings.TrimSpace(string(out)))
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if err := s.setState(ctx, part, "exported", map[string]any{"export_path": path, "export_bytes": st.Size()}); err != nil {
		return err
	}
	dbSum, dbRows, err := s.tableChecksum(ctx, part.Name)
	if err != nil {
		return err
	}
	fileSum, fileRows, err := dumpChecksum(ctx, p.BinDir, path)
	if err != nil {
		return err
	}
	if dbSum != fileSum || dbRows != fileRows {
		_ = s.setState(ctx, part, "exported", map[string]any{"detail": fmt.Sprintf("verify failed: table %d rows %s, file %d rows %s",
			dbRows, dbSum, fileRows, fileSum)})
		return fmt.Errorf("%w: %s: table %d rows, file %d rows", ErrExportMismatch, path, dbRows, fileRows)
	}
	log.Info("partition exported and verified", "partition", part.Name, "rows", dbRows, "file", path, "bytes", st.Size())
	return s.setState(ctx, part, "verified", map[string]any{"checksum": dbSum, "detail": ""})
}

// lineSum is an order-independent checksum of COPY text lines: their count and the sum
// (mod 2^64) of the first 8 bytes of each line's SHA-256.
type lineSum struct {
	n   int64
	sum uint64
}

func (l *lineSum) add(line []byte) {
	h := sha256.Sum256(line)
	l.sum += binary.BigEndian.Uint64(h[:8])
	l.n++
}

func (l lineSum) String() string { return fmt.Sprintf("%016x", l.sum) }

// tableChecksum reads a table with COPY TO (the text format pg_dump writes).
func (s *Store) tableChecksum(ctx context.Context, table string) (string, int64, error) {
	conn, err := s.Pool.Acquire(ctx)
	if err != nil {
		return "", 0, err
	}
	defer conn.Release()
	pr, pw := io.Pipe()
	var sum lineSum
	done := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<30)
		for sc.Scan() {
			sum.add(sc.Bytes())
		}
		_ = pr.CloseWithError(sc.Err())
		done <- sc.Err()
	}()
	_, err = conn.Conn().PgConn().CopyTo(ctx, pw, "COPY "+pgx.Identifier{table}.Sanitize()+" TO STDOUT")
	pw.CloseWithError(err)
	if serr := <-done; err == nil {
		err = serr
	}
	return sum.String(), sum.n, err
}

// dumpChecksum reads a custom-format dump of one table back with pg_restore and sums its
// COPY data lines as tableChecksum does.
func dumpChecksum(ctx context.Context, binDir, path string) (string, int64, error) {
	cmd := exec.CommandContext(ctx, binPath(binDir, "pg_restore"), "--data-only", "--file=-", path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", 0, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return "", 0, err
	}
	var sum lineSum
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	in := false
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case !in && strings.HasPrefix(string(line), "COPY ") && strings.HasSuffix(string(line), "FROM stdin;"):
			in = true
		case in && string(line) == `\.`:
			in = false
		case in:
			sum.add(line)
		}
	}
	serr := sc.Err()
	if err := cmd.Wait(); err != nil {
		return "", 0, fmt.Errorf("pg_restore %s: %v: %s", path, err, strings.TrimSpace(stderr.String()))
	}
	return sum.String(), sum.n, serr
}

// sampleQlogs archives a qlogs partition whole, verifies the copy, then deletes the
// qlogs outside the sample (a fixed share by qlog_id, so every run keeps the same ones).
func (s *Store) sampleQlogs(ctx context.Context, p RetentionPolicy, part Partition, log *slog.Logger) (int64, error) {
	path := s.exportPath(p, part.Name)
	if err := s.exportVerified(ctx, p, part, path, log); err != nil {
		return 0, err
	}
	keep := int64(p.QlogSample * 10000)
	tag, err := s.Pool.Exec(ctx, fmt.Sprintf(`DELETE FROM %s WHERE ('x' || substr(md5(qlog_id::text), 1, 8))::bit(32)::bigint %% 10000 >= $1`,
		pgx.Identifier{part.Name}.Sanitize()), keep)
	if err != nil {
		return 0, err
	}
	if err := s.setState(ctx, part, "sampled", map[string]any{"detail": fmt.Sprintf("kept %.2f%% of qlogs; all in %s", 100*p.QlogSample, path)}); err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

func binPath(dir, name string) string {
	if dir == "" {
		return name
	}
	return filepath.Join(dir, name)
}
