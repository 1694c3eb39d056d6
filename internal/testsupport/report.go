package testsupport

import (
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// ReportPython returns the python of the project's .venv; without the .venv or the
// report's packages in it the test skips, saying so after checked (what the test has
// checked by then, or "") and what could not be executed. The analysis package comes
// from the .venv's installation (./dev install: editable, from this checkout's
// analysis/), not from PYTHONPATH; a .venv whose package is another checkout's fails
// the test (it would run that checkout's code).
func ReportPython(t testing.TB, checked, what string) string {
	t.Helper()
	python := filepath.Join(Root(), ".venv", "bin", "python")
	if _, err := os.Stat(python); err != nil {
		t.Skip("SKIP: " + checked + "no .venv (./dev install creates it): cannot execute the " + what)
	}
	cmd := exec.Command(python, "-c", "import papermill, nbconvert, pandas, psycopg, matplotlib, doqscan_analysis; "+
		"print(doqscan_analysis.__file__)")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Skipf("SKIP: %s.venv lacks the report's packages (./dev install): %v\n%s", checked, err, Tail(stderr.String(), 5))
	}
	pkg, _ := filepath.EvalSymlinks(filepath.Dir(strings.TrimSpace(string(out))))
	want, _ := filepath.EvalSymlinks(filepath.Join(Root(), "analysis", "doqscan_analysis"))
	if pkg != want {
		t.Fatalf("%s imports doqscan_analysis from %s, not this checkout's %s: run ./dev install", python, pkg, want)
	}
	return python
}

// ReportSummary is the report's summary.json.
type ReportSummary struct {
	Notebooks map[string]struct {
		Seconds float64 `json:"seconds"`
		Error   *string `json:"error"`
	} `json:"notebooks"`
	Figures []string `json:"figures"`
	OK      bool     `json:"ok"`
}

// RunReport runs the report (python -m doqscan_analysis.report, as ./dev report does)
// with python against the database at url, writing under out, with args added; a
// report that fails, or that writes other than one summary.json, fails the test. It
// returns the report's folder (where summary.json is) and the summary.
func RunReport(t testing.TB, python, url, out string, args ...string) (string, ReportSummary) {
	t.Helper()
	cmd := exec.Command(python, append([]string{"-m", "doqscan_analysis.report", "--db", url, "--out", out}, args...)...)
	cmd.Dir = Root()
	if o, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("report: %v\n%s", err, Tail(string(o), 40))
	}
	found, _ := filepath.Glob(filepath.Join(out, "*", "summary.json"))
	if len(found) != 1 {
		t.Fatalf("the report wrote %d summary.json files under %s, want 1", len(found), out)
	}
	raw, err := os.ReadFile(found[0])
	if err != nil {
		t.Fatal(err)
	}
	var s ReportSummary
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatalf("summary.json: %v", err)
	}
	return filepath.Dir(found[0]), s
}

// Cell is the number in a cell of the report's CSV tables, NaN for an empty cell.
func Cell(s string) (float64, error) {
	if s == "" {
		return math.NaN(), nil
	}
	return strconv.ParseFloat(s, 64)
}

// Tail returns the last n lines of s.
func Tail(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
