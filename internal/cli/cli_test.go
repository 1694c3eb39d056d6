package cli_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/store"
	"github.com/doqscan/doqscan/internal/store/storetest"
)

// run executes a command that opens the store, the way every tool does, and returns its
// exit code and what it printed on stderr.
func run(t *testing.T, databaseURL string) (int, string) {
	t.Helper()
	t.Setenv("DATABASE_URL", databaseURL)
	var common cli.Common
	fs := cli.NewFlagSet(cli.Command{Name: "tool", Summary: "test", Usage: "tool"}, &common)
	var stderr bytes.Buffer
	code := cli.RunMain(fs, &common, nil, &stderr, func(ctx context.Context, log *slog.Logger, _ []string) error {
		s, err := cli.OpenStore(ctx, log)
		if err != nil {
			return err
		}
		s.Close()
		return nil
	})
	return code, stderr.String()
}

func oneLine(t *testing.T, out string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "error:") {
		t.Errorf("want one clear error line, got %q", out)
	}
}

// TestDatabaseUnavailable: a malformed DATABASE_URL or a server that is not there gives
// exit code 3 and one error line; the line never repeats the URL (it may hold a
// password).
func TestDatabaseUnavailable(t *testing.T) {
	for _, url := range []string{
		"postgres://%zz",
		"host=/nonexistent-doqscan-socket dbname=doqscan user=doqscan connect_timeout=2",
	} {
		code, out := run(t, url)
		if code != cli.ExitDatabase {
			t.Errorf("%s: exit %d, want %d", url, code, cli.ExitDatabase)
		}
		oneLine(t, out)
		if strings.Contains(out, url) || strings.Contains(out, "%zz") {
			t.Errorf("error repeats the URL (may hold a password): %q", out)
		}
	}
}

// TestFlagsAnywhere: flags may come before, between and after the positional arguments
// (a subcommand, targets, files) and are all parsed before the run (the common ones
// included: a bad --log-level after an argument is a usage error), up to a "--" after
// which everything is positional; --help after an argument exits 0 without a run, a bad
// flag after it is one usage line. With Command.PassArgs parsing stops at the first
// argument.
func TestFlagsAnywhere(t *testing.T) {
	run := func(passArgs bool, args ...string) (int, string, []string, string) {
		var common cli.Common
		fs := cli.NewFlagSet(cli.Command{Name: "tool", Summary: "test", Usage: "tool sub", PassArgs: passArgs}, &common)
		label := fs.String("label", "", "a flag")
		var got []string
		var stderr bytes.Buffer
		code := cli.RunMain(fs, &common, args, &stderr, func(_ context.Context, _ *slog.Logger, args []string) error {
			got = args
			return nil
		})
		return code, stderr.String(), got, *label
	}
	for _, c := range []struct {
		args  []string
		label string
		got   string
	}{
		{[]string{"import", "--label", "x", "DIR"}, "x", "import DIR"},
		{[]string{"--label", "x", "import", "DIR"}, "x", "import DIR"},
		{[]string{"--label", "x", "import", "--label", "y", "DIR", "--label", "z"}, "z", "import DIR"},
		{[]string{"dot://127.0.0.1:8853", "--label", "x"}, "x", "dot://127.0.0.1:8853"},
		{[]string{"a", "-", "b", "--label=x"}, "x", "a - b"},
		{[]string{"a", "--", "--label", "x"}, "", "a --label x"},
		{[]string{"--label", "x", "--", "b", "--label", "y"}, "x", "b --label y"},
		{[]string{"import"}, "", "import"},
		{nil, "", ""},
	} {
		code, out, got, label := run(false, c.args...)
		if code != cli.ExitOK || label != c.label || strings.Join(got, " ") != c.got {
			t.Errorf("%q: exit %d (%q), --label %q, args %q; want 0, %q, %q", c.args, code, out, label, got, c.label, c.got)
		}
	}
	if code, _, got, label := run(true, "import", "--label", "x"); code != cli.ExitOK || label != "" || strings.Join(got, " ") != "import --label x" {
		t.Errorf("with PassArgs: exit %d, --label %q, args %q", code, label, got)
	}
	if code, out, got, _ := run(false, "import", "--help"); code != cli.ExitOK || out != "" || got != nil {
		t.Errorf("import --help: exit %d, stderr %q, ran with %q; want 0, nothing on stderr, no run", code, out, got)
	}
	for _, args := range [][]string{{"import", "--bogus"}, {"import", "--log-level", "loud", "DIR"}, {"a", "b", "--label"}} {
		code, out, got, _ := run(false, args...)
		if code != cli.ExitUsage || strings.Count(strings.TrimSpace(out), "\n") != 0 || got != nil {
			t.Errorf("%q: exit %d, stderr %q, ran with %q; want %d in one line, no run", args, code, out, got, cli.ExitUsage)
		}
	}
}

// TestSilentDatabaseTimesOut: a server that accepts the TCP connection and never says a
// word (a hung PostgreSQL, a black-holing proxy) gives exit code 3 with a message after
// the connect timeout, and a "waiting for database" line while it waits.
func TestSilentDatabaseTimesOut(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c // held open, never read, never answered
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		for {
			select {
			case c := <-accepted:
				c.Close()
			default:
				return
			}
		}
	})
	const timeout = 2 * time.Second
	start := time.Now()
	code, out := run(t, fmt.Sprintf("postgres://doqscan@%s/doqscan?sslmode=disable&connect_timeout=%d",
		ln.Addr(), int(timeout.Seconds())))
	took := time.Since(start)
	if code != cli.ExitDatabase {
		t.Errorf("exit %d, want %d: %s", code, cli.ExitDatabase, out)
	}
	if len(accepted) == 0 {
		t.Errorf("the client never connected to the silent server")
	}
	// It waits the URL's connect timeout (load only adds time), not the default one
	// (the decision the upper bound tells apart; not a scheduling bound).
	if took < timeout || took >= store.DefaultConnectTimeout {
		t.Errorf("gave up after %v, want the URL's connect timeout %v (not the default %v)", took, timeout, store.DefaultConnectTimeout)
	}
	if !strings.Contains(out, "waiting for database") {
		t.Errorf("no waiting line while the server was silent: %q", out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if last := lines[len(lines)-1]; !strings.Contains(last, "error:") || !strings.Contains(last, "connect timeout") {
		t.Errorf("last line %q does not say the database did not answer within the connect timeout", last)
	}
}

// TestConnectionDefaults: without connect_timeout and statement_timeout in the URL or
// the environment, every connection gets the store's defaults; the URL's own win.
func TestConnectionDefaults(t *testing.T) {
	t.Setenv("PGCONNECT_TIMEOUT", "")
	t.Setenv("PGOPTIONS", "")
	cfg, err := store.ParseConfig("postgres://u@127.0.0.1/db")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ConnConfig.ConnectTimeout != store.DefaultConnectTimeout {
		t.Errorf("connect timeout %v, want %v", cfg.ConnConfig.ConnectTimeout, store.DefaultConnectTimeout)
	}
	if got := cfg.ConnConfig.RuntimeParams["statement_timeout"]; got != fmt.Sprint(store.DefaultStatementTimeout.Milliseconds()) {
		t.Errorf("statement_timeout %q, want %d ms", got, store.DefaultStatementTimeout.Milliseconds())
	}
	cfg, err = store.ParseConfig("postgres://u@127.0.0.1/db?connect_timeout=3&statement_timeout=1000")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ConnConfig.ConnectTimeout != 3*time.Second || cfg.ConnConfig.RuntimeParams["statement_timeout"] != "1000" {
		t.Errorf("the URL's timeouts were overridden: %v, %q", cfg.ConnConfig.ConnectTimeout, cfg.ConnConfig.RuntimeParams["statement_timeout"])
	}
}

func TestSchemaNewerThanBinary(t *testing.T) {
	s, url := storetest.OpenURL(t)
	s.Close()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "INSERT INTO schema_migrations (version, name) VALUES ($1, 'future')",
		store.SchemaVersion()+1); err != nil {
		t.Fatal(err)
	}
	code, out := run(t, url)
	if code != cli.ExitSchema {
		t.Errorf("exit %d, want %d", code, cli.ExitSchema)
	}
	oneLine(t, out)
	if !strings.Contains(out, fmt.Sprint(store.SchemaVersion()+1)) {
		t.Errorf("error does not name the database's version: %q", out)
	}
}

func TestWorkingDatabase(t *testing.T) {
	code, out := run(t, storetest.NewDatabase(t))
	if code != cli.ExitOK {
		t.Errorf("exit %d (%s), want 0", code, out)
	}
}

func TestUsageErrors(t *testing.T) {
	var common cli.Common
	fs := cli.NewFlagSet(cli.Command{Name: "tool", Summary: "test", Usage: "tool"}, &common)
	var stderr bytes.Buffer
	code := cli.RunMain(fs, &common, []string{"--no-such-flag"}, &stderr, func(context.Context, *slog.Logger, []string) error {
		t.Fatal("run called despite a bad flag")
		return nil
	})
	if code != cli.ExitUsage {
		t.Errorf("bad flag: exit %d, want %d", code, cli.ExitUsage)
	}
	fs = cli.NewFlagSet(cli.Command{Name: "tool", Summary: "test", Usage: "tool"}, &common)
	code = cli.RunMain(fs, &common, []string{"--log-level", "loud"}, &stderr, func(context.Context, *slog.Logger, []string) error {
		return nil
	})
	if code != cli.ExitUsage {
		t.Errorf("bad log level: exit %d, want %d", code, cli.ExitUsage)
	}
}

func TestExitCodeMapping(t *testing.T) {
	cases := []struct {
		err  error
		want int
	}{
		{nil, cli.ExitOK},
		{errors.New("x"), cli.ExitFailure},
		{cli.Usagef("x"), cli.ExitUsage},
		{cli.Environmentf("x"), cli.ExitEnvironment},
		{fmt.Errorf("wrapped: %w", store.ErrUnavailable), cli.ExitDatabase},
		{fmt.Errorf("wrapped: %w", store.ErrSchemaNewer), cli.ExitSchema},
		{fmt.Errorf("wrapped: %w", context.Canceled), cli.ExitInterrupted},
	}
	for _, c := range cases {
		if got := cli.ExitCode(c.err); got != c.want {
			t.Errorf("ExitCode(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}

// TestSplitList: items are trimmed, empty ones dropped, order kept.
func TestSplitList(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"", nil},
		{" , ,", nil},
		{"doq", []string{"doq"}},
		{" doq, doh,,doh3 ", []string{"doq", "doh", "doh3"}},
	} {
		if got := cli.SplitList(c.in); !slices.Equal(got, c.want) {
			t.Errorf("SplitList(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestHelpAfterArgument: a command with Command.PassArgs stops parsing flags at its
// first argument; --help after it ("testnet up --help") shows the help and exits 0
// without running, while a --help after "--" goes to the wrapped command.
func TestHelpAfterArgument(t *testing.T) {
	for _, c := range []struct {
		args []string
		run  string // the arguments run got, "" when it must not run
	}{
		{[]string{"up", "--help"}, ""},
		{[]string{"path", "set", "-h"}, ""},
		{[]string{"up", "-help"}, ""},
		{[]string{"exec", "--", "dig", "--help"}, "exec -- dig --help"},
		{[]string{"--label", "x", "--", "measure", "--help"}, "measure --help"},
		{[]string{"up", "--label", "x"}, "up --label x"},
	} {
		var common cli.Common
		fs := cli.NewFlagSet(cli.Command{Name: "tool", Summary: "test", Usage: "tool up|exec", PassArgs: true}, &common)
		fs.String("label", "", "a flag")
		var got []string
		ran := false
		var stderr bytes.Buffer
		code := cli.RunMain(fs, &common, c.args, &stderr, func(_ context.Context, _ *slog.Logger, args []string) error {
			got, ran = args, true
			return nil
		})
		switch {
		case code != cli.ExitOK || stderr.Len() != 0:
			t.Errorf("%q: exit %d, stderr %q; want 0 and nothing on stderr", c.args, code, stderr.String())
		case c.run == "" && ran:
			t.Errorf("%q: ran with %q; want the help and no run", c.args, got)
		case c.run != "" && strings.Join(got, " ") != c.run:
			t.Errorf("%q: ran %v with %q; want a run with %q", c.args, ran, got, c.run)
		}
	}
}

// TestDeprecatedHelp: a deprecated flag name does not break --help: the flag package
// calls String on a zero value of every flag's type, which must not panic (it prints
// "panic calling String method" into the help and carries on).
func TestDeprecatedHelp(t *testing.T) {
	var common cli.Common
	fs := cli.NewFlagSet(cli.Command{Name: "tool", Summary: "test", Usage: "tool"}, &common)
	name := fs.String("query-name", "test.com", "the name")
	cli.Deprecate(fs, "name", "query-name")
	var b bytes.Buffer
	fs.SetOutput(&b)
	fs.Usage()
	if strings.Contains(b.String(), "panic") || !strings.Contains(b.String(), "deprecated: use --query-name") {
		t.Errorf("help:\n%s\nwant the deprecated flag described and no panic", b.String())
	}
	var stderr bytes.Buffer
	if code := cli.RunMain(fs, &common, []string{"--name", "x.example"}, &stderr, func(context.Context, *slog.Logger, []string) error {
		return nil
	}); code != cli.ExitOK || *name != "x.example" {
		t.Errorf("--name x.example: exit %d, --query-name %q; want 0 and x.example", code, *name)
	}
}
