package dnsbench

import (
	"errors"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/doqscan/doqscan/internal/dnsmsg"
	"github.com/doqscan/doqscan/internal/listfile"
)

func TestParseQueries(t *testing.T) {
	in := "; dnsperf comment\nexample.com A\nwww.example.org. AAAA # trailing\n\nnoType.net\nx.test txt\ny.test TYPE65\n"
	got, err := ParseQueries(strings.NewReader(in), "q.txt")
	if err != nil {
		t.Fatal(err)
	}
	want := []Question{{"example.com", dns.TypeA}, {"www.example.org.", dns.TypeAAAA},
		{"noType.net", dns.TypeA}, {"x.test", dns.TypeTXT}, {"y.test", 65}}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: %v, want %v", i, got[i], want[i])
		}
	}
}

func TestParseQueriesRejects(t *testing.T) {
	for _, c := range []struct {
		in, what string
		line     int
	}{
		{"a.com A\nb.com NOPE\n", "unknown query type", 2},
		{"a.com A extra\n", "fields", 1},
		{"bad..name A\n", "bad query name", 1},
		{"; only comments\n", "no queries", 1},
		{"x.com TYPE0\n", "unknown query type", 1},
		{strings.Repeat("a", 5000) + "\n", "longer", 1},
	} {
		_, err := ParseQueries(strings.NewReader(c.in), "q.txt")
		var le *listfile.LineError
		if !errors.As(err, &le) || le.Line != c.line || !strings.Contains(err.Error(), c.what) {
			t.Errorf("%q: %v, want a line-%d error about %q", c.in[:min(len(c.in), 30)], err, c.line, c.what)
		}
	}
}

func FuzzParseQueries(f *testing.F) {
	f.Add([]byte("example.com A\n; c\nfoo.bar AAAA\n"))
	f.Add([]byte("x TYPE65535\r\n\x00 A"))
	f.Fuzz(func(t *testing.T, b []byte) {
		qs, err := ParseQueries(strings.NewReader(string(b)), "fuzz")
		if err != nil {
			var le *listfile.LineError
			if !errors.As(err, &le) {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		for _, q := range qs {
			// Every accepted question must build into a query message.
			if _, err := dnsmsg.Build(dnsmsg.Query{Name: q.Name, Type: q.QType}); err != nil {
				t.Fatalf("accepted %+v does not build: %v", q, err)
			}
		}
	})
}
