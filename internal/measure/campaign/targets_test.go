package campaign_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/listfile"
	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/measure/campaign"
	"github.com/doqscan/doqscan/internal/measure/measuretest"
	"github.com/doqscan/doqscan/internal/store"
	"github.com/doqscan/doqscan/internal/store/storetest"
)

// TestParseTargetsMergesDuplicates: a resolver on several lines is one target with the
// endpoints of all of them, each (protocol, port) once; what the rows cannot tell apart
// (two server names, two ALPNs on one DoQ port) is an error naming the line.
func TestParseTargetsMergesDuplicates(t *testing.T) {
	ts, err := campaign.ParseTargets(strings.NewReader(
		"198.19.0.7 doq=784/doq-i02\n198.19.0.8\n198.19.0.7 sni=dns.test doq=853\n::ffff:198.19.0.7 doq=784/doq-i02\n198.19.0.7\n"), "t.txt")
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 2 || ts[0].Addr.String() != "198.19.0.7" || ts[1].Addr.String() != "198.19.0.8" {
		t.Fatalf("got %+v, want 198.19.0.7 then 198.19.0.8", ts)
	}
	got := ts[0]
	if got.ServerName != "dns.test" {
		t.Errorf("server name %q, want dns.test", got.ServerName)
	}
	seen := map[string]int{}
	for _, ep := range got.Endpoints {
		seen[fmt.Sprintf("%s/%d", ep.Protocol, ep.Port)]++
	}
	// doq 784 (line 1) and 853 (line 3, and the default of line 5) + the defaults of the
	// five other protocols.
	if len(got.Endpoints) != 2+len(measure.Protocols)-1 || seen["doq/784"] != 1 || seen["doq/853"] != 1 || seen["doudp/53"] != 1 {
		t.Errorf("endpoints %+v", got.Endpoints)
	}
	for _, c := range []struct{ content, want string }{
		{"198.19.0.7 sni=a.test\n\n198.19.0.7 sni=b.test\n", "t.txt:3: "},
		{"198.19.0.7 doq=853/doq\n198.19.0.7 doq=853/doq-i02\n", "t.txt:2: "},
		{"198.19.0.7 doq=853/doq doq=853/doq-i02\n", "t.txt:1: "},
		{"198.19.0.7\n198.19.0.8 doudp=0\n", "t.txt:2: "},
		{"# a\n198.19.0.7\n" + strings.Repeat("x", 200<<10) + "\n", "t.txt:3: line longer than"},
	} {
		_, err := campaign.ParseTargets(strings.NewReader(c.content), "t.txt")
		var le *listfile.LineError
		if !errors.As(err, &le) || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%.60q: got %v, want a line error starting %q", c.content, err, c.want)
		}
	}
}

// TestDuplicateTargetLinesMeasuredOnce: four lines for one resolver in the targets file
// give one resolver measured once: the server sees as many queries as a resolver listed
// once, and the summary counts the rows that are stored.
func TestDuplicateTargetLinesMeasuredOnce(t *testing.T) {
	s := storetest.Open(t)
	once := measuretest.Start(t, measuretest.Config{Host: "127.0.0.31"})
	four := measuretest.Start(t, measuretest.Config{Host: "127.0.0.32"})
	measureListed(t, s, once, four, four, four, four)
	if once.Queries() == 0 || four.Queries() != once.Queries() {
		t.Errorf("queries: %d to the resolver listed 4 times, %d to the one listed once (want equal, > 0)", four.Queries(), once.Queries())
	}
	n := scanInts(t, s,
		`SELECT count(*) FROM measurements`,
		`SELECT count(*) FROM measurements WHERE address = '127.0.0.32'`,
		`SELECT (summary->>'measurement_rows')::int FROM campaigns`,
		`SELECT (summary->>'planned')::int FROM campaigns`,
		`SELECT (summary->>'resolvers_measured')::int FROM campaigns`)
	stored, storedFour, summaryRows, planned, measured := n[0], n[1], n[2], n[3], n[4]
	if stored == 0 || summaryRows != stored || storedFour*2 != stored || planned != 2 || measured != 2 {
		t.Errorf("summary: %d rows, %d planned, %d measured; stored %d rows (%d of the duplicated resolver); want rows = stored = 2 x %d, 2 planned and measured",
			summaryRows, planned, measured, stored, storedFour, storedFour)
	}
}

// measureListed writes a targets file with a DoUDP + DoTCP line for each server given (a
// server given n times is listed n times) and runs campaign.Command on it: a fresh round
// of vantage vp1 at hour.
func measureListed(t *testing.T, s *store.Store, servers ...*measuretest.Servers) {
	t.Helper()
	var lines strings.Builder
	for _, sv := range servers {
		fmt.Fprintf(&lines, "%s doudp=%d dotcp=%d\n", sv.UDP.Addr(), sv.UDP.Port(), sv.TCP.Port())
	}
	file := filepath.Join(t.TempDir(), "targets.txt")
	if err := os.WriteFile(file, []byte(lines.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	o := campaign.Options{TargetsFile: file, Protocols: "doudp,dotcp", Modes: "fresh", KeyShares: "x25519", Variants: "GET", DBDeadline: campaign.DefaultDBDeadline}
	o.VantageID, o.Hour, o.Name, o.RTTSamples, o.Concurrency, o.Timeout, o.Persistent = "vp1", hour, "test.com", 1, 4, 2*time.Second, 5
	if err := o.Parse(); err != nil {
		t.Fatal(err)
	}
	if err := campaign.Rounds(context.Background(), s, o, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
}

// scanInts runs each query (one integer each) and returns the integers in order.
func scanInts(t *testing.T, s *store.Store, queries ...string) []int {
	t.Helper()
	out := make([]int, len(queries))
	for i, q := range queries {
		if err := s.Pool.QueryRow(context.Background(), q).Scan(&out[i]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// FuzzParseTargets: any input gives targets with distinct, unmapped addresses, each
// endpoint (protocol, port) once with a non-zero port, or an error naming a line.
func FuzzParseTargets(f *testing.F) {
	f.Add("198.19.0.7 doq=784/doq-i02 sni=dns.test\n198.19.0.7 doq=853\n::1 doudp=53\n")
	f.Fuzz(func(t *testing.T, s string) {
		ts, err := campaign.ParseTargets(strings.NewReader(s), "f")
		if err != nil {
			var le *listfile.LineError
			if !errors.As(err, &le) || le.Line < 1 {
				t.Fatalf("error without a line: %v", err)
			}
			return
		}
		addrs := map[string]bool{}
		for _, tg := range ts {
			if !tg.Addr.IsValid() || tg.Addr.Is4In6() || addrs[tg.Addr.String()] {
				t.Fatalf("bad or repeated address %v from %q", tg.Addr, s)
			}
			addrs[tg.Addr.String()] = true
			eps := map[string]bool{}
			for _, ep := range tg.Endpoints {
				k := fmt.Sprintf("%s/%d", ep.Protocol, ep.Port)
				if ep.Port == 0 || eps[k] {
					t.Fatalf("bad or repeated endpoint %s of %v from %q", k, tg.Addr, s)
				}
				eps[k] = true
			}
		}
	})
}
