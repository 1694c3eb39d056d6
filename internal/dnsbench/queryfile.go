package dnsbench

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/miekg/dns"

	"github.com/doqscan/doqscan/internal/dnsmsg"
	"github.com/doqscan/doqscan/internal/listfile"
)

// Question is one line of a query file: a name and a type.
type Question struct {
	Name  string
	QType uint16
}

// ErrNoQueries is a query file without a single query.
var ErrNoQueries = errors.New("no queries in the query file")

// ParseQueries reads a query file in dnsperf's format: one query per line, "NAME TYPE"
// (TYPE as in zone files, A when absent, TYPEnnn for numeric types); lines starting with
// ';' and the part after '#' are comments. name is the file's name in errors, which are
// *listfile.LineError at the bad line (exit code 2).
func ParseQueries(r io.Reader, name string) ([]Question, error) {
	var out []Question
	err := listfile.Scan(r, name, func(l listfile.Line) error {
		if strings.HasPrefix(l.Text, ";") {
			return nil
		}
		f := l.Fields()
		if len(f) > 2 {
			return fmt.Errorf("want NAME [TYPE], got %d fields", len(f))
		}
		q, err := parseQuestion(f)
		if err != nil {
			return err
		}
		out = append(out, q)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, &listfile.LineError{File: name, Line: 1, Err: ErrNoQueries}
	}
	return out, nil
}

func parseQuestion(f []string) (Question, error) {
	n := f[0]
	if _, ok := dns.IsDomainName(n); !ok || len(dns.Fqdn(n)) > 255 {
		return Question{}, fmt.Errorf("bad query name %q", n)
	}
	q := Question{Name: n, QType: dns.TypeA}
	if len(f) == 2 {
		t, err := parseType(f[1])
		if err != nil {
			return Question{}, err
		}
		q.QType = t
	}
	// What the clients will send must pack (escapes such as a trailing '\' pass
	// IsDomainName but not the packer).
	if _, err := dnsmsg.Build(dnsmsg.Query{Name: q.Name, Type: q.QType}); err != nil {
		return Question{}, fmt.Errorf("bad query name %q: %v", n, err)
	}
	return q, nil
}

func parseType(s string) (uint16, error) {
	u := strings.ToUpper(s)
	if t, ok := dns.StringToType[u]; ok && t != dns.TypeNone {
		return t, nil
	}
	if num, ok := strings.CutPrefix(u, "TYPE"); ok {
		if v, err := strconv.ParseUint(num, 10, 16); err == nil && v > 0 {
			return uint16(v), nil
		}
	}
	return 0, fmt.Errorf("unknown query type %q", s)
}
