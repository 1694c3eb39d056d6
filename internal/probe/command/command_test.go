package command

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/doqscan/doqscan/internal/cli"
)

// TestRefusals: the scan refuses to start without targets, with a testbed prefix
// outside the lab ranges, with a QUIC version servers accept, or with shards and no seed
// (exit code 2), before touching the database or the network.
func TestRefusals(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, args := range [][]string{
		{"scan", "--vantage", "x"},
		{"scan", "--vantage", "x", "--testbed", "10.0.0.0/8", "--version", "v1"},
		{"scan", "--vantage", "x", "--targets", "198.19.0.0/16", "--version", "v1"},
		{"scan", "--vantage", "x", "--targets", "198.19.0.0/16", "--shards", "2"},
		{"scan", "--vantage", "x", "--targets", "198.19.0.0/16", "--dcid", "short"},
		{"scan", "--targets", "198.19.0.0/16"},
		{"send", "--vantage", "x"},
		{"nonsense"},
		{},
	} {
		if code := cli.ExitCode(Run(context.Background(), log, args)); code != cli.ExitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, cli.ExitUsage)
		}
	}
}
