package command

import (
	"context"
	"errors"
	"io"
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
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
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
		if code := cli.ExitCode(Run(context.Background(), log, args)); code != cli.ExitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, cli.ExitUsage)
		}
	}
}

// TestFlagErrors: shards, rates and target files are checked before the database or the
// network is touched, with the exit code of the mistake: 2 for a bad value, 5 for a
// missing file.
func TestFlagErrors(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
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
		err := Run(context.Background(), log, c.args)
		if code := cli.ExitCode(err); code != c.code {
			t.Errorf("%v: exit %d (%v), want %d", c.args, code, err, c.code)
		} else {
			t.Logf("%v: exit %d: %v", c.args[:1], code, err)
		}
	}
}

// TestSendPaceRefused: the built-in sender probes a hitlist in its order, so a rate above
// the page's per-/16 promise is refused (exit 2) for internet addresses before anything
// is opened or sent; the same rate inside the lab is allowed past that check.
func TestSendPaceRefused(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	hitlist := tempFile(t, "hitlist.txt", "# one internet address\n44.0.0.1\n", 0o644)
	allow := tempFile(t, "allow.conf", "44.0.0.0/16\n", 0o644)
	err := Run(context.Background(), log, []string{"send", "--vantage", "x", "--allowlist", allow, "--hitlist", hitlist, "--rate", "1000"})
	if !errors.Is(err, pace.ErrPace) || cli.ExitCode(err) != cli.ExitUsage {
		t.Fatalf("send at 1000/s to an internet /16: %v (exit %d), want a pace error, exit 2", err, cli.ExitCode(err))
	}
	t.Log(err)
}

// TestDeprecatedQnameAndBlocklistDir: --qname is a deprecated spelling of --query-name
// (it sets the same value, and a warning is logged); a missing blocklist directory is
// exit code 5, before the database or the network is touched.
func TestDeprecatedQnameAndBlocklistDir(t *testing.T) {
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, nil))
	scan := []string{"scan", "--testbed", "198.19.0.0/16"}
	err := Run(context.Background(), log, append(scan, "--qname", "a..b"))
	if cli.ExitCode(err) != cli.ExitUsage || !strings.Contains(err.Error(), "--query-name") || !strings.Contains(logs.String(), "deprecated flag") {
		t.Fatalf("--qname a..b: %v (exit %d), log %q; want exit 2 from --query-name and a deprecation warning", err, cli.ExitCode(err), logs.String())
	}
	missing := filepath.Join(t.TempDir(), "blocklist")
	for _, args := range [][]string{
		append(scan, "--blocklist-dir", missing),
		{"send", "--testbed", "198.19.0.0/16", "--hitlist", "/dev/null", "--blocklist-dir", missing},
		{"blocklist", "--no-db", "--blocklist-dir", missing},
	} {
		if err := Run(context.Background(), log, args); cli.ExitCode(err) != cli.ExitEnvironment || !strings.Contains(err.Error(), missing) {
			t.Errorf("%v: %v (exit %d), want %d naming %s", args, err, cli.ExitCode(err), cli.ExitEnvironment, missing)
		}
	}
	t.Setenv("DOQSCAN_HOME", t.TempDir())
	if err := Run(context.Background(), log, scan); cli.ExitCode(err) != cli.ExitEnvironment {
		t.Errorf("DOQSCAN_HOME without blocklist/: %v (exit %d), want %d", err, cli.ExitCode(err), cli.ExitEnvironment)
	}
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
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
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
		err := Run(context.Background(), log, c.args) // prints the blocklist on stdout
		if code := cli.ExitCode(err); code != c.code {
			t.Errorf("%s: %v: exit %d (%v), want %d", c.why, c.args, code, err, c.code)
		}
	}
}
