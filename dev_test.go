package doqscan_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDevTestRunsEveryStep: `./dev test` runs every step whatever an earlier one did (a
// flaky test in the race step once ended the run there, and no later step ran), prints
// each step's result and time at the end, and exits non-zero when any step failed.
//
// The real steps take an hour, so the script runs with stand-ins: it is sourced without
// its final dispatch, in a directory whose bin/ holds a `go` that records its arguments
// and fails `go test -race` (bin/ comes first on the script's PATH), a .venv/bin/ruff
// that fails (a command in the middle of the lint step's function: the step fails,
// though bash ignores errexit inside a function called as a condition), a
// .venv/bin/python and bin/golangci-lint that record and succeed, and install_all
// replaced (nothing is installed).
func TestDevTestRunsEveryStep(t *testing.T) {
	dev, err := filepath.Abs("dev")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash is not installed (the dev script needs it)")
	}
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls.log")
	stub := func(path, body string) {
		p := filepath.Join(dir, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("#!/bin/sh\necho \"$(basename \"$0\") $*\" >> "+calls+"\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	stub("bin/go", `case "$1 $2" in "test -race") echo "--- FAIL: TestAnalyzeNormal (a flaky timing test)"; exit 1 ;; esac
exit 0
`)
	stub("bin/golangci-lint", "exit 0\n")
	stub(".venv/bin/ruff", "echo 'ruff: E999 a finding'; exit 1\n") // a check failing in the middle of a step's function
	stub(".venv/bin/python", "exit 0\n")
	if err := os.MkdirAll(filepath.Join(dir, "tools", "lint"), 0o755); err != nil {
		t.Fatal(err)
	}
	script := `set -euo pipefail
source <(sed '/^case "${1:-}" in/,$d' "` + dev + `")
install_all() { echo "install_all" >> "` + calls + `"; }
run_tests
`
	cmd := exec.Command("bash", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=")
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err == nil {
		t.Error("./dev test exited 0 although a step failed")
	}
	got, _ := os.ReadFile(calls)
	for _, want := range []string{"install_all", "go mod tidy -diff", "ruff check", "go vet ./...",
		"go test -race", "go test -p 1 -count=1", "python -m pytest"} {
		if !strings.Contains(string(got), want) {
			t.Errorf("step %q did not run; the steps run:\n%s", want, got)
		}
	}
	// The summary: one line per step with its time, the failed one marked, and a count.
	for _, re := range []string{`(?m)^FAILED +\d+s  go test -race .*\(exit 1\)$`, `(?m)^FAILED +\d+s  lint .*\(exit 1\)$`,
		`(?m)^ok +\d+s  go vet$`, `(?m)^ok +\d+s  pytest`, `(?m)^ok +\d+s  go test \(unit`, `2 of 6 steps failed: lint .*;go test -race`} {
		if !regexp.MustCompile(re).Match(out) {
			t.Errorf("summary lacks %s", re)
		}
	}
}
