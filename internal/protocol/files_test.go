package protocol

import (
	"bufio"
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// probe is the protocol whose traces in the tree show where a protocol is decided: the
// last one added (DoH3), which every place that must know a protocol had to learn.
var probe = MustLookup(DoH3)

// newProtocolFiles are the files a new protocol touches outside the testbed, {name}
// standing for its name; docs/architecture.md's "new protocol" recipe lists the same.
// TestNewProtocolFiles holds the list to what the code does today.
var newProtocolFiles = []struct{ path, why string }{
	{"internal/protocol/protocol.go", "its row of the table: name, ports, transport, TLS, ALPNs, variants, modes, RTT transport, labels"},
	{"internal/measure/{name}.go", "its exchange (the client), one file per protocol"},
	{"internal/measure/measure.go", "its Protocol constant and its client in runners"},
	{"internal/measure/measuretest/servers.go", "a loopback server of it for the client's tests"},
	{"internal/store/migrations/NNNN_*.sql", "a new migration widening the protocol CHECKs (schema.sql is version 1 and stays)"},
	{"analysis/doqscan_analysis/names.py", "its name, label, colour and RTT transport for the analysis"},
	{"analysis/doqscan_analysis/plots.py", "its line style (PROTOCOL_STYLES; without one, solid)"},
	{"docs/measure.md", "what is measured over it and how"},
}

// notTouched are files that name protocols but are not edited for a new one, with why.
var notTouched = map[string]string{
	"schema.sql": "version 1 of the schema, never edited once data exists (internal/store/migrations/README.md): " +
		"a migration redefines its CHECKs (TestSchemaChecksMatchTheTable)",
	"analysis/doqscan_analysis/population.py": "reads testbed/population.txt, the simulated internet's grammar (the testbed)",
}

// outsideScope says which files the check leaves out: tests, the testbed and prose
// (Markdown).
func outsideScope(path string) bool {
	return strings.HasSuffix(path, "_test.go") || strings.HasSuffix(path, ".md") ||
		strings.HasPrefix(path, "internal/testbed/") || strings.HasPrefix(path, "testbed/") ||
		strings.HasPrefix(path, "analysis/tests/")
}

// A file decides something about protocols when, outside comments and prose, it
//
//   - names the probe protocol as a value: Go, its constant (an identifier equal to its
//     label, DoH3), a string literal that is exactly its name ("doh3") or SQL in a
//     literal that quotes it ('doh3'); SQL, Python and other text, the quoted name
//     ('doh3', "doh3"), or for shell and other scripts the bare word outside #
//     comments. A switch, a map, a CASE or a CHECK that knows it does this.
//   - or holds a list of every protocol: all the table's names as values (string
//     literals in Go, quoted in SQL and Python): a copy of the table.
//
// What the check cannot see is a place that should know a protocol and does not
// name it (a deliberate subset such as conncheck's DoQ, DoT, DoH): those are no copy
// of the table, and the tests of their stage cover them.
func decides(t *testing.T, path string, src []byte) []string {
	newest := probe
	var values []string // the protocol names the file uses as values
	var why []string
	ext := filepath.Ext(path)
	switch {
	case ext == ".go":
		f, err := parser.ParseFile(token.NewFileSet(), path, src, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.Ident:
				if n.Name == newest.Label {
					why = append(why, "identifier "+n.Name)
				}
			case *ast.BasicLit:
				if n.Kind != token.STRING {
					return true
				}
				s, err := strconv.Unquote(n.Value)
				if err != nil {
					return true
				}
				if s == newest.Name {
					why = append(why, "literal "+n.Value)
				}
				for _, q := range quoted.FindAllStringSubmatch(s, -1) { // SQL in Go
					if q[2] == newest.Name {
						why = append(why, "quoted "+q[0]+" in a literal")
					}
				}
				values = append(values, wordsOf(s)...)
			}
			return true
		})
	default:
		text := string(src)
		switch ext {
		case ".sql":
			text = sqlComment.ReplaceAllString(text, "")
		case ".py", ".sh", "", ".yml", ".yaml", ".toml", ".txt":
			text = hashComment.ReplaceAllString(text, "")
		}
		for _, q := range quoted.FindAllStringSubmatch(text, -1) {
			values = append(values, q[2])
			if q[2] == newest.Name {
				why = append(why, "quoted "+q[0])
			}
		}
		if ext != ".sql" && ext != ".py" && regexp.MustCompile(`\b`+newest.Name+`\b`).MatchString(text) {
			why = append(why, "word "+newest.Name)
		}
	}
	all := true
	for _, s := range Table {
		all = all && contains(values, s.Name)
	}
	if all {
		why = append(why, "every protocol's name")
	}
	return why
}

var (
	hashComment = regexp.MustCompile(`(?m)(^|\s)#[^\n]*`)
	quoted      = regexp.MustCompile(`(['"])([a-z0-9]+)(['"])`)
	word        = regexp.MustCompile(`[a-z0-9]+`)
)

func wordsOf(s string) []string { return word.FindAllString(s, -1) }

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// listed returns the entry of newProtocolFiles that path is, with {name} the probe
// protocol's name and NNNN a migration's version.
func listed(path string) (int, bool) {
	name := probe.Name
	for i, e := range newProtocolFiles {
		pat := strings.ReplaceAll(strings.ReplaceAll(e.path, "{name}", name), "NNNN", "[0-9][0-9][0-9][0-9]")
		if ok, _ := filepath.Match(pat, path); ok {
			return i, true
		}
	}
	return 0, false
}

// TestNewProtocolFiles checks newProtocolFiles against the tree, both ways: every
// tracked file outside the testbed, the tests and the docs' prose that decides
// something about protocols (decides) is in the list or in notTouched; every entry of
// the list is such a file today (docs/measure.md: names the probe protocol). And the
// list stays under ten files.
func TestNewProtocolFiles(t *testing.T) {
	if len(newProtocolFiles) >= 10 {
		t.Errorf("a new protocol touches %d files outside the testbed: want fewer than 10", len(newProtocolFiles))
	}
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("git not on PATH: cannot list the tracked files")
	}
	cmd := exec.Command(git, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Skipf("git ls-files: %v (not a git checkout)", err)
	}
	used := make([]bool, len(newProtocolFiles))
	for _, path := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if outsideScope(path) {
			if i, ok := listed(path); ok {
				used[i] = used[i] || strings.Contains(readFile(t, path), probe.Label)
			}
			continue
		}
		src, err := os.ReadFile(filepath.Join(root, path))
		if err != nil {
			if os.IsNotExist(err) {
				continue // deleted in the work tree, not yet in the index
			}
			t.Fatal(err)
		}
		if bytes.IndexByte(src[:min(len(src), 8000)], 0) >= 0 {
			continue // binary
		}
		why := decides(t, path, src)
		i, ok := listed(path)
		if len(why) > 0 {
			t.Logf("%s: %s", path, strings.Join(why, ", "))
			used[i] = used[i] || ok
		}
		if _, skip := notTouched[path]; len(why) == 0 || ok || skip {
			continue
		}
		t.Errorf("%s decides about protocols (%s) but is not in newProtocolFiles: read the table instead "+
			"(internal/protocol), or list it here and in docs/architecture.md", path, strings.Join(why, ", "))
	}
	for i, e := range newProtocolFiles {
		if !used[i] {
			t.Errorf("newProtocolFiles lists %s (%s), but no such file decides about %s today: drop it "+
				"from the list and from docs/architecture.md", e.path, e.why, probe.Name)
		}
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The recipe in docs/architecture.md names every file of newProtocolFiles.
func TestArchitectureRecipeListsTheFiles(t *testing.T) {
	doc := readFile(t, "docs/architecture.md")
	sc := bufio.NewScanner(strings.NewReader(doc))
	var recipe strings.Builder
	in := false
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, "A new measured protocol") {
			in = true
		} else if in && regexp.MustCompile(`^\d+\. `).MatchString(line) {
			break
		}
		if in {
			recipe.WriteString(line + "\n")
		}
	}
	if recipe.Len() == 0 {
		t.Fatal(`docs/architecture.md has no "A new measured protocol" item`)
	}
	for _, e := range newProtocolFiles {
		if !strings.Contains(recipe.String(), "`"+e.path+"`") {
			t.Errorf("docs/architecture.md's new-protocol recipe does not name `%s`", e.path)
		}
	}
}
