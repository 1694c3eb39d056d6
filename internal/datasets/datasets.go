// Package datasets locates the external datasets of the original study (real
// measurements, README.md there) that tests read: $DOQSCAN_DATASETS, else
// ../shared/datasets beside the project home (internal/home: the checkout, where CI puts
// them).
package datasets

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/doqscan/doqscan/internal/home"
)

// EnvVar overrides where the datasets are.
const EnvVar = "DOQSCAN_DATASETS"

// ErrAbsent is returned when the datasets (or the part asked for) are not there.
var ErrAbsent = errors.New("datasets not found")

// Path returns the path of rel inside the datasets directory, which must exist.
func Path(rel string) (string, error) {
	dir := os.Getenv(EnvVar)
	if dir == "" {
		dir = filepath.Join(home.Dir(), "..", "shared", "datasets")
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
