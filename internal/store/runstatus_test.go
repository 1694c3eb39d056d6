package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

func TestRunStatusTable(t *testing.T) {
	if err := RunStatuses.Check(); err != nil {
		t.Fatal(err)
	}
}

// TestRunStatusOf: the one rule scans, verification runs, campaigns and job runs use.
func TestRunStatusOf(t *testing.T) {
	live := context.Background()
	stopped, cancel := context.WithCancel(live)
	cancel()
	failure := errors.New("zmap exited with 1")
	for _, c := range []struct {
		name string
		ctx  context.Context
		err  error
		want RunStatus
	}{
		{"no error", live, nil, RunOK},
		{"no error after the stop: the work is complete", stopped, nil, RunOK},
		{"own failure", live, failure, RunFailed},
		{"failure while stopped: interrupted wins", stopped, failure, RunInterrupted},
		{"cancellation in the chain", live, fmt.Errorf("port 853: %w", context.Canceled), RunInterrupted},
		{"database gone away", live, fmt.Errorf("finish: %w", ErrUnavailable), RunInterrupted},
		{"failure joined with a cancellation: interrupted wins", live, errors.Join(failure, context.Canceled), RunInterrupted},
		{"a deadline of an inner step is a failure", live, fmt.Errorf("query: %w", context.DeadlineExceeded), RunFailed},
		{"text that says canceled is not a cancellation", live, errors.New("context canceled"), RunFailed},
	} {
		if got := RunStatusOf(c.ctx, c.err); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
		if !RunStatuses.Has(RunStatusOf(c.ctx, c.err)) {
			t.Errorf("%s: status not in the table", c.name)
		}
	}
}
