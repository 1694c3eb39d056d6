// Package testsupport holds helpers shared by tests of several packages: building the
// project's commands (cmd/<name>) from this tree for tests that run them as processes,
// and counting the datagrams a target receives.
package testsupport

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// Root is the repository's root directory (where go.mod is), found from this file's
// place in the tree, so it does not depend on the test's working directory.
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Build builds cmd/<name> for each name into dir (dir/<name>), in one go build: the
// packages they share are compiled once and the links run in parallel (one go build per
// command took 41 s for the twelve commands on a loaded 2-core machine, one for all 17 s).
// The error names the commands and holds the compiler's output.
func Build(dir string, names ...string) error {
	if len(names) == 0 {
		return nil
	}
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	for _, name := range names {
		args = append(args, "./cmd/"+name)
	}
	b := exec.Command("go", args...)
	b.Dir = Root()
	if out, err := b.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s: %w\n%s", strings.Join(names, ", "), err, out)
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

// Shared is a set of commands built once per test process, for the tests of a package
// that run the same commands (NewShared at package level; Dir in each test; Remove in
// TestMain after m.Run, the binaries are not in a test's temporary directory).
type Shared struct {
	names []string
	once  sync.Once
	dir   string
	err   error
}

// NewShared is the commands cmd/<name> for each name, built on the first Dir.
func NewShared(names ...string) *Shared { return &Shared{names: names} }

// Dir builds the commands the first time (a failed build fails every test that asks)
// and returns their directory.
func (s *Shared) Dir(t testing.TB) string {
	t.Helper()
	s.once.Do(func() {
		if s.dir, s.err = os.MkdirTemp("", "doqscan-test-bin"); s.err == nil {
			s.err = Build(s.dir, s.names...)
		}
	})
	if s.err != nil {
		t.Fatal(s.err)
	}
	return s.dir
}

// Remove deletes the built commands (nothing when none were built in this process).
func (s *Shared) Remove() {
	if s.dir != "" {
		os.RemoveAll(s.dir)
	}
}
