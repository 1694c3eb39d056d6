package dataset_test

import (
	"bufio"
	"context"
	"crypto/x509"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/dataset"
	"github.com/doqscan/doqscan/internal/datasets"
	"github.com/doqscan/doqscan/internal/listfile/listfiletest"
	"github.com/doqscan/doqscan/internal/store"
	"github.com/doqscan/doqscan/internal/store/storetest"
)

const excerpt = "testdata/pam2022-excerpt"

// datasetsDir is the study's datasets directory (internal/datasets: $DOQSCAN_DATASETS,
// else ../shared/datasets beside the checkout, where CI puts it). Tests that need it skip
// when it is absent.
func datasetsDir(t *testing.T) string {
	t.Helper()
	return filepath.Dir(datasets.Require(t, "dns-analysis-2021"))
}

// addrs reads a one-address-per-line file the simple way (the test's own oracle).
func addrs(t *testing.T, path string) map[string]bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if s := strings.TrimSpace(sc.Text()); s != "" && s != "0.0.0.0" {
			out[s] = true
		}
	}
	return out
}

func importDir(t *testing.T, st *store.Store, dir string, label string) *dataset.Summary {
	t.Helper()
	sum, err := dataset.Import(context.Background(), st, dataset.Config{Dir: dir, Label: label})
	if err != nil {
		t.Fatalf("import %s: %v", dir, err)
	}
	return sum
}

// verifiedPerPort returns week -> port -> DoQ-verified addresses of one label.
func verifiedPerPort(t *testing.T, st *store.Store, label string) map[string]map[int32]int {
	t.Helper()
	rows, err := st.Pool.Query(context.Background(), `SELECT vr.iso_week, r.port, count(*)
		FROM verification_results r JOIN verification_runs vr USING (run_id)
		WHERE vr.label = $1 AND r.outcome = 'doq-verified' GROUP BY 1, 2`, label)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]map[int32]int{}
	for rows.Next() {
		var w string
		var p int32
		var n int
		if err := rows.Scan(&w, &p, &n); err != nil {
			t.Fatal(err)
		}
		if out[w] == nil {
			out[w] = map[int32]int{}
		}
		out[w][p] = n
	}
	return out
}

// scanPortSplit counts a week's verified addresses by the scan ports they answered on.
func scanPortSplit(t *testing.T, st *store.Store, label, week string) (only784, only8853, both int) {
	t.Helper()
	err := st.Pool.QueryRow(context.Background(), `
		WITH v AS (SELECT DISTINCT r.address, vr.scan_id FROM verification_results r
		             JOIN verification_runs vr USING (run_id) WHERE vr.label = $1 AND vr.iso_week = $2),
		     p AS (SELECT v.address, bool_or(s.port = 784) AS a, bool_or(s.port = 8853) AS b
		             FROM v LEFT JOIN scan_replies s ON s.scan_id = v.scan_id AND s.address = v.address GROUP BY 1)
		SELECT count(*) FILTER (WHERE a AND NOT b), count(*) FILTER (WHERE b AND NOT a), count(*) FILTER (WHERE a AND b) FROM p`,
		label, week).Scan(&only784, &only8853, &both)
	if err != nil {
		t.Fatal(err)
	}
	return
}

// tableCounts counts the rows of every table an import writes.
func tableCounts(t *testing.T, st *store.Store) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, tb := range []string{"vantage_points", "datasets", "dataset_files", "scans", "scan_runs", "scan_replies",
		"verification_runs", "verification_results", "certificates", "observed_certificates", "resolvers",
		"resolver_geo", "campaigns", "measurements", "rtt_samples", "qlogs", "resolver_features"} {
		var n int64
		if err := st.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+tb).Scan(&n); err != nil {
			t.Fatal(err)
		}
		out[tb] = n
	}
	return out
}

func TestImportExcerpt(t *testing.T) {
	st := storetest.Open(t)
	ctx := context.Background()
	sum := importDir(t, st, excerpt, "")
	if sum.Label != "pam2022-excerpt" || sum.Vantage != dataset.DefaultVantage {
		t.Fatalf("label %q vantage %q", sum.Label, sum.Vantage)
	}
	res := filepath.Join(excerpt, "results")

	// Verified per week and port: the lists' addresses, port 0 (not recorded) for the
	// 784/8853 verifier, 853 for the UDP/853 one.
	got := verifiedPerPort(t, st, sum.Label)
	want := map[string]map[int32]int{
		"2021-W27": {0: len(addrs(t, filepath.Join(res, "05-07-2021-verified.csv")))},
		"2021-W29": {0: len(addrs(t, filepath.Join(res, "19-07-2021-verified.csv"))),
			853: len(addrs(t, filepath.Join(res, "19-07-2021-853-verified.csv")))},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("verified per week and port = %v, want %v", got, want)
	}

	// The scan ports of W27's verified addresses, against the lists themselves.
	v, a, b := addrs(t, filepath.Join(res, "05-07-2021-verified.csv")), addrs(t, filepath.Join(res, "05-07-2021-784.csv")),
		addrs(t, filepath.Join(res, "05-07-2021-8853.csv"))
	var w784, w8853, wBoth int
	for x := range v {
		switch {
		case a[x] && b[x]:
			wBoth++
		case a[x]:
			w784++
		case b[x]:
			w8853++
		}
	}
	g784, g8853, gBoth := scanPortSplit(t, st, sum.Label, "2021-W27")
	if g784 != w784 || g8853 != w8853 || gBoth != wBoth || w784 == 0 || w8853 == 0 || wBoth == 0 {
		t.Fatalf("W27 split 784/8853/both = %d/%d/%d, want %d/%d/%d", g784, g8853, gBoth, w784, w8853, wBoth)
	}
	var replies int
	st.Pool.QueryRow(ctx, `SELECT count(*) FROM scan_replies WHERE address = '0.0.0.0' OR reply_kind <> 'udp-reply'`).Scan(&replies)
	if replies != 0 {
		t.Fatalf("%d scan replies are 0.0.0.0 or not udp-reply", replies)
	}

	// The misc file: the DoQ version and ALPN on the UDP/853 result, its QUIC leaf in
	// certificates, support checks as features.
	var alpn string
	var ver int64
	var cn string
	err := st.Pool.QueryRow(ctx, `SELECT r.alpn, r.quic_version, c.subject_cn FROM verification_results r
		JOIN verification_runs vr USING (run_id) JOIN certificates c ON c.sha256 = r.cert_chain[1]
		WHERE vr.iso_week = '2021-W29' AND r.address = '119.28.60.135' AND r.port = 853`).Scan(&alpn, &ver, &cn)
	if err != nil {
		t.Fatalf("misc facts on the verified row: %v", err)
	}
	wantCN := miscQUICLeafCN(t, filepath.Join(excerpt, "misc", "19-07-2021-final.db"))
	if alpn != "doq-i02" || ver != 0xff000022 || cn != wantCN || cn == "" {
		t.Fatalf("misc: alpn %q version %#x cn %q; want doq-i02, 0xff000022, %q", alpn, ver, cn, wantCN)
	}
	var feats int
	st.Pool.QueryRow(ctx, `SELECT count(*) FROM resolver_features WHERE address = '119.28.60.135'
		AND ((feature = 'tfo' AND protocol IN ('dot', 'doh') AND supported) OR (feature = '0rtt' AND protocol = 'doq' AND NOT supported))`).Scan(&feats)
	if feats != 3 {
		t.Fatalf("misc features: %d of 3 (TFO on 853 and 443, no 0-RTT)", feats)
	}

	// Certificate CSVs: every line with its names, in the first and last week.
	for _, f := range []struct{ file, week string }{{"certs.csv", "2021-W27"}, {"certs-last.csv", "2021-W29"}} {
		recs := readCSV(t, filepath.Join(excerpt, f.file))
		var n int
		st.Pool.QueryRow(ctx, `SELECT count(*) FROM observed_certificates WHERE iso_week = $1 AND md5 IS NOT NULL AND sha256 IS NULL`, f.week).Scan(&n)
		if n != len(recs) {
			t.Fatalf("%s: %d observed certificates in %s, want %d", f.file, n, f.week, len(recs))
		}
		for _, r := range recs {
			var info struct {
				CommonName string
				DNSNames   []string
			}
			json.Unmarshal([]byte(r[3]), &info)
			var gotCN string
			var names []string
			if err := st.Pool.QueryRow(ctx, `SELECT subject_cn, dns_names FROM observed_certificates
				WHERE iso_week = $1 AND address = $2 AND protocol = $3 AND port = $4::int`, f.week, r[0], r[1], r[2]).Scan(&gotCN, &names); err != nil {
				t.Fatalf("%s %v: %v", f.file, r[:3], err)
			}
			if gotCN != info.CommonName || fmt.Sprint(names) != fmt.Sprint(nonNil(info.DNSNames)) {
				t.Fatalf("%s %v: names %q %v, want %q %v", f.file, r[:3], gotCN, names, info.CommonName, info.DNSNames)
			}
		}
	}

	// Locations: every line, with a continent.
	locs := readCSV(t, filepath.Join(excerpt, "ip-location.csv"))[1:]
	var geo, cont int
	st.Pool.QueryRow(ctx, `SELECT count(*), count(continent) FROM resolver_geo WHERE city_dataset = $1`, sum.DatasetID).Scan(&geo, &cont)
	if geo != len(locs) || cont != len(locs) {
		t.Fatalf("resolver_geo: %d rows, %d with a continent; want %d", geo, cont, len(locs))
	}

	// The README is listed, not imported; re-importing adds nothing.
	var detail string
	st.Pool.QueryRow(ctx, `SELECT format FROM dataset_files WHERE path = 'README.md'`).Scan(&detail)
	if detail != "not-imported" {
		t.Fatalf("README.md listed as %q", detail)
	}
	before := tableCounts(t, st)
	again := importDir(t, st, excerpt, "")
	if !again.Existed || again.DatasetID != sum.DatasetID {
		t.Fatalf("re-import: existed %v id %d (first %d)", again.Existed, again.DatasetID, sum.DatasetID)
	}
	for tb, n := range again.New {
		if n != 0 {
			t.Errorf("re-import added %d rows to %s", n, tb)
		}
	}
	if after := tableCounts(t, st); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("re-import changed counts:\n%v\n%v", before, after)
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func readCSV(t *testing.T, path string) [][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func miscQUICLeafCN(t *testing.T, path string) string {
	t.Helper()
	db := openRO(t, path)
	defer db.Close()
	var der []byte
	if err := db.QueryRow(`SELECT raw FROM certificates WHERE protocol = 'quic'`).Scan(&der); err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c.Subject.CommonName
}

// copyTree copies a fixture directory into a temporary one the test may damage.
func copyTree(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dst)
}

func replaceLine(t *testing.T, path string, line int, text string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	lines[line-1] = text
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
}

func truncate(t *testing.T, path string, size int64) {
	t.Helper()
	if err := os.Truncate(path, size); err != nil {
		t.Fatal(err)
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// lineCount is the number of lines of a file that ends its last line.
func lineCount(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// editLine replaces old (which must be there) with new in one line of a file.
func editLine(t *testing.T, path string, line int, old, new string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	if !strings.Contains(lines[line-1], old) {
		t.Fatalf("%s:%d has no %q", path, line, old)
	}
	lines[line-1] = strings.Replace(lines[line-1], old, new, 1)
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A malformed file stops the import with its name and line, and nothing stays behind.
func TestImportMalformed(t *testing.T) {
	st := storetest.Open(t)
	empty := tableCounts(t, st)
	cases := []struct {
		name, file string
		line       int
		damage     func(t *testing.T, dir string)
	}{
		{"address list", "results/19-07-2021-verified.csv", 2, func(t *testing.T, dir string) {
			replaceLine(t, filepath.Join(dir, "results/19-07-2021-verified.csv"), 2, "1.2.3.999")
		}},
		{"certificate info", "certs-last.csv", 2, func(t *testing.T, dir string) {
			replaceLine(t, filepath.Join(dir, "certs-last.csv"), 2, `1.2.3.4,quic,784,"{""CommonName"": 7}"`)
		}},
		{"location", "ip-location.csv", 3, func(t *testing.T, dir string) {
			replaceLine(t, filepath.Join(dir, "ip-location.csv"), 3, `Germany,DE,BY,Bavaria,Munich,80331,95.1,11.5,X,AS1 X,1.2.3.4`)
		}},
		{"not SQLite", "misc/19-07-2021-final.db", 0, func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, "misc/19-07-2021-final.db"), []byte("not a database, just text\n"), 0o644)
		}},
		// What cannot be read faithfully is refused at its file and line: a file cut
		// mid-line (`head -c 400` stored 178.79.168.1 for 178.79.168.139), bytes that are
		// not UTF-8 (PostgreSQL refused them with SQLSTATE 22021 and no file; JSON made
		// them U+FFFD), NUL and lone surrogates in JSON names, in CSV, list and SQLite files.
		{"location cut mid-line", "ip-location.csv", 4, func(t *testing.T, dir string) {
			truncate(t, filepath.Join(dir, "ip-location.csv"), 400)
		}},
		{"verifier list cut short", "results/19-07-2021-verified.csv", lineCount(t, excerpt+"/results/19-07-2021-verified.csv"), func(t *testing.T, dir string) {
			p := filepath.Join(dir, "results/19-07-2021-verified.csv")
			truncate(t, p, fileSize(t, p)-1)
		}},
		{"location not UTF-8", "ip-location.csv", 3, func(t *testing.T, dir string) {
			replaceLine(t, filepath.Join(dir, "ip-location.csv"), 3, "Spain,ES,MD,Madrid,M\xe1drid,28001,40.4168,-3.70379,,AS202053 UpCloud Ltd,194.62.96.176")
		}},
		{"certificate name not UTF-8", "certs-last.csv", 2, func(t *testing.T, dir string) {
			editLine(t, filepath.Join(dir, "certs-last.csv"), 2, "pogsli.de", "pogsl\xed.de")
		}},
		{"certificate name with NUL", "certs-last.csv", 2, func(t *testing.T, dir string) {
			editLine(t, filepath.Join(dir, "certs-last.csv"), 2, "pogsli.de", `pogs\u0000li.de`)
		}},
		{"certificate name with a lone surrogate", "certs-last.csv", 2, func(t *testing.T, dir string) {
			editLine(t, filepath.Join(dir, "certs-last.csv"), 2, "pogsli.de", `pogs\ud800li.de`)
		}},
		{"SQLite text not UTF-8", "misc/19-07-2021-final.db", 0, func(t *testing.T, dir string) {
			db := openRW(t, filepath.Join(dir, "misc/19-07-2021-final.db"))
			if _, err := db.Exec(`UPDATE q_versions SET draft_version = CAST(x'646f712dff' AS TEXT)`); err != nil {
				t.Fatal(err)
			}
			db.Close()
		}},
		// Entries that are not files the import can read stop it, naming them (they were
		// skipped without a word).
		{"FIFO", "results/26-07-2021-784.csv", 0, func(t *testing.T, dir string) {
			listfiletest.FIFO(t, filepath.Join(dir, "results"), "26-07-2021-784.csv")
		}},
		{"link to nothing", "results/26-07-2021-853.csv", 0, func(t *testing.T, dir string) {
			listfiletest.Symlink(t, filepath.Join(dir, "nowhere.csv"), filepath.Join(dir, "results/26-07-2021-853.csv"))
		}},
		{"directory named like a data file", "certs-more.csv", 0, func(t *testing.T, dir string) {
			if err := os.Mkdir(filepath.Join(dir, "certs-more.csv"), 0o755); err != nil {
				t.Fatal(err)
			}
		}},
		// Found while writing (after the dataset and file rows are in the transaction).
		{"certificate DER", "misc/19-07-2021-final.db", 0, func(t *testing.T, dir string) {
			db := openRW(t, filepath.Join(dir, "misc/19-07-2021-final.db"))
			if _, err := db.Exec(`UPDATE certificates SET raw = x'3003020100' WHERE protocol = 'https'`); err != nil {
				t.Fatal(err)
			}
			db.Close()
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := copyTree(t, excerpt)
			c.damage(t, dir)
			_, err := dataset.Import(context.Background(), st, dataset.Config{Dir: dir, Label: "broken"})
			var fe *dataset.FileError
			if !errors.As(err, &fe) || !errors.Is(err, dataset.ErrMalformed) {
				t.Fatalf("error %v (%T), want a FileError wrapping ErrMalformed", err, err)
			}
			if fe.Path != c.file || fe.Line != c.line || !strings.HasPrefix(err.Error(), c.file) {
				t.Fatalf("error %q names %s line %d, want %s line %d", err, fe.Path, fe.Line, c.file, c.line)
			}
			if strings.Contains(err.Error(), "SQLSTATE") {
				t.Errorf("error %q comes from PostgreSQL, not from reading the file", err)
			}
			if got := tableCounts(t, st); fmt.Sprint(got) != fmt.Sprint(empty) {
				t.Fatalf("rows left behind: %v", got)
			}
			t.Log(err)
		})
	}
}

// The whole pre-study: the figures of its README (line counts of the verifier lists and
// the 05-07-2021 scan split), checked against the files too.
func TestImportStudyDatasets(t *testing.T) {
	dir := datasetsDir(t)
	st := storetest.Open(t)
	ctx := context.Background()
	pre := filepath.Join(dir, "dns-analysis-2021")
	sum := importDir(t, st, pre, "")

	wantPerWeek := []int{869, 873, 889, 875, 892, 887, 888, 890, 921, 930, 924} // the datasets README
	got := verifiedPerPort(t, st, sum.Label)
	if len(sum.Weeks) != len(wantPerWeek) {
		t.Fatalf("weeks %v", sum.Weeks)
	}
	files, _ := filepath.Glob(filepath.Join(pre, "results", "*-verified.csv"))
	perWeek853 := map[string]int{}
	for _, f := range files {
		m := strings.SplitN(filepath.Base(f), "-", 4)
		if strings.HasPrefix(m[3], "853-") {
			d := m[0] + "-" + m[1] + "-" + m[2]
			perWeek853[weekOf(t, d)] += len(addrs(t, f))
		}
	}
	var line []int
	for i, w := range sum.Weeks {
		line = append(line, got[w][0])
		if got[w][853] != perWeek853[w] {
			t.Errorf("%s: %d verified on UDP/853, want %d", w, got[w][853], perWeek853[w])
		}
		_ = i
	}
	if fmt.Sprint(line) != fmt.Sprint(wantPerWeek) {
		t.Fatalf("verified (784/8853 verifier) per week = %v, want %v", line, wantPerWeek)
	}
	t.Logf("verified per week (784/8853 verifier, port not recorded): %v; on UDP/853: %v", line, perWeek853)

	o784, o8853, both := scanPortSplit(t, st, sum.Label, "2021-W27")
	if o784 != 690 || o8853 != 171 || both != 14 {
		t.Fatalf("05-07-2021: %d on 784 only, %d on 8853 only, %d on both; want 690, 171, 14", o784, o8853, both)
	}

	for _, f := range []string{"certs.csv", "certs-last.csv"} {
		n := len(readCSV(t, filepath.Join(pre, f)))
		var rows, named int
		st.Pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE subject_cn <> '' OR cardinality(dns_names) > 0)
			FROM observed_certificates o JOIN dataset_files f ON f.dataset_id = o.dataset_id AND f.path = $1
			WHERE o.iso_week = (CASE WHEN $1 = 'certs.csv' THEN '2021-W24' ELSE '2021-W34' END)`, f).Scan(&rows, &named)
		if rows != n {
			t.Fatalf("%s: %d rows, want %d", f, rows, n)
		}
		t.Logf("%s: %d certificates, %d with a name", f, rows, named)
	}

	// The misc SQLite files: every q_versions row lands on its week's UDP/853 result.
	msum := importDir(t, st, filepath.Join(dir, "misc-dns-measurements-2021"), "")
	var withALPN int
	st.Pool.QueryRow(ctx, `SELECT count(*) FROM verification_results r JOIN verification_runs vr USING (run_id)
		WHERE vr.label = $1 AND r.port = 853 AND r.alpn IS NOT NULL AND r.cert_chain IS NOT NULL`, msum.Label).Scan(&withALPN)
	dbs, _ := filepath.Glob(filepath.Join(dir, "misc-dns-measurements-2021", "*.db"))
	var wantALPN int
	for _, p := range dbs {
		if fi, _ := os.Stat(p); fi.Size() > 0 {
			db := openRO(t, p)
			var n int
			if db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE name = 'q_versions'`).Scan(&n); n == 1 {
				db.QueryRow(`SELECT count(*) FROM q_versions`).Scan(&n)
				wantALPN += n
			}
			db.Close()
		}
	}
	if withALPN != wantALPN || wantALPN == 0 {
		t.Fatalf("misc: %d verified rows with ALPN and certificate, want %d", withALPN, wantALPN)
	}
}

func weekOf(t *testing.T, ddmmyyyy string) string {
	t.Helper()
	var d, m, y int
	fmt.Sscanf(ddmmyyyy, "%d-%d-%d", &d, &m, &y)
	tm := timeDate(y, m, d)
	yy, ww := tm.ISOWeek()
	return fmt.Sprintf("%04d-W%02d", yy, ww)
}

// TestImportNothing: a directory without a single record the importer knows (empty,
// laid out unlike the study's archives, or an empty SQLite file) is refused, importing
// and in a dry run, as a bad argument (exit code 2); no dataset of nothing is recorded.
func TestImportNothing(t *testing.T) {
	st := storetest.Open(t)
	before := tableCounts(t, st)
	empty := t.TempDir()
	wrong := t.TempDir()
	for name, content := range map[string]string{"README.md": "# notes\n", "results/scan.txt": "1.2.3.4\n", "empty.db": ""} {
		p := filepath.Join(wrong, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, dir := range []string{empty, wrong} {
		_, err := dataset.Import(context.Background(), st, dataset.Config{Dir: dir, Label: "nothing"})
		if !errors.Is(err, dataset.ErrNothingToImport) {
			t.Errorf("import %s: %v, want %v", dir, err, dataset.ErrNothingToImport)
		}
		_, err = dataset.Check(context.Background(), dataset.Config{Dir: dir, Label: "nothing"})
		if !errors.Is(err, dataset.ErrNothingToImport) {
			t.Errorf("dry run %s: %v, want %v", dir, err, dataset.ErrNothingToImport)
		}
		err = dataset.ImportCommand(context.Background(), nil, dataset.Config{DryRun: true}, []string{dir}, io.Discard)
		if code := cli.ExitCode(err); code != cli.ExitUsage {
			t.Errorf("dataset import --dry-run %s: exit %d (%v), want %d", dir, code, err, cli.ExitUsage)
		}
		t.Log(err)
	}
	if got := tableCounts(t, st); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Errorf("rows written: %v, before %v", got, before)
	}
}
