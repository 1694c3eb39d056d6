package cli

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
)

// Results on standard output. A tool that measures targets prints one result per
// target: with --json one JSON object per line (zgrab2's and zdns's shape: snake_case
// keys, the target's address first), else a table for a person. Logs and progress go
// to standard error, never between the results.

// OutputFlags are --json and --no-store, one name each in every tool that stores its
// results in PostgreSQL by default (verify, measure).
type OutputFlags struct {
	JSON    bool // one JSON object per target on stdout
	NoStore bool // no database: results only on stdout
}

// Register adds --json and --no-store to fs; what names a target's result in the help
// ("target", "resolver").
func (o *OutputFlags) Register(fs *flag.FlagSet, what string) {
	RegisterJSON(fs, &o.JSON, what)
	fs.BoolVar(&o.NoStore, "no-store", false, "run without a database (no DATABASE_URL, no private cluster): the results go only to stdout, a table or --json")
}

// RegisterJSON adds --json to fs: one JSON object per what on stdout.
func RegisterJSON(fs *flag.FlagSet, p *bool, what string) {
	fs.BoolVar(p, "json", false, "print one JSON object per "+what+" on stdout (JSON lines), nothing else there")
}

// Terminal says whether w is a terminal (a character device): a table of every
// target's result is printed there even for a stored run.
func Terminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// JSONLines writes one JSON object per line; safe for concurrent use.
type JSONLines struct {
	mu  sync.Mutex
	enc *json.Encoder
}

// NewJSONLines returns a JSON-lines writer on w.
func NewJSONLines(w io.Writer) *JSONLines {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return &JSONLines{enc: enc}
}

// Write writes v as one line.
func (j *JSONLines) Write(v any) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.enc.Encode(v)
}

// Table writes aligned columns; rows are buffered until Flush. Safe for concurrent use.
type Table struct {
	mu sync.Mutex
	tw *tabwriter.Writer
	n  int
}

// NewTable returns a table on w with the header's columns.
func NewTable(w io.Writer, header ...string) *Table {
	t := &Table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	fmt.Fprintln(t.tw, strings.Join(header, "\t"))
	return t
}

// Row adds one row (tabs and line ends inside a cell become spaces).
func (t *Table) Row(cells ...string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, c := range cells {
		cells[i] = strings.NewReplacer("\t", " ", "\n", " ", "\r", " ").Replace(c)
	}
	fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
	t.n++
}

// Len is the number of rows added.
func (t *Table) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n
}

// Flush writes the rows.
func (t *Table) Flush() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.tw.Flush()
}

// Cut shortens s to at most n runes, marking a cut with "...".
func Cut(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:max(n-3, 0)]) + "..."
}

// CountsAttr is a log attribute of counts by name, one member each in name order
// ("outcomes.doq-verified=5" in text logs, {"outcomes":{"doq-verified":5}} in JSON).
func CountsAttr[K ~string](key string, counts map[K]int) slog.Attr {
	names := make([]string, 0, len(counts))
	for k := range counts {
		names = append(names, string(k))
	}
	slices.Sort(names)
	attrs := make([]any, 0, len(names))
	for _, n := range names {
		attrs = append(attrs, slog.Int(n, counts[K(n)]))
	}
	return slog.Group(key, attrs...)
}
