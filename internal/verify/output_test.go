package verify

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/doqscan/doqscan/internal/cli"
)

// runCommand runs the verify command with args through its flags, as cmd/verify does,
// and returns its exit code, stdout and log.
func runCommand(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var f Flags
	f.Register(fs)
	if err := fs.Parse(args); err != nil {
		return cli.ExitUsage, "", err.Error()
	}
	var stdout, logs bytes.Buffer
	err := Command(context.Background(), slog.New(slog.NewTextHandler(&logs, nil)), &f, fs.Args(), &stdout)
	return cli.ExitCode(err), stdout.String(), logs.String()
}

// TestNoStoreResultsOnStdout: with --no-store verify runs with no database at all (the
// URL it would use names no server) and prints every target's result: --json gives one
// JSON object per target and nothing else on stdout (the summary is logged, with its
// counts as fields); without --json a table with a row per target, then the summary.
func TestNoStoreResultsOnStdout(t *testing.T) {
	t.Setenv("DATABASE_URL", "host=/nonexistent-doqscan-socket dbname=doqscan connect_timeout=1")
	pki := newPKI(t)
	ok := startServer(t, pki, behaviour{name: "rfc9250"})
	refused := startServer(t, pki, behaviour{name: "refused", rcode: dns.RcodeRefused})
	dir := t.TempDir()
	targets := filepath.Join(dir, "targets.txt")
	if err := os.WriteFile(targets, []byte(ok.addr.String()+"\n"+refused.addr.String()+"\n"+ok.addr.String()+"  # again\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--targets", targets, "--no-store", "--blocklist-dir", dir, "--query-name", "verify.doq.test",
		"--handshake-timeout", "1s", "--concurrency", "2"}

	code, out, logs := runCommand(t, append(args, "--json")...)
	if code != cli.ExitOK {
		t.Fatalf("--json: exit %d\n%s", code, logs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("--json: %d lines, want one per target (2):\n%s", len(lines), out)
	}
	got := map[string]Record{}
	for _, l := range lines {
		var r Record
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("not a JSON object: %q: %v", l, err)
		}
		got[netip.AddrPortFrom(netip.MustParseAddr(r.IP), r.Port).String()] = r
	}
	for addr, want := range map[string]Outcome{ok.addr.String(): OutcomeVerified, refused.addr.String(): OutcomeRefused} {
		r, found := got[addr]
		if !found || r.Outcome != want || r.ALPN == nil || *r.ALPN != "doq" || r.QUICVersion != "v1" || r.HandshakeMS == nil ||
			r.Certificate == nil || r.Certificate.ChainLength == 0 || r.Attempts != 1 {
			t.Errorf("%s: %+v, want %s over doq/v1 with a handshake time and a certificate", addr, r, want)
		}
	}
	if !strings.Contains(logs, "outcomes.doq-verified=1") || !strings.Contains(logs, "outcomes.doq-refused=1") {
		t.Errorf("summary log lacks the outcome counts as fields:\n%s", logs)
	}

	code, out, logs = runCommand(t, args...)
	if code != cli.ExitOK || !strings.HasPrefix(out, "TARGET") || !strings.Contains(out, ok.addr.String()) ||
		!strings.Contains(out, refused.addr.String()) || !strings.Contains(out, "verification without a database") {
		t.Errorf("table: exit %d\n%s\n%s", code, out, logs)
	}

	// Without --targets there is nothing to verify without the database.
	if code, _, _ := runCommand(t, "--no-store", "--blocklist-dir", dir); code != cli.ExitUsage {
		t.Errorf("--no-store without --targets: exit %d, want %d", code, cli.ExitUsage)
	}
}
