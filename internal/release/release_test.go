package release_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/doqscan/doqscan/internal/release"
	"github.com/doqscan/doqscan/internal/release/manifest"
	"github.com/doqscan/doqscan/internal/store"
	"github.com/doqscan/doqscan/internal/store/storetest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// seed writes a small world of two weeks: a scan with replies, a verification run, a
// campaign with measurements (one with a qlog), RTT samples, an analysis and a feature
// for each of two vantage points; addresses 198.18.1.1..198.18.1.4, and 198.18.9.9 in a
// range that the opt-out tests opt out.
func seed(t *testing.T, s *store.Store) {
	t.Helper()
	ctx := context.Background()
	var qlog bytes.Buffer
	zw := gzip.NewWriter(&qlog)
	_, _ = zw.Write([]byte("\x1e{\"qlog_version\":\"0.3\",\"trace\":{}}\n"))
	_ = zw.Close()
	stmts := []string{
		`INSERT INTO vantage_points (vantage_id, description) VALUES ('vp0', 'zero'), ('vp1', 'one')`,
		`INSERT INTO scans (scan_id, iso_week, vantage_id, ports, started_at, finished_at, status)
		 SELECT 10 * w + v, '2026-W4' || (6 + w), 'vp' || v, ARRAY[784, 853], '2026-11-09'::timestamptz + w * interval '7 days',
		        '2026-11-09'::timestamptz + w * interval '7 days' + interval '1 hour', 'ok'
		   FROM generate_series(0, 1) w, generate_series(0, 1) v`,
		`INSERT INTO scan_replies (scan_id, port, address, reply_kind, quic_versions, received_at, iso_week)
		 SELECT s.scan_id, 784, a::inet, 'quic-vn', ARRAY[1, 4278190109]::bigint[], s.started_at, s.iso_week
		   FROM scans s, unnest(ARRAY['198.18.1.1', '198.18.1.2', '198.18.9.9']) a`,
		`INSERT INTO verification_runs (run_id, iso_week, vantage_id, scan_id, started_at, finished_at, status)
		 SELECT scan_id, iso_week, vantage_id, scan_id, started_at, finished_at, 'ok' FROM scans`,
		`INSERT INTO certificates (sha256, der, subject_cn) VALUES (sha256('leaf'::bytea), 'leaf'::bytea, 'dns.example')`,
		`INSERT INTO verification_results (run_id, address, port, outcome, quic_version, alpn, cert_chain, verified_at)
		 SELECT r.run_id, a::inet, 784, 'doq-verified', 1, 'doq', ARRAY[sha256('leaf'::bytea)], r.started_at
		   FROM verification_runs r, unnest(ARRAY['198.18.1.1', '198.18.1.2', '198.18.9.9']) a`,
		`INSERT INTO resolvers (address) VALUES ('198.18.1.1'), ('198.18.1.2'), ('198.18.9.9')`,
		`INSERT INTO campaigns (campaign_id, vantage_id, round_hour, started_at, finished_at, status)
		 SELECT scan_id, vantage_id, started_at, started_at, started_at + interval '5 minutes', 'ok' FROM scans`,
		`INSERT INTO qlogs (qlog_id, campaign_id, address, port, encoding, raw_size, data, round_hour)
		 SELECT md5('q' || campaign_id)::uuid, campaign_id, '198.18.1.1', 784, 'gzip', 40, $1, round_hour FROM campaigns`,
		`INSERT INTO measurements (measurement_id, campaign_id, address, protocol, port, phase, started_at, handshake_ns,
		                           resolve_ns, status, rcode, answers, qlog_id, round_hour)
		 SELECT md5(c.campaign_id || a || p)::uuid, c.campaign_id, a::inet, p, CASE p WHEN 'doq' THEN 784 ELSE 53 END,
		        'measured', c.started_at, 20000000, 40000000, 'ok', 0, ARRAY['192.0.2.1'],
		        CASE WHEN p = 'doq' AND a = '198.18.1.1' THEN md5('q' || c.campaign_id)::uuid END, c.round_hour
		   FROM campaigns c, unnest(ARRAY['198.18.1.1', '198.18.1.2', '198.18.9.9']) a, unnest(ARRAY['doudp', 'doq']) p`,
		`INSERT INTO rtt_samples (campaign_id, address, transport, port, seq, sent_at, rtt_ns, status, round_hour)
		 SELECT c.campaign_id, a::inet, 'quic', 784, s, c.started_at, 19000000 + s, 'ok', c.round_hour
		   FROM campaigns c, unnest(ARRAY['198.18.1.1', '198.18.1.2', '198.18.9.9']) a, generate_series(0, 2) s`,
		`INSERT INTO handshake_analyses (measurement_id, rtt_ns, ratio, round_trips, one_rtt, cause, round_hour)
		 SELECT measurement_id, 19000000, 1.05, 1, true, '1rtt', round_hour FROM measurements WHERE protocol = 'doq'`,
		`INSERT INTO resolver_features (campaign_id, address, protocol, port, feature, supported)
		 SELECT campaign_id, address, 'doq', 784, '0rtt', true FROM measurements WHERE protocol = 'doq'`,
		`INSERT INTO quic_stacks (run_id, address, port, library, matched, evidence)
		 SELECT run_id, address, port, 'quic-go', ARRAY['tp-order'], '{"tp": "quic-go"}' FROM verification_results`,
		`INSERT INTO ddr_queries (run_id, address, status, rcode, records, queried_at)
		 SELECT run_id, address, 'designations', 0, 1, verified_at FROM verification_results`,
		`INSERT INTO ddr_designations (run_id, resolver, seq, priority, target, alpns, port, ipv4hints, ipv6hints)
		 SELECT run_id, address, 0, 1, 'dns.example.', ARRAY['doq', 'dot'], 853,
		        ARRAY['198.18.1.2', '198.18.9.9', '198.18.1.1']::inet[], ARRAY['2001:2::9']::inet[]
		   FROM verification_results`,
		`INSERT INTO policy_runs (run_id, iso_week, vantage_id, verification_run_id, started_at, finished_at, status)
		 SELECT run_id, iso_week, vantage_id, run_id, started_at, finished_at, 'ok' FROM verification_runs`,
		`INSERT INTO connection_policies (run_id, address, port, protocol, status, queries_sent, queries_answered,
		                                  closed_by_server, idle_dead_ms, retry_policy, checked_at)
		 SELECT p.run_id, a::inet, 784, 'doq', 'ok', 10, 10, false, NULL, 'never', p.started_at
		   FROM policy_runs p, unnest(ARRAY['198.18.1.1', '198.18.1.2', '198.18.9.9']) a`,
		`INSERT INTO amplification_probes (run_id, address, port, initial_size, key_share, status, client_bytes,
		                                   server_bytes_pre_ack, budget, stalled, round_trips, chain_bytes, checked_at)
		 SELECT p.run_id, a::inet, 784, 1200, 'x25519', 'ok', 1200, 3600, 3600, true, 2, 4000, p.started_at
		   FROM policy_runs p, unnest(ARRAY['198.18.1.1', '198.18.1.2', '198.18.9.9']) a`,
		`INSERT INTO bench_runs (bench_id, run_key, started_at, label, protocol, address, port, policy, load, workers,
		                         elapsed_s, sent, answered, qps, success_rate, report)
		 VALUES (1, 'k1', '2026-11-10T10:00:00Z', 'sweep', 'doq', '198.18.1.1', 784, 'fresh', 'max', 1, 1, 10, 10, 10, 1, '{}')`,
		`INSERT INTO bench_samples (bench_id, second, sent, answered, failed, started_at) VALUES (1, 0, 10, 10, 0, '2026-11-10T10:00:00Z')`,
	}
	for _, q := range stmts {
		var args []any
		if strings.Contains(q, "$1") {
			args = []any{qlog.Bytes()}
		}
		if _, err := s.Pool.Exec(ctx, q, args...); err != nil {
			t.Fatalf("%v\n%s", err, q)
		}
	}
}

func export(t *testing.T, s *store.Store, dir string, force bool) *release.Summary {
	t.Helper()
	sum, err := release.Run(context.Background(), s, release.Config{Dir: dir, Force: force, Log: quiet,
		Now: func() time.Time { return time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC) }})
	if err != nil {
		t.Fatalf("export: %v", err)
	}
	return sum
}

// files returns every file under dir (relative path -> contents), the manifest aside.
func files(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Base(p) == manifest.Name {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		out[filepath.ToSlash(rel)] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// column reads one string column of a Parquet file.
func column(t *testing.T, path, name string) []string {
	t.Helper()
	var out []string
	for _, ch := range columnChunks(t, path, name) {
		sa := ch.(*array.String)
		for i := 0; i < sa.Len(); i++ {
			out = append(out, sa.Value(i))
		}
	}
	return out
}

// columnChunks reads one column of a Parquet file with pqarrow (an independent reader of
// what the writer wrote); the chunks stay valid after the table is released.
func columnChunks(t *testing.T, path, name string) []arrow.Array {
	t.Helper()
	rdr, err := file.OpenParquetFile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer rdr.Close()
	fr, err := pqarrow.NewFileReader(rdr, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := fr.ReadTable(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Release()
	idx := tbl.Schema().FieldIndices(name)
	if len(idx) != 1 {
		t.Fatalf("%s: no column %s", path, name)
	}
	chunks := tbl.Column(idx[0]).Data().Chunks()
	for _, ch := range chunks {
		ch.Retain()
	}
	return chunks
}

// TestExportIsIdempotentAndItsManifestTrue: two exports of the same rows into two
// directories are the same bytes; the manifest's row counts and SHA-256 are those of the
// files; exporting again into the same directory skips every set, and --force writes the
// same bytes again.
func TestExportIsIdempotentAndItsManifestTrue(t *testing.T) {
	s := storetest.Open(t)
	seed(t, s)
	a, b := t.TempDir(), t.TempDir()
	sum := export(t, s, a, false)
	export(t, s, b, false)
	if sum.Written != 5 || sum.Rows["measurements"] != 24 || sum.Rows["qlogs"] != 4 || sum.Rows["bench_runs"] != 1 {
		t.Fatalf("summary %+v: want 5 file sets (one of benchmarks), 24 measurements, 4 qlogs, 1 benchmark run", sum)
	}
	fa, fb := files(t, a), files(t, b)
	if len(fa) != len(fb) || len(fa) == 0 {
		t.Fatalf("%d files vs %d", len(fa), len(fb))
	}
	for p, x := range fa {
		if !bytes.Equal(x, fb[p]) {
			t.Errorf("%s differs between two exports of the same rows", p)
		}
	}
	m, err := manifest.Read(a)
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	all := append([]manifest.File{}, m.Files...)
	for _, fs := range m.FileSets {
		all = append(all, fs.Files...)
	}
	for _, f := range all {
		listed[f.Path] = true
		data, ok := fa[f.Path]
		if !ok {
			t.Errorf("manifest lists %s, not on disk", f.Path)
			continue
		}
		if st, err := os.Stat(filepath.Join(a, f.Path)); err != nil || st.Mode().Perm() != 0o644 {
			t.Errorf("%s: mode %v, want 0644 (a published file)", f.Path, st.Mode().Perm())
		}
		h := sha256.Sum256(data)
		if hex.EncodeToString(h[:]) != f.SHA256 || int64(len(data)) != f.Bytes {
			t.Errorf("%s: manifest sha256/bytes do not match the file", f.Path)
		}
		if strings.HasSuffix(f.Path, ".parquet") {
			rdr, err := file.OpenParquetFile(filepath.Join(a, f.Path), false)
			if err != nil {
				t.Fatal(err)
			}
			if rdr.NumRows() != f.Rows {
				t.Errorf("%s: %d rows in the file, manifest says %d", f.Path, rdr.NumRows(), f.Rows)
			}
			rdr.Close()
		}
	}
	for p := range fa {
		if !listed[p] {
			t.Errorf("%s on disk, not in the manifest", p)
		}
	}
	// The qlog a measurement names is in the week's archive.
	qf := column(t, filepath.Join(a, "2026-W46/vp0/measurements.parquet"), "qlog_file")
	if !contains(qf, "qlogs.tar.gz:"+uuidOf(t, s, "md5('q' || 0)")+".sqlog") {
		t.Errorf("measurements.qlog_file %q does not name the campaign's qlog", qf)
	}

	again := export(t, s, a, false)
	if again.Written != 0 || again.Skipped != 5 {
		t.Errorf("second export: %d written, %d skipped; want 0 and 5", again.Written, again.Skipped)
	}
	forced := export(t, s, a, true)
	if forced.Written != 5 {
		t.Errorf("--force: %d written", forced.Written)
	}
	for p, x := range files(t, a) {
		if !bytes.Equal(x, fb[p]) {
			t.Errorf("%s changed when written again", p)
		}
	}
}

func uuidOf(t *testing.T, s *store.Store, expr string) string {
	t.Helper()
	var u string
	if err := s.Pool.QueryRow(context.Background(), "SELECT ("+expr+")::uuid::text").Scan(&u); err != nil {
		t.Fatal(err)
	}
	return u
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// addressTables are the tables with an address column.
var addressTables = []string{"scan_replies", "verification_results", "resolvers", "measurements", "rtt_samples",
	"resolver_features", "quic_stacks", "ddr_queries", "connection_policies", "amplification_probes"}

// listColumn reads one list-of-strings column of a Parquet file, one slice per row.
func listColumn(t *testing.T, path, name string) [][]string {
	t.Helper()
	var out [][]string
	for _, ch := range columnChunks(t, path, name) {
		la := ch.(*array.List)
		vals := la.ListValues().(*array.String)
		for i := 0; i < la.Len(); i++ {
			lo, hi := la.ValueOffsets(i)
			row := []string{}
			for j := lo; j < hi; j++ {
				row = append(row, vals.Value(int(j)))
			}
			out = append(out, row)
		}
	}
	return out
}

// checkDesignations: ddr_designations of a set names 198.18.9.9 as a designating
// resolver or among the hints exactly when want says so; the other hints stay, in order.
func checkDesignations(t *testing.T, dir string, want bool) {
	t.Helper()
	p := filepath.Join(dir, "2026-W46/vp0/ddr_designations.parquet")
	res := column(t, p, "resolver")
	hints := listColumn(t, p, "ipv4hints")
	if len(res) == 0 || len(hints) != len(res) {
		t.Fatalf("%s: %d designations, %d hint lists: the test no longer tells", p, len(res), len(hints))
	}
	kept := []string{"198.18.1.2", "198.18.1.1"}
	if want {
		kept = []string{"198.18.1.2", "198.18.9.9", "198.18.1.1"}
	}
	if got := contains(res, "198.18.9.9"); got != want {
		t.Errorf("%s: resolver 198.18.9.9 present %v, want %v (%v)", p, got, want, res)
	}
	for i, h := range hints {
		if strings.Join(h, ",") != strings.Join(kept, ",") {
			t.Errorf("%s row %d: ipv4hints %v, want %v", p, i, h, kept)
		}
	}
	if v6 := listColumn(t, p, "ipv6hints"); len(v6) == 0 || strings.Join(v6[0], ",") != "2001:2::9" {
		t.Errorf("%s: ipv6hints %v, want [2001:2::9] (host text, no prefix length)", p, v6)
	}
}

// TestOptedOutRangeLeftOut: an address inside an honoured opt-out is in no table of a
// release written after the opt-out, nor its qlogs; a release written before it had it,
// and the next export rewrites every set (no skip) without it. A pending request leaves
// the address in.
func TestOptedOutRangeLeftOut(t *testing.T) {
	s := storetest.Open(t)
	seed(t, s)
	ctx := context.Background()
	dir := t.TempDir()
	if _, err := s.Pool.Exec(ctx, `INSERT INTO optout_requests (prefix, email, status) VALUES ('198.18.9.0/24', 'b@example.org', 'pending')`); err != nil {
		t.Fatal(err)
	}
	export(t, s, dir, false)
	for _, tb := range addressTables {
		if got := column(t, filepath.Join(dir, "2026-W46/vp0", tb+".parquet"), "address"); !contains(got, "198.18.9.9") {
			t.Fatalf("before the opt-out is honoured, %s lacks 198.18.9.9: %v", tb, got)
		}
	}
	checkDesignations(t, dir, true)
	if _, err := s.Pool.Exec(ctx, `INSERT INTO optout_requests (prefix, email, status) VALUES ('198.18.9.0/24', 'a@example.org', 'accepted')`); err != nil {
		t.Fatal(err)
	}
	sum := export(t, s, dir, false)
	if sum.Written != 5 || sum.OptOuts != 1 {
		t.Fatalf("after the opt-out: %d sets written, %d opt-outs; want 5 and 1", sum.Written, sum.OptOuts)
	}
	m, _ := manifest.Read(dir)
	for _, fs := range m.FileSets {
		if fs.Vantage == manifest.BenchmarksVantage {
			continue
		}
		for _, tb := range addressTables {
			p := filepath.Join(dir, fs.ISOWeek, fs.Vantage, tb+".parquet")
			got := column(t, p, "address")
			if contains(got, "198.18.9.9") {
				t.Errorf("%s holds the opted-out address", p)
			}
			if len(got) == 0 {
				t.Errorf("%s is empty: the test no longer tells", p)
			}
		}
	}
	checkDesignations(t, dir, false)
	if m.OptOutsExcluded != 1 {
		t.Errorf("manifest optouts_excluded %d, want 1", m.OptOutsExcluded)
	}
	raw, err := os.ReadFile(filepath.Join(dir, manifest.Name))
	if err != nil || bytes.Contains(raw, []byte("198.18.9")) {
		t.Errorf("the manifest names the opted-out range (or is unreadable: %v)", err)
	}
}

// TestTablesMatchTheDocs: every table and column the release writes is documented in
// docs/data-release.md (a row "| `column` |" under the table's heading), and the doc
// names no table the release does not write.
func TestTablesMatchTheDocs(t *testing.T) {
	s := storetest.Open(t)
	seed(t, s)
	dir := t.TempDir()
	export(t, s, dir, false)
	doc, err := os.ReadFile("../../docs/data-release.md")
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]string{}
	parts := strings.Split(string(doc), "\n### ")
	for _, p := range parts[1:] {
		name := strings.Trim(strings.SplitN(p, "\n", 2)[0], "` ")
		sections[name] = p
	}
	written := map[string]string{}
	err = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, ".parquet") {
			written[strings.TrimSuffix(filepath.Base(p), ".parquet")] = p
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for n := range written {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		sec, ok := sections[n]
		if !ok {
			t.Errorf("table %s is not documented (a '### %s' section)", n, n)
			continue
		}
		rdr, err := file.OpenParquetFile(written[n], false)
		if err != nil {
			t.Fatal(err)
		}
		sc := rdr.MetaData().Schema
		for i := 0; i < sc.NumColumns(); i++ {
			col := strings.SplitN(sc.Column(i).Path(), ".", 2)[0]
			if !strings.Contains(sec, "| `"+col+"` |") {
				t.Errorf("%s.%s is not documented", n, col)
			}
		}
		rdr.Close()
	}
	for n := range sections {
		if _, ok := written[n]; !ok && n != "qlogs.tar.gz" {
			t.Errorf("docs/data-release.md documents %s, which the release does not write", n)
		}
	}
}
