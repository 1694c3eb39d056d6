// Package testsupport holds helpers shared by tests of several packages: building the
// project's commands (cmd/<name>) from this tree for tests that run them as processes,
// and counting the datagrams a target receives.
package testsupport

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// Root is the repository's root directory (where go.mod is), found from this file's
// place in the tree, so it does not depend on the test's working directory.
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Build builds cmd/<name> for each name into dir (dir/<name>). The error names the
// command and holds the compiler's output.
func Build(dir string, names ...string) error {
	for _, name := range names {
		b := exec.Command("go", "build", "-o", filepath.Join(dir, name), "./cmd/"+name)
		b.Dir = Root()
		if out, err := b.CombinedOutput(); err != nil {
			return fmt.Errorf("build %s: %w\n%s", name, err, out)
		}
	}
	return nil
}

// Commands builds cmd/<name> for each name into a temporary directory of t and returns
// the directory; a build that fails fails the test.
func Commands(t testing.TB, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	if err := Build(dir, names...); err != nil {
		t.Fatal(err)
	}
	return dir
}
