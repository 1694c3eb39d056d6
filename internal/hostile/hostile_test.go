package hostile_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/doqscan/doqscan/internal/hostile"
	"github.com/doqscan/doqscan/internal/measure/measuretest"
	"github.com/doqscan/doqscan/internal/testbed/population"
	"github.com/doqscan/doqscan/internal/testbed/simdns"
)

func TestBehavioursTable(t *testing.T) {
	if err := hostile.Behaviours.Check(); err != nil {
		t.Fatal(err)
	}
	if hostile.Behaviours.Has(hostile.None) {
		t.Error("None is in the table")
	}
	dup := append(hostile.Table{}, hostile.Behaviours...)
	dup = append(dup, hostile.Behaviours[0])
	if dup.Check() == nil {
		t.Error("Check accepts a behaviour listed twice")
	}
}

func TestSubsetCheck(t *testing.T) {
	all := hostile.Subset{Implements: hostile.Behaviours.Values()}
	if err := all.Check(); err != nil {
		t.Errorf("the whole table: %v", err)
	}
	rest := map[hostile.Behaviour]string{}
	for _, b := range hostile.Behaviours.Values()[1:] {
		rest[b] = "a reason"
	}
	first := hostile.Behaviours[0].Behaviour
	for name, s := range map[string]hostile.Subset{
		"empty":          {},
		"no reason":      {Implements: []hostile.Behaviour{first}, Omits: map[hostile.Behaviour]string{hostile.Behaviours[1].Behaviour: ""}},
		"not in table":   {Implements: append(hostile.Behaviours.Values(), "nice")},
		"twice":          {Implements: append(hostile.Behaviours.Values(), first)},
		"both":           {Implements: hostile.Behaviours.Values(), Omits: map[hostile.Behaviour]string{first: "a reason"}},
		"omits unlisted": {Implements: []hostile.Behaviour{first}, Omits: map[hostile.Behaviour]string{"nice": "a reason"}},
	} {
		if s.Check() == nil {
			t.Errorf("%s: Check passes", name)
		}
	}
	if err := (hostile.Subset{Implements: []hostile.Behaviour{first}, Omits: rest}).Check(); err != nil {
		t.Errorf("one implemented, the rest omitted with reasons: %v", err)
	}
}

// TestVocabulary: every server that acts out hostile behaviours declares its part of the
// one table, and gives a reason for each entry it leaves out (verify's test servers:
// TestServedHostile in internal/verify).
func TestVocabulary(t *testing.T) {
	for name, s := range map[string]hostile.Subset{
		"population.Hostile": population.Hostile,
		"simdns.Hostile":     simdns.Hostile,
		"measuretest.Served": measuretest.Served,
	} {
		if err := s.Check(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if got, want := measuretest.Served.Implements, slices.Concat(measuretest.Behaviors, measuretest.HTTPBehaviors); !slices.Equal(got, want) {
		t.Errorf("measuretest.Served.Implements %v, want Behaviors and HTTPBehaviors %v", got, want)
	}
	// simdns's hostile classes are its part of the table, each under the same name.
	var hostileClasses []simdns.Class
	for _, c := range simdns.Classes {
		switch c {
		case simdns.ClassAnswer, simdns.ClassRefused, simdns.ClassServfail:
		default:
			hostileClasses = append(hostileClasses, c)
		}
	}
	for _, b := range simdns.Hostile.Implements {
		if c, ok := simdns.HostileClass(b); !ok || !slices.Contains(hostileClasses, c) || string(c) != string(b) {
			t.Errorf("simdns acts out %s, class %q (%v) not in simdns.Classes under that name", b, c, ok)
		}
	}
	if len(hostileClasses) != len(simdns.Hostile.Implements) {
		t.Errorf("simdns hostile classes %v, simdns.Hostile %v", hostileClasses, simdns.Hostile.Implements)
	}
	// Every population kind the DNS side has a class for is acted out under its name.
	for _, b := range population.Hostile.Implements {
		if c, ok := simdns.HostileClass(b); ok && string(c) != string(b) {
			t.Errorf("population hostile=%s is simdns class %s", b, c)
		}
	}
}

// scanned are the packages that name hostile behaviours (relative to this package).
// Their non-test code must say hostile.X, never the bare string; so must verify's test
// servers (servers_test.go), where a server's name: is a test name, not a behaviour.
var scanned = []string{
	"../testbed/population", "../testbed/simdns", "../testbed/simquic", "../testbed/simserver",
	"../measure/measuretest", "../verify",
}

// TestNoSecondSpelling fails when a behaviour's name is written as a string literal
// outside the table, or a new name is made from a literal (hostile.Behaviour("x"), a
// hostile.Behaviour constant): a second list of the names starting to grow.
func TestNoSecondSpelling(t *testing.T) {
	names := map[string]bool{}
	for _, b := range hostile.Behaviours.Values() {
		names[string(b)] = true
	}
	var files int
	for _, dir := range scanned {
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			n := e.Name()
			if !strings.HasSuffix(n, ".go") || (strings.HasSuffix(n, "_test.go") && !(dir == "../verify" && n == "servers_test.go")) {
				continue
			}
			files++
			for _, hit := range literals(t, filepath.Join(dir, n), names) {
				t.Errorf("%s: a hostile behaviour spelt as a string literal; use its constant in package hostile", hit)
			}
		}
	}
	if files < len(scanned) {
		t.Fatalf("scanned %d files in %d packages", files, len(scanned))
	}
}

// literals returns the positions of string literals in file whose value is one of names
// (leaving out the values of name: fields, which are test names), and of literals made
// into a hostile.Behaviour outside package hostile.
func literals(t *testing.T, file string, names map[string]bool) []string {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	skip := map[ast.Expr]bool{}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.KeyValueExpr:
			if id, ok := n.Key.(*ast.Ident); ok && id.Name == "name" {
				skip[n.Value] = true
			}
		case *ast.CallExpr:
			if isBehaviourType(n.Fun) && len(n.Args) == 1 {
				if lit, ok := n.Args[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					out = append(out, fset.Position(lit.Pos()).String()+" hostile.Behaviour("+lit.Value+")")
					skip[lit] = true
				}
			}
		case *ast.ValueSpec:
			if isBehaviourType(n.Type) {
				for _, v := range n.Values {
					if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						out = append(out, fset.Position(lit.Pos()).String()+" hostile.Behaviour = "+lit.Value)
						skip[lit] = true
					}
				}
			}
		case *ast.BasicLit:
			if n.Kind != token.STRING || skip[n] {
				return true
			}
			if v, err := strconv.Unquote(n.Value); err == nil && names[v] {
				out = append(out, fset.Position(n.Pos()).String()+" "+n.Value)
			}
		}
		return true
	})
	return out
}

// isBehaviourType reports whether e is the type hostile.Behaviour.
func isBehaviourType(e ast.Expr) bool {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != "Behaviour" {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == "hostile"
}

// TestLiteralsFindsASpelling keeps TestNoSecondSpelling honest: the scanner finds a
// bare name, and leaves a test's name: alone.
func TestLiteralsFindsASpelling(t *testing.T) {
	src := "package x\nconst Stall = \"stall\"\nvar _ = struct{ name string }{name: \"garbage\"}\nvar _ = \"hostile=stall\"\n" +
		"const Slow hostile.Behaviour = \"slow\"\nvar _ = hostile.Behaviour(\"slower\")\n"
	file := filepath.Join(t.TempDir(), "x.go")
	if err := os.WriteFile(file, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	hits := literals(t, file, map[string]bool{"stall": true, "garbage": true})
	if len(hits) != 3 || !strings.Contains(hits[0], `"stall"`) || !strings.Contains(hits[1], `"slow"`) ||
		!strings.Contains(hits[2], `"slower"`) {
		t.Errorf("hits %q, want the const stall, the constant slow and the conversion slower", hits)
	}
}
