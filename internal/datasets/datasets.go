// Package datasets locates the external datasets of the original study (real
// measurements, README.md there) that tests read: $DOQSCAN_DATASETS, else
// ../shared/datasets beside the checkout (where CI puts them).
package datasets

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// EnvVar overrides where the datasets are.
const EnvVar = "DOQSCAN_DATASETS"

// ErrAbsent is returned when the datasets (or the part asked for) are not there.
var ErrAbsent = errors.New("datasets not found")

// Path returns the path of rel inside the datasets directory, which must exist.
func Path(rel string) (string, error) {
	dir := os.Getenv(EnvVar)
	if dir == "" {
		root, err := repoRoot()
		if err != nil {
			return "", fmt.Errorf("%w: %v (set %s)", ErrAbsent, err, EnvVar)
		}
		dir = filepath.Join(root, "..", "shared", "datasets")
	}
	p := filepath.Join(dir, rel)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%w: %v (set %s to the directory holding dns-analysis-2021/)", ErrAbsent, err, EnvVar)
	}
	return p, nil
}

// Require returns Path(rel), or skips the test saying why.
func Require(tb testing.TB, rel string) string {
	tb.Helper()
	p, err := Path(rel)
	if err != nil {
		tb.Skipf("SKIP: needs the study's datasets: %v", err)
	}
	return p
}

// repoRoot is the nearest directory above the working directory holding go.mod.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}
