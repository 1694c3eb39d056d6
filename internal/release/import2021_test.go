package release_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/parquet/file"

	"github.com/doqscan/doqscan/internal/dataset"
	"github.com/doqscan/doqscan/internal/datasets"
	"github.com/doqscan/doqscan/internal/release/manifest"
	"github.com/doqscan/doqscan/internal/store/storetest"
)

// weeklySQL counts each imported table's rows per ISO week as the database holds them.
var weeklySQL = map[string]string{
	"scans":                 `SELECT iso_week, count(*) FROM scans GROUP BY 1`,
	"scan_replies":          `SELECT s.iso_week, count(*) FROM scan_replies r JOIN scans s USING (scan_id) GROUP BY 1`,
	"verification_runs":     `SELECT iso_week, count(*) FROM verification_runs GROUP BY 1`,
	"verification_results":  `SELECT v.iso_week, count(*) FROM verification_results r JOIN verification_runs v USING (run_id) GROUP BY 1`,
	"observed_certificates": `SELECT iso_week, count(*) FROM observed_certificates GROUP BY 1`,
	"campaigns":             `SELECT to_char(round_hour AT TIME ZONE 'UTC', 'IYYY-"W"IW'), count(*) FROM campaigns GROUP BY 1`,
	"measurements": `SELECT to_char(c.round_hour AT TIME ZONE 'UTC', 'IYYY-"W"IW'), count(*)
	                   FROM measurements m JOIN campaigns c USING (campaign_id) GROUP BY 1`,
	"resolver_features": `SELECT to_char(c.round_hour AT TIME ZONE 'UTC', 'IYYY-"W"IW'), count(*)
	                        FROM resolver_features f JOIN campaigns c USING (campaign_id) GROUP BY 1`,
}

// TestImported2021WeeksExport: the PAM 2022 study's published files, imported, export
// week by week with the same number of rows per week and table as the imported tables
// hold (counted from the Parquet files' footers, not from the export's own counters).
// The committed excerpt always; the whole 2021 data set when ../shared/datasets has it.
func TestImported2021WeeksExport(t *testing.T) {
	dirs := map[string][]string{"excerpt": {"../dataset/testdata/pam2022-excerpt"}}
	if p, err := datasets.Path("dns-analysis-2021"); err == nil {
		misc, _ := datasets.Path("misc-dns-measurements-2021")
		dirs["dns-analysis-2021"] = []string{p, misc}
	} else {
		t.Logf("the whole 2021 data set is not here (%v): the excerpt only", err)
	}
	for name, ds := range dirs {
		t.Run(name, func(t *testing.T) {
			st := storetest.Open(t)
			ctx := context.Background()
			for _, d := range ds {
				if d == "" {
					continue
				}
				if _, err := dataset.Import(ctx, st, dataset.Config{Dir: d, Log: quiet}); err != nil {
					t.Fatalf("import %s: %v", d, err)
				}
			}
			dir := t.TempDir()
			export(t, st, dir, false)
			m, err := manifest.Read(dir)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]map[string]int64{} // table -> week -> rows in the files
			for _, fs := range m.FileSets {
				if fs.Vantage != dataset.DefaultVantage {
					t.Errorf("file set of vantage %q: the import stores under %q", fs.Vantage, dataset.DefaultVantage)
				}
				for _, f := range fs.Files {
					if filepath.Ext(f.Path) != ".parquet" {
						continue
					}
					rdr, err := file.OpenParquetFile(filepath.Join(dir, f.Path), false)
					if err != nil {
						t.Fatal(err)
					}
					if got[f.Table] == nil {
						got[f.Table] = map[string]int64{}
					}
					got[f.Table][fs.ISOWeek] += rdr.NumRows()
					rdr.Close()
				}
			}
			total := int64(0)
			for table, q := range weeklySQL {
				want := storetest.QueryMap[string, int64](t, st, q)
				for week, n := range want {
					total += n
					if got[table][week] != n {
						t.Errorf("%s %s: %d rows exported, %d imported", table, week, got[table][week], n)
					}
				}
				for week, n := range got[table] {
					if _, ok := want[week]; !ok && n != 0 {
						t.Errorf("%s %s: %d rows exported, none imported", table, week, n)
					}
				}
			}
			if len(m.FileSets) == 0 || total == 0 {
				t.Fatalf("nothing imported (%d file sets): the test no longer tells", len(m.FileSets))
			}
			t.Logf("%d weeks, %d rows compared", len(m.FileSets), total)
		})
	}
}
