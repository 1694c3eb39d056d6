package cli_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// handDispatch are the files outside internal/cli that may still read the command line
// by hand, with the reason; an entry is removed when its file no longer does.
var handDispatch = map[string]string{
	// The testbed re-executes its caller's binary (cmd/testnet, or a test binary, which
	// has no main to dispatch from) as the delay line: a role chosen by the environment
	// before main runs, not a subcommand.
	"internal/testbed/child.go": "the delay line's re-executed role (DOQSCAN_TESTBED_CHILD)",
}

// TestNoHandDispatch: no Go file of cmd/ or internal/ (internal/cli aside, where
// cli.Tool dispatches subcommands) picks a subcommand from the command line by hand. A
// file does when it reads an element of os.Args beyond the program's name, or compares
// the first argument with something (a switch on it, or == / != against a name or a
// table's field): the first argument being os.Args[1], flag.Arg(0), fs.Arg(0),
// X.Args()[0], or element 0 of the function's []string parameter named args (what a run
// function gets), or of a variable assigned from X.Args() or from a slice of one of
// those. A comparison with a flag spelling ("--", "-h") is no dispatch; passing
// os.Args[1:] on whole (a re-execution) is none either.
func TestNoHandDispatch(t *testing.T) {
	root := "../.."
	files := 0
	for _, dir := range []string{"cmd", "internal"} {
		productGoFiles(t, root, dir, func(rel string) bool { return rel == filepath.Join("internal", "cli") },
			func(rel string, fset *token.FileSet, f *ast.File) {
				files++
				found := handDispatchIn(fset, f)
				_, excepted := handDispatch[filepath.ToSlash(rel)]
				switch {
				case len(found) > 0 && !excepted:
					t.Errorf("%s picks a subcommand by hand at %s: make the tool a cli.Tool (internal/cli/tool.go) with one cli.Subcommand each",
						rel, strings.Join(found, ", "))
				case len(found) == 0 && excepted:
					t.Errorf("%s no longer reads the command line by hand: remove it from handDispatch", rel)
				}
			})
	}
	if files < 100 {
		t.Fatalf("only %d Go files under cmd/ and internal/: is %s the project's root?", files, root)
	}
}

// handDispatchIn returns the positions (file:line) in f where the command line is read
// by hand (TestNoHandDispatch).
func handDispatchIn(fset *token.FileSet, f *ast.File) []string {
	var found []string
	at := func(n ast.Node) {
		p := fset.Position(n.Pos())
		found = append(found, filepath.Base(p.Filename)+":"+strconv.Itoa(p.Line))
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.IndexExpr:
			if isOSArgs(n.X) && !isIntLit(n.Index, 0) {
				at(n)
			}
		case *ast.FuncDecl:
			if n.Body != nil {
				checkFunc(n.Type, n.Body, at)
			}
			return true
		case *ast.FuncLit:
			checkFunc(n.Type, n.Body, at)
		}
		return true
	})
	slices.Sort(found)
	return slices.Compact(found)
}

// checkFunc reports the switches and comparisons of the first argument in a function's
// body (nested function literals are checked on their own, with their parameters).
func checkFunc(typ *ast.FuncType, body *ast.BlockStmt, at func(ast.Node)) {
	argv := map[string]bool{} // the function's argument lists
	for _, p := range typ.Params.List {
		if isStringSlice(p.Type) {
			for _, n := range p.Names {
				argv[n.Name] = n.Name == "args"
			}
		}
	}
	// Variables assigned from X.Args() or from a slice of an argument list.
	ast.Inspect(body, func(n ast.Node) bool {
		if _, ok := n.(*ast.FuncLit); ok {
			return false
		}
		as, ok := n.(*ast.AssignStmt)
		if !ok || len(as.Lhs) != len(as.Rhs) {
			return true
		}
		for i, r := range as.Rhs {
			if id, ok := as.Lhs[i].(*ast.Ident); ok && isArgList(r, argv) {
				argv[id.Name] = true
			}
		}
		return true
	})
	ast.Inspect(body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncLit:
			return false
		case *ast.SwitchStmt:
			if n.Tag != nil && isFirstArg(n.Tag, argv) {
				at(n)
			}
		case *ast.BinaryExpr:
			if n.Op != token.EQL && n.Op != token.NEQ {
				return true
			}
			for _, pair := range [][2]ast.Expr{{n.X, n.Y}, {n.Y, n.X}} {
				if isFirstArg(pair[0], argv) && !isFlagSpelling(pair[1]) {
					at(n)
				}
			}
		}
		return true
	})
}

// isFirstArg: e is the first argument of the command line or of an argument list.
func isFirstArg(e ast.Expr, argv map[string]bool) bool {
	e = ast.Unparen(e)
	switch e := e.(type) {
	case *ast.IndexExpr:
		if isOSArgs(e.X) {
			return isIntLit(e.Index, 1)
		}
		return isIntLit(e.Index, 0) && isArgList(e.X, argv)
	case *ast.CallExpr: // flag.Arg(0), fs.Arg(0)
		sel, ok := e.Fun.(*ast.SelectorExpr)
		return ok && sel.Sel.Name == "Arg" && len(e.Args) == 1 && isIntLit(e.Args[0], 0)
	}
	return false
}

// isArgList: e is an argument list: a []string parameter or a variable made from one, a
// call of X.Args(), os.Args, or a slice of one of those.
func isArgList(e ast.Expr, argv map[string]bool) bool {
	switch e := ast.Unparen(e).(type) {
	case *ast.Ident:
		return argv[e.Name]
	case *ast.CallExpr:
		sel, ok := e.Fun.(*ast.SelectorExpr)
		return ok && sel.Sel.Name == "Args" && len(e.Args) == 0
	case *ast.SliceExpr:
		return isArgList(e.X, argv)
	}
	return isOSArgs(e)
}

func isOSArgs(e ast.Expr) bool {
	sel, ok := ast.Unparen(e).(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != "Args" {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == "os"
}

func isStringSlice(e ast.Expr) bool {
	at, ok := e.(*ast.ArrayType)
	if !ok || at.Len != nil {
		return false
	}
	id, ok := at.Elt.(*ast.Ident)
	return ok && id.Name == "string"
}

func isIntLit(e ast.Expr, v int) bool {
	lit, ok := ast.Unparen(e).(*ast.BasicLit)
	return ok && lit.Kind == token.INT && lit.Value == strconv.Itoa(v)
}

// isFlagSpelling: e is a string literal that starts with "-" ("--", "-h").
func isFlagSpelling(e ast.Expr) bool {
	lit, ok := ast.Unparen(e).(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return false
	}
	s, err := strconv.Unquote(lit.Value)
	return err == nil && strings.HasPrefix(s, "-")
}

// TestHandDispatchDetector: the check of TestNoHandDispatch finds each way a subcommand
// was picked by hand in this repository before cli.Tool, and none of the reads of
// arguments that pick nothing.
func TestHandDispatchDetector(t *testing.T) {
	for _, c := range []struct {
		name, src string
		found     bool
	}{
		{"switch on a run function's args[0]", `func Run(ctx context.Context, args []string) error {
			switch args[0] { case "up": return nil }
			return nil }`, true},
		{"a table looked up by args[0]", `func Main(args []string) int {
			for _, s := range subs { if s.name == args[0] { return s.run(args[1:]) } }
			return 2 }`, true},
		{"args[0] compared in a function literal", `var run = func(ctx context.Context, log *slog.Logger, args []string) error {
			if len(args) > 0 && args[0] == "export" { return nil }
			return nil }`, true},
		{"os.Args[1]", `func init() { if os.Args[1] == "delayline" { os.Exit(0) } }`, true},
		{"flag.Arg(0)", `func main() { flag.Parse(); switch flag.Arg(0) { case "scan": } }`, true},
		{"fs.Args()[0]", `func run(fs *flag.FlagSet) { if fs.Args()[0] != "show" { return } }`, true},
		{"a variable made from fs.Args()", `func run(fs *flag.FlagSet) { rest := fs.Args()[1:]; switch rest[0] { case "set": } }`, true},
		{"a flag spelling", `func run(args []string) { if args[0] == "--" { args = args[1:] } }`, false},
		{"a positional argument used as a value", `func run(args []string) { dir := args[0]; _ = dir }`, false},
		{"os.Args passed on whole", `func reexec() { _ = exec.Command("x", os.Args[1:]...); _ = os.Args[0] }`, false},
		{"tokens of a file, not arguments", `func parse(toks []string) { switch toks[0] { case "format": } }`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, "x.go", "package x\n"+c.src, 0)
			if err != nil {
				t.Fatal(err)
			}
			if found := handDispatchIn(fset, f); (len(found) > 0) != c.found {
				t.Errorf("found %q, want found=%v", found, c.found)
			}
		})
	}
}
