// Package release writes doqscan's data set as an open-data release: Parquet files,
// one file set per ISO week and vantage point (scans and replies, verification runs and
// results, certificates, resolvers and their locations, campaigns, measurements, RTT
// samples, handshake analyses, resolver features; benchmark runs in a set of their own),
// the week's qlogs in one archive per set, and manifest.json with every file's row count,
// size and SHA-256. The schema is versioned (manifest.SchemaVersion) and documented in
// docs/data-release.md.
//
// An export is resumable and idempotent: each file set is written to temporary files and
// renamed, and the manifest is rewritten after every set; a set whose fingerprint (the
// status and end of every run in it, the honoured opt-outs, the schema version) is
// unchanged and whose files are all there is skipped, and one written again is the same
// bytes. Addresses and ranges whose opt-out has been honoured (optout_requests status
// 'accepted' when the export runs) are left out of every table and archive.
package release

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/home"
	"github.com/doqscan/doqscan/internal/release/manifest"
	"github.com/doqscan/doqscan/internal/store"
)

// Config says what to export where.
type Config struct {
	Dir      string   // the release directory (created)
	Weeks    []string // ISO weeks to write; empty: every week with data
	Vantages []string // vantage points to write; empty: all (benchmark runs are written with all)
	Force    bool     // rewrite file sets whose fingerprint is unchanged
	Log      *slog.Logger
	Now      func() time.Time
}

// DefaultDir is where a release is written when no directory is given: release/ of the
// doqscan home, beside reports/.
func DefaultDir() string { return manifest.DefaultDir(home.Dir()) }

// Summary is what an export did.
type Summary struct {
	Dir      string           `json:"dir"`
	Written  int              `json:"file_sets_written"`
	Skipped  int              `json:"file_sets_skipped"`
	Rows     map[string]int64 `json:"rows_written"` // per table, in the sets written
	Bytes    int64            `json:"bytes_written"`
	Seconds  float64          `json:"seconds"`
	OptOuts  int              `json:"optouts_excluded"`
	Manifest string           `json:"manifest"`
}

// ErrBadWeek: a --week that is not an ISO week.
var ErrBadWeek = errors.New("not an ISO week (want YYYY-Www)")

type set struct{ week, vantage string }

// Run writes the release of st's data into cfg.Dir.
func Run(ctx context.Context, st *store.Store, cfg Config) (*Summary, error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	for _, w := range cfg.Weeks {
		if !isoWeek(w) {
			return nil, fmt.Errorf("%w: %q", ErrBadWeek, w)
		}
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	start := time.Now()
	optouts, err := honouredOptOuts(ctx, st)
	if err != nil {
		return nil, err
	}
	m, err := manifest.Read(cfg.Dir)
	if errors.Is(err, manifest.ErrNoRelease) {
		m, err = &manifest.Manifest{}, nil
	}
	if err != nil {
		return nil, err
	}
	m.SchemaVersion = manifest.SchemaVersion
	m.Docs = "docs/data-release.md"
	sum := &Summary{Dir: cfg.Dir, Rows: map[string]int64{}, OptOuts: len(optouts), Manifest: filepath.Join(cfg.Dir, manifest.Name)}
	var counter atomic.Int64
	stop := progress(cfg.Log, &counter, start)
	defer stop()

	// Release-wide tables first: small, rewritten every time.
	m.Files = m.Files[:0]
	for _, t := range globalTables {
		f, err := writeTable(ctx, st.Pool, filepath.Join(cfg.Dir, t.name+".parquet"), t.name, []query{{sql: t.sql}}, &counter)
		if err != nil {
			return sum, err
		}
		f.Path = t.name + ".parquet"
		m.Files = append(m.Files, f)
	}
	sets, err := fileSets(ctx, st, cfg)
	if err != nil {
		return sum, err
	}
	cfg.Log.Info("exporting", "dir", cfg.Dir, "file_sets", len(sets), "optouts_excluded", len(optouts))
	for i, s := range sets {
		fp, err := fingerprint(ctx, st, s, optouts)
		if err != nil {
			return sum, err
		}
		if old := m.Set(s.week, s.vantage); !cfg.Force && fp != "" && old != nil && old.Fingerprint == fp && present(cfg.Dir, old.Files) {
			sum.Skipped++
			cfg.Log.Info("file set unchanged, skipped", "week", s.week, "vantage", s.vantage, "n", i+1, "of", len(sets))
			continue
		}
		t0 := time.Now()
		fs, err := writeSet(ctx, st, cfg.Dir, s, optouts, &counter)
		if err != nil {
			return sum, fmt.Errorf("week %s vantage %s: %w", s.week, s.vantage, err)
		}
		fs.Fingerprint, fs.WrittenAt = fp, cfg.Now().UTC().Truncate(time.Second)
		m.Put(*fs)
		m.UpdatedAt, m.OptOutsExcluded = fs.WrittenAt, len(optouts)
		if err := manifest.Write(cfg.Dir, m); err != nil {
			return sum, err
		}
		sum.Written++
		var n int64
		for _, f := range fs.Files {
			sum.Rows[f.Table] += f.Rows
			sum.Bytes += f.Bytes
			if f.Table == "measurements" {
				n = f.Rows
			}
		}
		cfg.Log.Info("file set written", "week", s.week, "vantage", s.vantage, "n", i+1, "of", len(sets),
			"measurements", n, "seconds", since(t0).Seconds())
	}
	if m.UpdatedAt.IsZero() {
		m.UpdatedAt = cfg.Now().UTC().Truncate(time.Second)
	}
	if err := manifest.Write(cfg.Dir, m); err != nil {
		return sum, err
	}
	sum.Seconds = time.Since(start).Seconds()
	return sum, nil
}

func isoWeek(w string) bool {
	var y, n int
	if len(w) != 8 {
		return false
	}
	if _, err := fmt.Sscanf(w, "%4d-W%2d", &y, &n); err != nil {
		return false
	}
	return n >= 1 && n <= 53
}

// progress logs the rows written so far every 5 s until stop is called.
func progress(log *slog.Logger, counter *atomic.Int64, start time.Time) (stop func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				n := counter.Load()
				log.Info("progress", "rows", n, "rows_per_s", int64(float64(n)/time.Since(start).Seconds()),
					"elapsed", since(start))
			}
		}
	}()
	return func() { close(done) }
}

// honouredOptOuts returns the ranges whose opt-out is honoured now (the rows the scan
// blocklist is made from), in a fixed order.
func honouredOptOuts(ctx context.Context, st *store.Store) ([]string, error) {
	rows, err := st.Pool.Query(ctx, `SELECT DISTINCT prefix::text FROM optout_requests WHERE status = 'accepted' ORDER BY 1`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []string{} // never NULL in the queries: "<<= ANY(NULL)" would drop every row
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// fileSets lists the (week, vantage) pairs with data, the benchmark sets included.
func fileSets(ctx context.Context, st *store.Store, cfg Config) ([]set, error) {
	var weeks, vantages []string
	if len(cfg.Weeks) > 0 {
		weeks = cfg.Weeks
	}
	if len(cfg.Vantages) > 0 {
		vantages = cfg.Vantages
	}
	rows, err := st.Pool.Query(ctx, `
		WITH s AS (
		  SELECT iso_week, vantage_id FROM scans
		  UNION SELECT iso_week, vantage_id FROM verification_runs
		  UNION SELECT to_char(round_hour AT TIME ZONE 'UTC', 'IYYY-"W"IW'), vantage_id FROM campaigns
		  UNION SELECT to_char(started_at AT TIME ZONE 'UTC', 'IYYY-"W"IW'), $3::text FROM bench_runs)
		SELECT iso_week, vantage_id FROM s
		 WHERE ($1::text[] IS NULL OR iso_week = ANY($1::text[]))
		   AND ($2::text[] IS NULL OR vantage_id = ANY($2::text[]) OR vantage_id = $3::text)
		 ORDER BY 1, 2`, weeks, vantages, manifest.BenchmarksVantage)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []set
	for rows.Next() {
		var s set
		if err := rows.Scan(&s.week, &s.vantage); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// fingerprint is what a file set is written from: every run of the set with its status
// and end, the opt-outs, the schema version. "" when a run of the set is still running
// (its rows may still grow: never skipped).
func fingerprint(ctx context.Context, st *store.Store, s set, optouts []string) (string, error) {
	var runs string
	var running bool
	err := st.Pool.QueryRow(ctx, `
		WITH r AS (
		  SELECT 'scan ' || scan_id AS id, status, finished_at FROM scans WHERE iso_week = $1 AND vantage_id = $2
		  UNION ALL SELECT 'verify ' || run_id, status, finished_at FROM verification_runs WHERE iso_week = $1 AND vantage_id = $2
		  UNION ALL SELECT 'campaign ' || campaign_id, status, finished_at FROM campaigns
		   WHERE to_char(round_hour AT TIME ZONE 'UTC', 'IYYY-"W"IW') = $1 AND vantage_id = $2
		  UNION ALL SELECT 'bench ' || bench_id, 'ok', started_at FROM bench_runs
		   WHERE $2 = $3 AND to_char(started_at AT TIME ZONE 'UTC', 'IYYY-"W"IW') = $1)
		SELECT coalesce(string_agg(id || ' ' || status || ' ' || coalesce(finished_at::text, ''), E'\n' ORDER BY id), ''),
		       coalesce(bool_or(status = 'running'), false)
		  FROM r`, s.week, s.vantage, manifest.BenchmarksVantage).Scan(&runs, &running)
	if err != nil || running {
		return "", err
	}
	b, _ := json.Marshal(struct {
		Schema  int      `json:"schema"`
		Runs    string   `json:"runs"`
		OptOuts []string `json:"optouts"`
	}{manifest.SchemaVersion, runs, optouts})
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:]), nil
}

// present reports whether every file of a set is there with its recorded size.
func present(dir string, files []manifest.File) bool {
	for _, f := range files {
		st, err := os.Stat(filepath.Join(dir, filepath.FromSlash(f.Path)))
		if err != nil || st.Size() != f.Bytes {
			return false
		}
	}
	return len(files) > 0
}

// writeSet writes the files of one set into dir/<week>/<vantage>/.
func writeSet(ctx context.Context, st *store.Store, dir string, s set, optouts []string, counter *atomic.Int64) (*manifest.FileSet, error) {
	rel := s.week + "/" + s.vantage
	bench := s.vantage == manifest.BenchmarksVantage
	var campaigns []int64
	if !bench {
		r, err := st.Pool.Query(ctx, `SELECT campaign_id FROM campaigns
			WHERE to_char(round_hour AT TIME ZONE 'UTC', 'IYYY-"W"IW') = $1 AND vantage_id = $2
			ORDER BY round_hour, label`, s.week, s.vantage)
		if err != nil {
			return nil, err
		}
		for r.Next() {
			var id int64
			if err := r.Scan(&id); err != nil {
				r.Close()
				return nil, err
			}
			campaigns = append(campaigns, id)
		}
		r.Close()
		if err := r.Err(); err != nil {
			return nil, err
		}
	}
	fs := &manifest.FileSet{ISOWeek: s.week, Vantage: s.vantage}
	for _, t := range tables {
		if t.benchmarks != bench {
			continue
		}
		var qs []query
		if t.perCampaign {
			for _, c := range campaigns {
				qs = append(qs, query{sql: t.sql, args: []any{c, s.week, optouts}})
			}
			if len(qs) == 0 { // no campaign: an empty file with the table's columns
				qs = []query{{sql: t.sql, args: []any{int64(-1), s.week, optouts}}}
			}
		} else {
			qs = []query{{sql: t.sql, args: []any{s.week, s.vantage, optouts}}}
		}
		f, err := writeTable(ctx, st.Pool, filepath.Join(dir, filepath.FromSlash(rel), t.name+".parquet"), t.name, qs, counter)
		if err != nil {
			return nil, err
		}
		f.Path = rel + "/" + t.name + ".parquet"
		fs.Files = append(fs.Files, f)
	}
	if !bench {
		f, err := writeQlogs(ctx, st, filepath.Join(dir, filepath.FromSlash(rel), "qlogs.tar.gz"), s.week, campaigns, optouts)
		if err != nil {
			return nil, err
		}
		f.Path = rel + "/qlogs.tar.gz"
		fs.Files = append(fs.Files, f)
	}
	return fs, nil
}

// Command is "dataset export [DIR]": DIR (default DefaultDir) is the release directory.
// It opens the store (cli.OpenStore), writes the release, logs progress and prints the
// Summary as JSON on stdout. A bad --weeks value is a usage error (exit code 2).
func Command(ctx context.Context, log *slog.Logger, cfg Config, args []string, stdout io.Writer) error {
	switch len(args) {
	case 0:
		cfg.Dir = DefaultDir()
	case 1:
		cfg.Dir = args[0]
	default:
		return cli.Usagef("want: dataset export [flags] [DIR] (got %q)", strings.Join(args, " "))
	}
	for _, w := range cfg.Weeks {
		if !isoWeek(w) {
			return cli.Usagef("--weeks: %q %v", w, ErrBadWeek)
		}
	}
	cfg.Log = log
	st, err := cli.OpenStore(ctx, log)
	if err != nil {
		return err
	}
	defer st.Close()
	sum, err := Run(ctx, st, cfg)
	if err != nil {
		return err
	}
	log.Info("release written", "dir", sum.Dir, "file_sets_written", sum.Written, "file_sets_skipped", sum.Skipped,
		"measurements", sum.Rows["measurements"], "bytes", sum.Bytes, "seconds", fmt.Sprintf("%.1f", sum.Seconds),
		"manifest", sum.Manifest)
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(sum)
}
