package cli_test

import (
	"cmp"
	"fmt"
	"go/ast"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// maxFuncLines is the longest function (from `func` to its closing brace, doc comment
// not counted) the packages in sizedPackages may hold.
const maxFuncLines = 100

// sizedPackages are the directories (with their sub-packages, testdata/ left out) whose
// non-test functions are held to maxFuncLines, relative to the repository root.
var sizedPackages = []string{"internal/probe", "internal/dataset"}

// longFuncs are the functions of sizedPackages still longer than maxFuncLines, with the
// reason; an entry is removed when its function is split.
var longFuncs = map[string]string{}

// funcLength is one function declaration and its length in lines.
type funcLength struct {
	key   string // <path from the repository root> <[Receiver.]Name>
	lines int
}

// funcLengths lists every function declared in the non-test Go files under dir (a
// path from the repository root; testdata/ is skipped).
func funcLengths(t *testing.T, root, dir string) []funcLength {
	t.Helper()
	var out []funcLength
	productGoFiles(t, root, dir, nil, func(rel string, fset *token.FileSet, f *ast.File) {
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok {
				continue
			}
			n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
			out = append(out, funcLength{key: filepath.ToSlash(rel) + " " + funcName(fd), lines: n})
		}
	})
	return out
}

// funcName is a declaration's name, with its receiver's type for a method (plan.write).
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	typ := fd.Recv.List[0].Type
	if star, ok := typ.(*ast.StarExpr); ok {
		typ = star.X
	}
	switch x := typ.(type) {
	case *ast.IndexExpr: // a generic receiver: T[P]
		typ = x.X
	case *ast.IndexListExpr:
		typ = x.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name + "." + fd.Name.Name
	}
	return fd.Name.Name
}

// TestFunctionSize: no function of the packages in sizedPackages (test files aside)
// is longer than maxFuncLines, so their stage drivers stay split into steps a reader
// can follow. It lists every offender, longest first.
func TestFunctionSize(t *testing.T) {
	const root = "../.."
	var long []funcLength
	seen := map[string]bool{}
	for _, dir := range sizedPackages {
		for _, fl := range funcLengths(t, root, dir) {
			seen[fl.key] = true
			_, excepted := longFuncs[fl.key]
			switch {
			case fl.lines > maxFuncLines && !excepted:
				long = append(long, fl)
			case fl.lines <= maxFuncLines && excepted:
				t.Errorf("%s is %d lines now: remove it from longFuncs", fl.key, fl.lines)
			}
		}
	}
	for key := range longFuncs {
		if !seen[key] {
			t.Errorf("longFuncs names %s, which does not exist: remove it", key)
		}
	}
	if len(long) == 0 {
		return
	}
	slices.SortFunc(long, func(a, b funcLength) int { return cmp.Or(b.lines-a.lines, strings.Compare(a.key, b.key)) })
	var msg strings.Builder
	for _, fl := range long {
		fmt.Fprintf(&msg, "\n  %4d lines  %s", fl.lines, fl.key)
	}
	t.Errorf("%d functions longer than %d lines: split them into named steps%s", len(long), maxFuncLines, msg.String())
}
