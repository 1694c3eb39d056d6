package command

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/cli/clitest"
	"github.com/doqscan/doqscan/internal/listfile/listfiletest"
	"github.com/doqscan/doqscan/internal/optout/pace"
	"github.com/doqscan/doqscan/internal/store/storetest"
)

// TestRefusals: the scan refuses to start without targets, with a testbed prefix
// outside the lab ranges, with a QUIC version servers accept, or with shards and no seed
// (exit code 2), before touching the database or the network.
func TestRefusals(t *testing.T) {
	for _, args := range [][]string{
		{"scan", "--vantage", "x"},
		{"scan", "--vantage", "x", "--testbed", "10.0.0.0/8", "--probe-version", "v1"},
		{"scan", "--vantage", "x", "--targets", "198.19.0.0/16", "--probe-version", "v1"},
		{"scan", "--vantage", "x", "--targets", "198.19.0.0/16", "--shards", "2"},
		{"scan", "--vantage", "x", "--targets", "198.19.0.0/16", "--dcid", "short"},
		{"scan", "--vantage", "", "--targets", "198.19.0.0/16"},
		{"send", "--vantage", "x"},
		{"nonsense"},
		{},
	} {
		if code, stderr, _ := zprobe(args...); code != cli.ExitUsage {
			t.Errorf("%v: exit %d (%s), want %d", args, code, stderr, cli.ExitUsage)
		}
	}
}

// TestFlagErrors: shards, rates and target files are checked before the database or the
// network is touched, with the exit code of the mistake: 2 for a bad value, 5 for a
// missing file.
func TestFlagErrors(t *testing.T) {
	empty := tempFile(t, "empty.conf", "# no targets here\n", 0o644)
	hitlist := tempFile(t, "hitlist.txt", "198.19.0.1\n", 0o644)
	scan := []string{"scan", "--vantage", "x", "--testbed", "198.19.0.0/16", "--seed", "1"}
	// A zmap whose --version names no release (a development build): refused before
	// anything else.
	fifo := listfiletest.FIFO(t, t.TempDir(), "fifo.csv")
	devZmap := tempFile(t, "zmap", "#!/bin/sh\necho 'zmap Development Build. Commit 8de8833 - Mon Oct 6'\n", 0o755)
	for _, c := range []struct {
		args []string
		code int
	}{
		{append(scan, "--shards", "2", "--shard", "5"), cli.ExitUsage},
		{append(scan, "--shards", "2", "--shard", "2"), cli.ExitUsage},
		{append(scan, "--shards", "2", "--shard", "-1"), cli.ExitUsage},
		{append(scan, "--shards", "0"), cli.ExitUsage},
		{append(scan, "--rate", "0"), cli.ExitUsage},
		{append(scan, "--rate", "-1"), cli.ExitUsage},
		{append(scan, "--rate", "fast"), cli.ExitUsage},
		{append(scan, "--rate", "1000", "--bandwidth", "1G"), cli.ExitUsage},
		{append(scan, "--db-wait", "0s"), cli.ExitUsage},
		{append(scan, "--allowlist", empty), cli.ExitUsage},
		{append(scan, "--allowlist", "/nonexistent/allow.conf"), cli.ExitEnvironment},
		{append(scan, "--zmap", devZmap), cli.ExitEnvironment},
		{append(scan, "--zmap", "/nonexistent/zmap"), cli.ExitEnvironment},
		{[]string{"send", "--vantage", "x", "--testbed", "198.19.0.0/16", "--hitlist", hitlist, "--rate", "0"}, cli.ExitUsage},
		{[]string{"send", "--vantage", "x", "--testbed", "198.19.0.0/16", "--hitlist", "/nonexistent/hitlist.txt"}, cli.ExitEnvironment},
		{[]string{"blocklist", "--no-db", "--testbed", "198.19.0.0/16", "--allowlist", empty}, cli.ExitUsage},
		{[]string{"ingest", "/nonexistent.csv"}, cli.ExitEnvironment},
		// Files that are not regular files are refused at once (a FIFO's plain open
		// waited for a writer), by type: a missing prerequisite.
		{append(scan, "--allowlist", fifo), cli.ExitEnvironment},
		{[]string{"send", "--vantage", "x", "--testbed", "198.19.0.0/16", "--hitlist", fifo}, cli.ExitEnvironment},
		{[]string{"ingest", fifo}, cli.ExitEnvironment},
		{[]string{"send", "--vantage", "x", "--testbed", "198.19.0.0/16", "--hitlist", tempFile(t, "prefix.txt", "198.19.0.0/24\n", 0o644)}, cli.ExitUsage},
		// Numbers zmap or the database would wrap or read as "no limit" are refused
		// before anything runs: 2^32 packets/s reached zmap as -r 0; NaN probes/s sent
		// as fast as possible and was stored as rate_pps -2147483648.
		{append(scan, "--rate", "4294967296"), cli.ExitUsage},
		{append(scan, "--rate", "100000001"), cli.ExitUsage},
		{append(scan, "--rate", "1e6"), cli.ExitUsage},
		{append(scan, "--seed", "-1"), cli.ExitUsage},
		{append(scan, "--seed", "18446744073709551616"), cli.ExitUsage},
		{append(scan, "--shards", "256", "--shard", "1"), cli.ExitUsage},
		{append(scan, "--sender-threads", "0"), cli.ExitUsage},
		{append(scan, "--sender-threads", "4294967297"), cli.ExitUsage},
		{append(scan, "--probes-per-host", "0"), cli.ExitUsage},
		{append(scan, "--cooldown", "-1"), cli.ExitUsage},
		{append(scan, "--size", "1199"), cli.ExitUsage},
		{append(scan, "--size", "1473"), cli.ExitUsage},
		{[]string{"send", "--vantage", "x", "--testbed", "198.19.0.0/16", "--hitlist", hitlist, "--rate", "NaN"}, cli.ExitUsage},
		{[]string{"send", "--vantage", "x", "--testbed", "198.19.0.0/16", "--hitlist", hitlist, "--rate", "Inf"}, cli.ExitUsage},
		{[]string{"send", "--vantage", "x", "--testbed", "198.19.0.0/16", "--hitlist", hitlist, "--rate", "-1"}, cli.ExitUsage},
		{[]string{"send", "--vantage", "x", "--testbed", "198.19.0.0/16", "--hitlist", hitlist, "--rate", "3e9"}, cli.ExitUsage},
		{[]string{"send", "--vantage", "x", "--testbed", "198.19.0.0/16", "--hitlist", hitlist, "--cooldown", "0s"}, cli.ExitUsage},
	} {
		if code, stderr, _ := zprobe(c.args...); code != c.code {
			t.Errorf("%v: exit %d (%s), want %d", c.args, code, stderr, c.code)
		} else {
			t.Logf("%v: exit %d: %s", c.args[:1], code, stderr)
		}
	}
}

// TestSendPaceRefused: the built-in sender probes a hitlist in its order, so a rate above
// the page's per-/16 promise is refused (exit 2) for internet addresses before anything
// is opened or sent; the same rate inside the lab is allowed past that check.
func TestSendPaceRefused(t *testing.T) {
	hitlist := tempFile(t, "hitlist.txt", "# one internet address\n44.0.0.1\n", 0o644)
	allow := tempFile(t, "allow.conf", "44.0.0.0/16\n", 0o644)
	code, _, err := zprobe("send", "--vantage", "x", "--allowlist", allow, "--hitlist", hitlist, "--rate", "1000")
	if !errors.Is(err, pace.ErrPace) || code != cli.ExitUsage {
		t.Fatalf("send at 1000/s to an internet /16: %v (exit %d), want a pace error, exit 2", err, code)
	}
	t.Log(err)
}

// TestDeprecatedQnameAndBlocklistDir: --qname is a deprecated spelling of --query-name
// (it sets the same value, and a warning is logged); a missing blocklist directory is
// exit code 5, before the database or the network is touched.
func TestDeprecatedQnameAndBlocklistDir(t *testing.T) {
	scan := []string{"scan", "--testbed", "198.19.0.0/16"}
	code, stderr, err := zprobe(append(scan, "--qname", "a..b")...)
	if code != cli.ExitUsage || err == nil || !strings.Contains(err.Error(), "--query-name") || !strings.Contains(stderr, "deprecated flag") {
		t.Fatalf("--qname a..b: %v (exit %d), stderr %q; want exit 2 from --query-name and a deprecation warning", err, code, stderr)
	}
	missing := filepath.Join(t.TempDir(), "blocklist")
	for _, args := range [][]string{
		append(scan, "--blocklist-dir", missing),
		{"send", "--testbed", "198.19.0.0/16", "--hitlist", "/dev/null", "--blocklist-dir", missing},
		{"blocklist", "--no-db", "--blocklist-dir", missing},
	} {
		if code, stderr, _ := zprobe(args...); code != cli.ExitEnvironment || !strings.Contains(stderr, missing) {
			t.Errorf("%v: exit %d (%s), want %d naming %s", args, code, stderr, cli.ExitEnvironment, missing)
		}
	}
	t.Setenv("DOQSCAN_HOME", t.TempDir())
	if code, stderr, _ := zprobe(scan...); code != cli.ExitEnvironment {
		t.Errorf("DOQSCAN_HOME without blocklist/: exit %d (%s), want %d", code, stderr, cli.ExitEnvironment)
	}
}

// zprobe runs zprobe with args through its cli.Tool, as the binary does, and returns the
// exit code, stderr (errors and logs) and the error the subcommand's run returned (nil
// when it did not run: a flag refused while parsing).
func zprobe(args ...string) (int, string, error) {
	tl := Tool()
	var runErr error
	for i := range tl.Subcommands {
		flags := tl.Subcommands[i].Flags
		tl.Subcommands[i].Flags = func(fs *flag.FlagSet) cli.RunFunc {
			run := flags(fs)
			return func(ctx context.Context, log *slog.Logger, args []string) error {
				runErr = run(ctx, log, args)
				return runErr
			}
		}
	}
	var stderr strings.Builder
	code := tl.RunMain(args, &stderr)
	return code, stderr.String(), runErr
}

// tempFile writes body to a file of that name in a new temporary directory and returns
// its path.
func tempFile(t *testing.T, name, body string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestExitCodes runs zprobe's documented exit codes (docs/zprobe.md) that TestFlagErrors
// does not: 0, and 3 and 4 from the database (the blocklist subcommand reads the
// opt-outs from it).
func TestExitCodes(t *testing.T) {
	args := []string{"blocklist", "--testbed", "198.19.0.0/16"}
	for _, c := range []struct {
		why  string
		args []string
		url  string
		code int
	}{
		{"ok without the database", append(args, "--no-db"), "", cli.ExitOK},
		{"ok", args, storetest.NewDatabase(t), cli.ExitOK},
		{"database unavailable", args, clitest.NoDatabaseURL, cli.ExitDatabase},
		{"schema newer than the binary", args, storetest.NewerSchema(t), cli.ExitSchema},
	} {
		if c.url != "" {
			t.Setenv("DATABASE_URL", c.url)
		}
		if code, stderr, _ := zprobe(c.args...); code != c.code { // prints the blocklist on stdout
			t.Errorf("%s: %v: exit %d (%s), want %d", c.why, c.args, code, stderr, c.code)
		}
	}
}

// TestHelp: zprobe's help lists its subcommands; each subcommand's help is its own.
func TestHelp(t *testing.T) {
	clitest.Help(t, Tool, "zprobe [flags] scan|send|ingest|probes|blocklist", "Subcommands:", "blocklist  print the merged blocklist", "75 another run")
	clitest.SubcommandHelp(t, Tool)
}
