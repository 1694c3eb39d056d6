// Package clitest runs a doqscan command in-process through its real flag parsing
// (cli.RunMain) and checks what the tests of every command check: exit codes and
// one-line messages for bad flags and files, --help, and the vantage point and
// provenance a run stores.
package clitest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/listfile/listfiletest"
	"github.com/doqscan/doqscan/internal/provenance"
	"github.com/doqscan/doqscan/internal/store"
	"github.com/doqscan/doqscan/internal/store/storetest"
)

// Command is what a main's command() returns: its flag set bound to the stage's config,
// the common flags and the run function.
type Command func() (*flag.FlagSet, *cli.Common, cli.RunFunc)

// Tool is what the main of a tool made of subcommands builds: its cli.Tool, the
// subcommands' flags bound to the stage's config.
type Tool func() *cli.Tool

// Main is either kind of main: the functions of this package take both.
type Main interface {
	~func() (*flag.FlagSet, *cli.Common, cli.RunFunc) | ~func() *cli.Tool
}

// tool returns c as a Tool, or nil for a Command.
func tool[C Main](c C) *cli.Tool {
	switch f := any(c).(type) {
	case Tool:
		return f()
	case func() *cli.Tool:
		return f()
	}
	return nil
}

// command returns c as a Command (c must not be a Tool).
func command[C Main](c C) Command {
	switch f := any(c).(type) {
	case Command:
		return f
	case func() (*flag.FlagSet, *cli.Common, cli.RunFunc):
		return f
	}
	panic(fmt.Sprintf("clitest: %T is neither a Command nor a Tool", c))
}

// Run runs the command or tool with args and returns its exit code and stderr.
func Run[C Main](t testing.TB, c C, args ...string) (int, string) {
	t.Helper()
	var stderr bytes.Buffer
	if tl := tool(c); tl != nil {
		return tl.RunMain(args, &stderr), stderr.String()
	}
	fs, common, run := command(c)()
	code := cli.RunMain(fs, common, args, &stderr, run)
	return code, stderr.String()
}

// helpText is what --help of the command or tool prints.
func helpText[C Main](c C) string {
	var b bytes.Buffer
	if tl := tool(c); tl != nil {
		tl.PrintHelp(&b)
		return b.String()
	}
	fs, _, _ := command(c)()
	fs.SetOutput(&b)
	fs.Usage()
	return b.String()
}

// Case is one invocation that must fail before anything runs: its exit code and a part
// of the one line it prints on stderr (e.g. the flag's name).
type Case struct {
	Args []string
	Code int
	Want string
}

// Usage is a Case of a usage error (exit code 2) whose line contains want.
func Usage(want string, args ...string) Case {
	return Case{Args: args, Code: cli.ExitUsage, Want: want}
}

// OneLineErrors runs every case, with extra appended to its arguments, as a subtest: the
// exit code must be the case's and stderr one line containing Want.
func OneLineErrors[C Main](t *testing.T, c C, cases []Case, extra ...string) {
	t.Helper()
	for _, cs := range cases {
		t.Run(strings.Join(cs.Args, "="), func(t *testing.T) {
			code, out := Run(t, c, append(append([]string(nil), cs.Args...), extra...)...)
			if code != cs.Code || !strings.Contains(out, cs.Want) || strings.Count(strings.TrimSpace(out), "\n") != 0 {
				t.Errorf("exit %d, stderr %.300q; want %d and one line naming %s", code, out, cs.Code, cs.Want)
			}
		})
	}
}

// NoDatabase points $DATABASE_URL at a server that does not exist, for tests of what a
// command refuses before it opens the database: one that got that far fails fast
// instead of reaching a real database.
func NoDatabase(t testing.TB) {
	t.Setenv("DATABASE_URL", NoDatabaseURL)
}

// NoDatabaseURL names a server that does not exist (a command that opens it stops with
// exit code 3 within a second).
const NoDatabaseURL = "host=/nonexistent-doqscan-socket dbname=doqscan connect_timeout=1"

// ExitCase is one exit code a command documents and an invocation that gives it.
type ExitCase struct {
	Code int
	Why  string            // the code's documented meaning, for the failure message
	Args []string          // the command's arguments
	Env  map[string]string // environment for the case (e.g. DATABASE_URL)
	Want string            // a part of stderr, if not empty
}

// ExitCodes runs every case of a command's exit-code table (one per documented code
// and cause) as a subtest and checks its exit code: the code comes from the error's
// type, so each must be reached by the cause it documents.
func ExitCodes[C Main](t *testing.T, c C, cases []ExitCase) {
	t.Helper()
	for _, cs := range cases {
		t.Run(fmt.Sprintf("%d %s", cs.Code, cs.Why), func(t *testing.T) {
			for k, v := range cs.Env {
				t.Setenv(k, v)
			}
			code, out := Run(t, c, cs.Args...)
			if code != cs.Code || !strings.Contains(out, cs.Want) {
				t.Errorf("%q: exit %d, stderr %.400q; want %d (%s) and %q", cs.Args, code, out, cs.Code, cs.Why, cs.Want)
			}
		})
	}
}

// DatabaseCases are the exit codes of a command that opens the database when run with
// args: 3 when no server answers, 4 when the database's schema is newer than the
// binary (a fresh database of the test server, see storetest.NewerSchema).
func DatabaseCases(t testing.TB, args ...string) []ExitCase {
	return []ExitCase{
		{Code: cli.ExitDatabase, Why: "database unavailable", Args: args, Env: map[string]string{"DATABASE_URL": NoDatabaseURL}},
		{Code: cli.ExitSchema, Why: "schema newer than the binary", Args: args, Env: map[string]string{"DATABASE_URL": storetest.NewerSchema(t)}},
	}
}

// WriteFile writes content to dir/name and returns its path.
func WriteFile(t testing.TB, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TargetsFileErrors checks --targets: a missing file, a FIFO (whose plain open would
// wait for a writer forever), a directory or a link to nothing is a missing prerequisite
// (5) saying what it is; a bad third line (badThirdLine is a file's content whose third
// line is bad) or a 200 KB line is bad input (2), and the message names the file and the
// line. The file is read before the database is opened: the command runs with a
// database that does not answer (NoDatabase), which must not hide the file's error.
func TargetsFileErrors[C Main](t *testing.T, c C, badThirdLine string) {
	t.Helper()
	NoDatabase(t)
	dir := t.TempDir()
	for _, cs := range []struct {
		name, path string
		code       int
		want       string
	}{
		{"missing", filepath.Join(dir, "absent.txt"), cli.ExitEnvironment, "absent.txt"},
		{"FIFO", listfiletest.FIFO(t, dir, "fifo.txt"), cli.ExitEnvironment, "fifo.txt: not a regular file: a named pipe"},
		{"directory", dir, cli.ExitEnvironment, "not a regular file: a directory"},
		{"link to nothing", listfiletest.Symlink(t, filepath.Join(dir, "gone.txt"), filepath.Join(dir, "dangling.txt")), cli.ExitEnvironment, "dangling.txt: a symbolic link to nothing"},
		{"bad line", WriteFile(t, dir, "bad.txt", badThirdLine), cli.ExitUsage, "bad.txt:3: "},
		{"200 KB line", WriteFile(t, dir, "long.txt", "127.0.0.1\n# a\n"+strings.Repeat("1", 200<<10)+"\n"), cli.ExitUsage, "long.txt:3: line longer than"},
	} {
		t.Run(cs.name, func(t *testing.T) {
			code, out := Run(t, c, "--targets", cs.path)
			if code != cs.code || !strings.Contains(out, cs.want) {
				t.Errorf("exit %d, stderr %.300q; want %d and %q", code, out, cs.code, cs.want)
			}
		})
	}
}

// MissingBlocklistDir checks --blocklist-dir of a command run on an empty --targets
// file: a directory that does not exist stops the run with exit code 5 naming it, before
// anything is contacted; the default follows DOQSCAN_HOME, and an installation without
// blocklist/ is refused too; an empty flag is a usage error (2).
func MissingBlocklistDir[C Main](t *testing.T, c C) {
	t.Helper()
	args := []string{"--targets", WriteFile(t, t.TempDir(), "none.txt", "")}
	missing := filepath.Join(t.TempDir(), "blocklist")
	code, out := Run(t, c, append([]string{"--blocklist-dir", missing}, args...)...)
	if code != cli.ExitEnvironment || !strings.Contains(out, missing) {
		t.Fatalf("exit %d, stderr %q; want %d naming %s", code, out, cli.ExitEnvironment, missing)
	}
	t.Setenv("DOQSCAN_HOME", t.TempDir())
	code, out = Run(t, c, args...)
	if code != cli.ExitEnvironment || !strings.Contains(out, "blocklist") {
		t.Fatalf("DOQSCAN_HOME without blocklist/: exit %d, stderr %q; want %d", code, out, cli.ExitEnvironment)
	}
	if code, out = Run(t, c, append([]string{"--blocklist-dir", ""}, args...)...); code != cli.ExitUsage {
		t.Fatalf("empty --blocklist-dir: exit %d, stderr %q; want %d", code, out, cli.ExitUsage)
	}
}

// Help checks that --help exits 0, that the help text holds every want (usage line,
// flags, examples, exit codes) and no "panic" (the flag package prints "panic calling
// String method ..." into the help when a flag's zero value panics, and carries on).
func Help[C Main](t *testing.T, c C, want ...string) {
	t.Helper()
	if code, out := Run(t, c, "--help"); code != cli.ExitOK {
		t.Fatalf("--help: exit %d, stderr %q", code, out)
	}
	help := helpText(c)
	if strings.Contains(help, "panic") {
		t.Errorf("help holds a panic:\n%s", help)
	}
	for _, w := range append(want, "Examples:", "Exit codes") {
		if !strings.Contains(help, w) {
			t.Errorf("help lacks %q:\n%s", w, help)
		}
	}
}

// SubcommandHelp checks the help of each subcommand of a tool, as "tool SUB --help"
// prints it: exit 0, nothing on stderr, no panic, and the examples and exit codes.
func SubcommandHelp(t *testing.T, c Tool) {
	t.Helper()
	tl := c()
	for _, s := range tl.Subcommands {
		if s.Hidden {
			continue
		}
		if code, out := Run(t, c, s.Name, "--help"); code != cli.ExitOK || out != "" {
			t.Errorf("%s --help: exit %d, stderr %q; want 0 and the help on stdout", s.Name, code, out)
		}
		var b bytes.Buffer
		if err := c().SubcommandHelp(&b, s.Name); err != nil {
			t.Fatal(err)
		}
		for _, w := range []string{"Usage:", tl.Name + " " + s.Name, "Exit codes"} {
			if !strings.Contains(b.String(), w) || strings.Contains(b.String(), "panic") {
				t.Errorf("%s %s --help lacks %q or holds a panic:\n%s", tl.Name, s.Name, w, b.String())
			}
		}
	}
}

// RunProvenance checks what a run stored in the database at url: the vantage point's
// location and contact in vantage_points, and one provenance record (this tool, this
// build, this host, the vantage point) on the run of runTable (verification_runs,
// campaigns, ...) with the label and the vantage point's id.
func RunProvenance(t *testing.T, url, runTable, label, tool string, want provenance.Vantage) {
	t.Helper()
	ctx := context.Background()
	s, err := store.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var loc, contact string
	var raw []byte
	// runTable is one of the test's constants, never input.
	err = s.Pool.QueryRow(ctx, `SELECT v.location, v.contact, r.provenance
		FROM vantage_points v JOIN `+runTable+` r USING (vantage_id) WHERE vantage_id = $1 AND r.label = $2`,
		want.ID, label).Scan(&loc, &contact, &raw)
	if err != nil {
		t.Fatalf("%s: %v", want.ID, err)
	}
	if loc != want.Location || contact != want.Contact {
		t.Errorf("%s: vantage_points location/contact %q/%q, want %q/%q", want.ID, loc, contact, want.Location, want.Contact)
	}
	var recs []provenance.Record
	if err := json.Unmarshal(raw, &recs); err != nil || len(recs) != 1 {
		t.Fatalf("%s: provenance %s (%v): want one record", want.ID, raw, err)
	}
	if r := recs[0]; r.Tool != tool || r.Vantage != want || r.Build != provenance.ReadBuild() || r.Host == "" {
		t.Errorf("%s: provenance %+v", want.ID, r)
	}
}

// Subcommands are the subcommands a tool's help names: the first word of each line of
// its "Subcommands:" or "Commands:" section (indented by two spaces; deeper ones continue
// a line), and the first word of each alternative after the tool's name (and "[flags]")
// in its usage lines, up to the first that is no subcommand ("dbctl [flags]
// up|status|url|stop", "testnet [flags] up|...|path set ADDR --loss P|path show",
// "optout [serve] [flags]"; not "jobrun --job scan|verify").
func Subcommands(tool, help string) []string {
	var subs []string
	add := func(s string) bool {
		if !regexp.MustCompile(`^[a-z][a-z0-9-]*$`).MatchString(s) {
			return false
		}
		if !slices.Contains(subs, s) {
			subs = append(subs, s)
		}
		return true
	}
	section := ""
	for _, line := range strings.Split(help, "\n") {
		if line != "" && !strings.HasPrefix(line, " ") {
			section = strings.TrimSpace(line)
			continue
		}
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(line, "   ") {
			continue
		}
		switch section {
		case "Subcommands:", "Commands:":
			add(f[0])
		case "Usage:":
			f = slices.DeleteFunc(f, func(s string) bool { return s == tool || s == "[flags]" })
			for _, alt := range strings.Split(strings.Join(f, " "), "|") {
				w := strings.Fields(alt)
				if len(w) == 0 || !add(strings.Trim(w[0], "[]")) {
					break
				}
			}
		}
	}
	return subs
}

// Examples are the examples a help text lists: each line of its "Examples:" section,
// without the two spaces of indentation and the "# comment" after two or more spaces.
func Examples(help string) []string {
	var out []string
	in := false
	for _, line := range strings.Split(help, "\n") {
		if line != "" && !strings.HasPrefix(line, " ") {
			in = strings.TrimSpace(line) == "Examples:"
			continue
		}
		if !in || strings.TrimSpace(line) == "" {
			continue
		}
		ex := strings.TrimSpace(line)
		if i := commentRE.FindStringIndex(ex); i != nil {
			ex = strings.TrimSpace(ex[:i[0]])
		}
		out = append(out, ex)
	}
	return out
}

// commentRE finds an example's trailing comment: two spaces or more, then "# ".
var commentRE = regexp.MustCompile(`\s{2,}# `)

// LockedOut runs the process of a second run of one unit while first (started, its Wait
// result coming on firstDone) runs: it waits until the database shows the advisory lock
// on key held (failing if first ends before), runs second (its stderr in secondErr) and
// checks that it exits cli.ExitLocked saying that first's pid holds the lock. It reports
// whether second was locked out, and fails if first ended before second gave up (the
// two did not overlap).
func LockedOut(t *testing.T, s *store.Store, key string, first *exec.Cmd, firstDone chan error, second *exec.Cmd, secondErr *bytes.Buffer) bool {
	t.Helper()
	ctx := context.Background()
	id := store.LockID(key)
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for held := false; !held; {
		select {
		case err := <-firstDone:
			t.Fatalf("the first run ended (%v) before it was seen holding the lock %s", err, key)
		case <-poll.C:
		}
		if err := s.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted
			AND classid::bigint = $1 AND objid::bigint = $2)`, int64(uint64(id)>>32), int64(uint64(id)&0xffffffff)).Scan(&held); err != nil {
			t.Fatal(err)
		}
	}
	err := second.Run()
	var ee *exec.ExitError
	locked := errors.As(err, &ee) && ee.ExitCode() == cli.ExitLocked
	if !locked {
		t.Errorf("second run: %v, want exit code %d\n%s", err, cli.ExitLocked, secondErr.String())
	}
	if msg := secondErr.String(); !strings.Contains(msg, "another run holds the lock") || !strings.Contains(msg, fmt.Sprintf("pid %d ", first.Process.Pid)) {
		t.Errorf("the second run does not say that the first (pid %d) holds the lock:\n%s", first.Process.Pid, msg)
	}
	t.Logf("second run: %s", strings.TrimSpace(secondErr.String()))
	select {
	case err := <-firstDone:
		if locked {
			t.Fatalf("the first run ended (%v) before the second gave up: they did not overlap", err)
		}
		firstDone <- err
	default:
	}
	return locked
}
