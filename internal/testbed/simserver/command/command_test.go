package command

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/cli/clitest"
	"github.com/doqscan/doqscan/internal/testbed/population"
)

// TestMainExitCodes: the dispatch and the file-writing subcommands, run in-process.
func TestMainExitCodes(t *testing.T) {
	dir := t.TempDir()
	pop := filepath.Join(dir, "population.txt")
	for _, tc := range []struct {
		args []string
		want int
	}{
		{nil, cli.ExitUsage},
		{[]string{"bogus"}, cli.ExitUsage},
		{[]string{"--help"}, cli.ExitOK},
		{[]string{"help", "serve"}, cli.ExitOK},
		{[]string{"help", "bogus"}, cli.ExitUsage},
		{[]string{"pki", "--bogus"}, cli.ExitUsage},
		{[]string{"population", "--seed", "3", "--out", pop}, cli.ExitOK},
		{[]string{"check", "--population", pop}, cli.ExitOK},
		{[]string{"check", "--population", filepath.Join(dir, "missing.txt")}, cli.ExitEnvironment},
		{[]string{"geodb", "--population", pop, "--out", filepath.Join(dir, "geo"), "--build-time", "yesterday"}, cli.ExitUsage},
		{[]string{"pki", "--population", pop, "--out", filepath.Join(dir, "pki")}, cli.ExitOK},
		{[]string{"serve", "--population", pop, "--listen", "not-an-address"}, cli.ExitUsage},
	} {
		if got := Tool().RunMain(tc.args, io.Discard); got != tc.want {
			t.Errorf("simserver %q: exit %d, want %d", tc.args, got, tc.want)
		}
	}
	// The population written is the generator's for that seed, and parses.
	data, err := os.ReadFile(pop)
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != string(population.Generate(3)) {
		t.Error("population --seed 3 did not write the generator's output")
	}
	if _, err := population.Load(pop); err != nil {
		t.Error(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "pki", "roots.crt")); err != nil {
		t.Errorf("pki: %v", err)
	}
}

// TestHelp: simserver's help lists its subcommands; each has a help of its own.
func TestHelp(t *testing.T) {
	clitest.SubcommandHelp(t, Tool)
	if code, out := clitest.Run(t, Tool, "--help"); code != cli.ExitOK || out != "" {
		t.Errorf("--help: exit %d, stderr %q", code, out)
	}
}
