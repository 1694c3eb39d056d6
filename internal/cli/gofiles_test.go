package cli_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// productGoFiles parses every non-test Go file of the module under dir (a path from the
// repository root root; "." for all of it) and calls fn with the file's path from root.
// Build and tool output, testdata, other modules and the directories skip names (paths
// from root; nil: none) are left out.
func productGoFiles(t *testing.T, root, dir string, skip func(rel string) bool, fn func(rel string, fset *token.FileSet, f *ast.File)) {
	t.Helper()
	fset := token.NewFileSet()
	err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "vendor", "testdata", "node_modules", ".venv", "var", "bin":
				return filepath.SkipDir
			}
			if rel != "." && (fileExists(filepath.Join(path, "go.mod")) || (skip != nil && skip(rel))) {
				return filepath.SkipDir // another module (tools/lint, testbed/tools/...), or skipped
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		fn(rel, fset, f)
		return nil
	})
	if err != nil {
		t.Fatalf("read %s: %v", dir, err)
	}
}
