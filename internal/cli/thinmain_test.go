package cli_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// thickMains are the cmd/<tool>/main.go files that still hold logic of their own, with
// the reason; an entry is removed when its main is thin.
var thickMains = map[string]string{}

// TestMainsAreThin: every cmd/<tool>/main.go only binds flags to its stage's
// configuration and calls one run function: none of its functions (function literals
// included) has control flow (if, for, range, switch, select, go, defer), so the checks
// and the run live in a package that tests drive without a process.
func TestMainsAreThin(t *testing.T) {
	mains, err := filepath.Glob("../../cmd/*/main.go")
	if err != nil || len(mains) == 0 {
		t.Fatalf("no cmd/*/main.go found from %s (%v)", "../../cmd", err)
	}
	fset := token.NewFileSet()
	for _, path := range mains {
		tool := filepath.Base(filepath.Dir(path))
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		var logic []string
		ast.Inspect(f, func(n ast.Node) bool {
			switch n.(type) {
			case *ast.IfStmt, *ast.ForStmt, *ast.RangeStmt, *ast.SwitchStmt, *ast.TypeSwitchStmt,
				*ast.SelectStmt, *ast.GoStmt, *ast.DeferStmt:
				p := fset.Position(n.Pos())
				logic = append(logic, filepath.Base(p.Filename)+":"+strconv.Itoa(p.Line))
			}
			return true
		})
		_, excepted := thickMains[tool]
		switch {
		case len(logic) > 0 && !excepted:
			t.Errorf("cmd/%s/main.go has control flow at %s: move it behind the stage's Run (the main binds flags and calls one Run)",
				tool, strings.Join(logic, ", "))
		case len(logic) == 0 && excepted:
			t.Errorf("cmd/%s/main.go is thin now: remove it from thickMains", tool)
		}
	}
}
