package cli

import (
	"errors"
	"fmt"
	"testing"
)

// TestExitCodeIgnoresText: exit codes come from error types only. Errors whose text
// reads like a usage error, a refusal, a missing prerequisite, a database outage, a
// newer schema or an interruption, but carry no type, are a plain failure (exit 1).
func TestExitCodeIgnoresText(t *testing.T) {
	for _, text := range []string{
		"refusing 8.8.8.8: not a testbed address",
		"flag provided but not defined: -x",
		"bad flags: --rate out of range",
		"zmap not found: missing prerequisite",
		"database unavailable: connection refused",
		"database schema version 12 is newer than this binary",
		"context canceled",
		"interrupt received",
	} {
		for _, err := range []error{errors.New(text), fmt.Errorf("run: %s", text)} {
			if got := ExitCode(err); got != ExitFailure {
				t.Errorf("ExitCode(%q) = %d, want %d (text is not a type)", err, got, ExitFailure)
			}
		}
	}
}
