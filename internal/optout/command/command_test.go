package command

import (
	"bytes"
	"context"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/cli/clitest"
	"github.com/doqscan/doqscan/internal/optout"
	"github.com/doqscan/doqscan/internal/store/storetest"
)

// run runs optout with args against the test database and returns the exit code and
// what it wrote.
func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Tool(IO{Out: &out}).RunMain(args, &errb)
	return code, out.String(), errb.String()
}

// The subcommands on a real database: list shows pending requests; accept, reject and
// withdraw change the status with one audit row each and regenerate optout.conf; bad ids
// and refused transitions are exit code 2 and change nothing.
func TestSubcommands(t *testing.T) {
	st, u := storetest.OpenURL(t)
	t.Setenv("DATABASE_URL", u)
	ctx := context.Background()
	dir := t.TempDir()
	var ids []int64
	for _, p := range []string{"198.19.7.0/24", "198.19.8.0/24"} {
		e, err := optout.Submit(ctx, st, optout.Request{Prefix: netip.MustParsePrefix(p), Email: "noc@example.net"}, nil,
			optout.Decision{Status: optout.StatusPending, Reason: "test"}, "web 192.0.2.1", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, e.ID)
	}
	id := func(i int) string { return itoa(ids[i]) }

	code, out, errs := run(t, "list", "--status", "pending")
	if code != 0 || !strings.Contains(out, "198.19.7.0/24") || !strings.Contains(out, "198.19.8.0/24") || !strings.Contains(out, "pending") {
		t.Fatalf("list: %d\n%s\n%s", code, out, errs)
	}

	// ID before the flags works too.
	if code, out, errs = run(t, "accept", id(0), "--reason", "confirmed by phone", "--actor", "alice", "--blocklist-dir", dir); code != 0 {
		t.Fatalf("accept: %d %s %s", code, out, errs)
	}
	conf, _ := os.ReadFile(filepath.Join(dir, optout.OptOutFile))
	if !strings.Contains(string(conf), "\n198.19.7.0/24 # ") || strings.Contains(string(conf), "198.19.8.0") {
		t.Errorf("after accept, optout.conf:\n%s", conf)
	}
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"reject", id(1), "--blocklist-dir", dir}, cli.ExitUsage},                                          // no reason
		{[]string{"reject", id(0), "--reason", "x", "--blocklist-dir", dir}, cli.ExitUsage},                         // accepted: withdraw it instead
		{[]string{"accept", "999999", "--blocklist-dir", dir}, cli.ExitUsage},                                       // no such request
		{[]string{"accept", "abc", "--blocklist-dir", dir}, cli.ExitUsage},                                          // not an id
		{[]string{"accept", "--blocklist-dir", dir}, cli.ExitUsage},                                                 // no id
		{[]string{"frobnicate"}, cli.ExitUsage},                                                                     // no such subcommand
		{[]string{"list", "--status", "done"}, cli.ExitUsage},                                                       // no such status
		{[]string{"--policy", "everyone", "--rewrite-only", "--blocklist-dir", dir}, cli.ExitUsage},                 // no such policy
		{[]string{"reject", id(1), "--reason", "ok\u202edab", "--blocklist-dir", dir}, cli.ExitUsage},               // a bidi override in the reason
		{[]string{"reject", id(1), "--reason", "x", "--actor", "al\x1bice", "--blocklist-dir", dir}, cli.ExitUsage}, // a control character
	} {
		if code, out, errs := run(t, tc.args...); code != tc.code {
			t.Errorf("optout %s: exit %d, want %d\n%s%s", strings.Join(tc.args, " "), code, tc.code, out, errs)
		}
	}
	if code, _, errs = run(t, "reject", id(1), "--reason", "not the requester's network", "--actor", "bob", "--blocklist-dir", dir); code != 0 {
		t.Fatalf("reject: %d %s", code, errs)
	}
	if code, _, errs = run(t, "withdraw", id(0), "--reason", "the operator asked to be scanned again", "--actor", "alice", "--blocklist-dir", dir); code != 0 {
		t.Fatalf("withdraw: %d %s", code, errs)
	}
	conf, _ = os.ReadFile(filepath.Join(dir, optout.OptOutFile))
	if strings.Contains(string(conf), "198.19.") {
		t.Errorf("after withdraw and reject, optout.conf still excludes:\n%s", conf)
	}
	audit, err := optout.Audit(ctx, st, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range audit {
		got = append(got, itoa(a.RequestID)+" "+a.Action+">"+a.ToStatus+" "+a.Actor)
	}
	want := []string{
		id(0) + " submitted>pending web 192.0.2.1",
		id(1) + " submitted>pending web 192.0.2.1",
		id(0) + " accepted>accepted cli alice",
		id(1) + " rejected>rejected cli bob",
		id(0) + " withdrawn>withdrawn cli alice",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("audit rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if audit[len(audit)-1].Reason != "the operator asked to be scanned again" {
		t.Errorf("withdraw reason %q", audit[len(audit)-1].Reason)
	}
	code, out, _ = run(t, "list", "--audit")
	if code != 0 || strings.Count(out, "\n") != 6 {
		t.Errorf("list --audit: %d\n%s", code, out)
	}
	code, out, _ = run(t, "list", "--json", "--status", "rejected")
	if code != 0 || strings.Count(out, "\n") != 1 || !strings.Contains(out, `"reason":"not the requester's network"`) {
		t.Errorf("list --json --status rejected: %d\n%s", code, out)
	}
	// The old invocation (flags, no subcommand) is serve.
	if code, _, errs = run(t, "--rewrite-only", "--blocklist-dir", dir); code != 0 {
		t.Errorf("optout --rewrite-only: %d %s", code, errs)
	}
}

func itoa(i int64) string { return strconv.FormatInt(i, 10) }

// TestExitCodes runs every exit code optout documents (README, docs/operations.md), each
// from the cause it names, before anything is served: 0 (--rewrite-only), 2 (a listen
// address no listener can take: it was exit 1 once the listener failed; a number out of
// range), 3 and 4 from the database, 5 a missing blocklist directory (it was created
// and the page served).
func TestExitCodes(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(t.TempDir(), "blocklist")
	for _, c := range []struct {
		why  string
		args []string
		url  string
		code int
	}{
		{"rewrite only", []string{"--rewrite-only", "--blocklist-dir", dir}, storetest.NewDatabase(t), cli.ExitOK},
		{"port out of range", []string{"--listen", "127.0.0.1:99999", "--blocklist-dir", dir}, "", cli.ExitUsage},
		{"TLS port out of range", []string{"serve", "--listen", "", "--tls-listen", ":65536", "--tls-cert", "c", "--tls-key", "k", "--blocklist-dir", dir}, "", cli.ExitUsage},
		{"not an address", []string{"--listen", "localhost", "--blocklist-dir", dir}, "", cli.ExitUsage},
		{"NaN posts per minute", []string{"--posts-per-minute", "NaN", "--blocklist-dir", dir}, "", cli.ExitUsage},
		{"missing blocklist directory", []string{"--listen", "127.0.0.1:0", "--blocklist-dir", missing}, "", cli.ExitEnvironment},
		{"missing blocklist directory (accept)", []string{"accept", "1", "--blocklist-dir", missing}, "", cli.ExitEnvironment},
		{"database unavailable", []string{"--rewrite-only", "--blocklist-dir", dir}, "host=/nonexistent-doqscan-socket dbname=x connect_timeout=1", cli.ExitDatabase},
		{"schema newer than the binary", []string{"--rewrite-only", "--blocklist-dir", dir}, storetest.NewerSchema(t), cli.ExitSchema},
	} {
		t.Setenv("DATABASE_URL", c.url)
		if c.url == "" {
			// Reached only if the checks before the database pass (they must not).
			t.Setenv("DATABASE_URL", "host=/nonexistent-doqscan-socket dbname=x connect_timeout=1")
		}
		code, out, errs := run(t, c.args...)
		if code != c.code {
			t.Errorf("%s: optout %s: exit %d, want %d\n%s%s", c.why, strings.Join(c.args, " "), code, c.code, out, errs)
		}
	}
	if _, err := os.Stat(missing); err == nil {
		t.Errorf("%s was created", missing)
	}
}

// TestHelp: optout's help lists its subcommands and serve's examples; each subcommand's
// help is its own; "optout help serve" is "optout serve --help".
func TestHelp(t *testing.T) {
	tool := func() *cli.Tool { return Tool(IO{Out: io.Discard}) }
	clitest.Help(t, tool, "optout [serve] [flags]", "Subcommands:", "withdraw", "optout --rewrite-only")
	clitest.SubcommandHelp(t, tool)
	var b strings.Builder
	if err := tool().SubcommandHelp(&b, "serve"); err != nil || !strings.Contains(b.String(), "-tls-listen") {
		t.Errorf("serve --help (%v) lacks --tls-listen:\n%s", err, b.String())
	}
	if code, _, errs := run(t, "help", "serve"); code != cli.ExitOK || errs != "" {
		t.Errorf("help serve: exit %d, stderr %q", code, errs)
	}
}
