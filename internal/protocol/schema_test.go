package protocol

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// root is the repository's top directory (tests run in the package's directory).
const root = "../.."

// A check is one column CHECK (col IN (...)) of a table, as the schema defines it after
// schema.sql and every migration: the last definition of a table's check wins.
type checkKey struct{ table, column string }

var (
	sqlComment  = regexp.MustCompile(`--[^\n]*`)
	stmtTable   = regexp.MustCompile(`(?is)^\s*(?:CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?|ALTER\s+TABLE\s+(?:IF\s+EXISTS\s+)?(?:ONLY\s+)?)(\w+)`)
	checkIn     = regexp.MustCompile(`(?is)CHECK\s*\(\s*(\w+)\s+IN\s*\(([^)]*)\)\s*\)`)
	quotedValue = regexp.MustCompile(`'([^']*)'`)
)

// schemaChecks reads schema.sql, then the migrations in version order, and returns the
// value list of every CHECK (column IN (...)) by table and column, the latest
// definition of each.
func schemaChecks(t *testing.T) map[checkKey][]string {
	t.Helper()
	files := []string{filepath.Join(root, "schema.sql")}
	migrations, err := filepath.Glob(filepath.Join(root, "internal/store/migrations/[0-9][0-9][0-9][0-9]_*.sql"))
	if err != nil || len(migrations) == 0 {
		t.Fatalf("migrations: %v (found %d)", err, len(migrations))
	}
	sort.Strings(migrations) // NNNN_: lexical order is version order
	files = append(files, migrations...)
	out := map[checkKey][]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, stmt := range strings.Split(sqlComment.ReplaceAllString(string(b), ""), ";") {
			m := stmtTable.FindStringSubmatch(stmt)
			if m == nil {
				continue
			}
			for _, c := range checkIn.FindAllStringSubmatch(stmt, -1) {
				var vals []string
				for _, q := range quotedValue.FindAllStringSubmatch(c[2], -1) {
					vals = append(vals, q[1])
				}
				out[checkKey{strings.ToLower(m[1]), strings.ToLower(c[1])}] = vals
			}
		}
	}
	return out
}

// Every table whose protocol column has a CHECK list allows exactly the table's
// protocols (measured rows), or is a named subset or another vocabulary; the session
// modes and RTT transports are the table's too. A new protocol without a migration
// widening these lists fails here, not at its first INSERT.
func TestSchemaChecksMatchTheTable(t *testing.T) {
	checks := schemaChecks(t)
	names := Names()
	sorted := func(s []string) []string { s = slices.Clone(s); slices.Sort(s); return s }
	// Tables of measured rows: every protocol of the table, no other.
	measuredRows := []string{"measurements", "resolver_features", "bench_runs"}
	// Tables that name protocols of their own, with why.
	others := map[string]string{
		"connection_policies":   "the connection-policy check's protocols (internal/measure/conncheck): a subset of the table",
		"observed_certificates": "an imported dataset's own vocabulary (tls, https, quic), not a measured protocol",
	}
	seen := 0
	for k, vals := range checks {
		if k.column != "protocol" {
			continue
		}
		seen++
		switch why, other := others[k.table]; {
		case slices.Contains(measuredRows, k.table):
			if !slices.Equal(sorted(vals), sorted(names)) {
				t.Errorf("%s.protocol CHECK %v, the protocol table %v: a migration must redefine the CHECK", k.table, vals, names)
			}
		case other && k.table == "connection_policies":
			for _, v := range vals {
				if !slices.Contains(names, v) {
					t.Errorf("%s.protocol allows %q, not a protocol of the table (%s)", k.table, v, why)
				}
			}
		case other:
		default:
			t.Errorf("table %s has a protocol CHECK %v: name it in this test's measured tables or others, with why", k.table, vals)
		}
	}
	for _, tbl := range measuredRows {
		if _, ok := checks[checkKey{tbl, "protocol"}]; !ok {
			t.Errorf("no protocol CHECK found for %s (the parser or the schema changed)", tbl)
		}
	}
	if seen < len(measuredRows) {
		t.Fatalf("found %d protocol CHECKs, want at least %d", seen, len(measuredRows))
	}
	for _, k := range []checkKey{{"measurements", "mode"}, {"bench_runs", "policy"}} {
		if got := checks[k]; !slices.Equal(sorted(got), sorted(Modes)) {
			t.Errorf("%s.%s CHECK %v, the table's modes %v", k.table, k.column, got, Modes)
		}
	}
	transports := checks[checkKey{"rtt_samples", "transport"}]
	for _, s := range Table {
		if !slices.Contains(transports, string(s.RTT)) {
			t.Errorf("%s: RTT transport %q not in rtt_samples.transport CHECK %v", s.Name, s.RTT, transports)
		}
	}
}
