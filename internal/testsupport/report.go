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
// checked by then, or "") and what could not be executed.
func ReportPython(t testing.TB, checked, what string) string {
	t.Helper()
	python := filepath.Join(Root(), ".venv", "bin", "python")
	if _, err := os.Stat(python); err != nil {
		t.Skip("SKIP: " + checked + "no .venv (./dev install creates it): cannot execute the " + what)
	}
	if out, err := exec.Command(python, "-c", "import papermill, nbconvert, pandas, psycopg, matplotlib").CombinedOutput(); err != nil {
		t.Skipf("SKIP: %s.venv lacks the report's packages (./dev install): %v\n%s", checked, err, Tail(string(out), 5))
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
	cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(Root(), "analysis"))
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
