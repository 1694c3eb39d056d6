package cli_test

import (
	"bytes"
	"context"
	"flag"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/doqscan/doqscan/internal/cli"
)

// testTool is a tool with two subcommands, "greet" (flags --name and --loud, takes
// positional arguments anywhere) and "exec" (PassArgs), a hidden raw one and a failing
// one; ran records what ran with which arguments.
type testTool struct {
	ran  []string
	name string
	loud bool
}

func (tt *testTool) tool(def string) *cli.Tool {
	record := func(sub string) cli.RunFunc {
		return func(_ context.Context, _ *slog.Logger, args []string) error {
			tt.ran = append(tt.ran, strings.TrimSpace(sub+" "+strings.Join(args, " ")))
			return nil
		}
	}
	return &cli.Tool{
		Command: cli.Command{Name: "tool", Summary: "a test tool", Examples: []string{"tool greet --name x"}},
		Default: def,
		Subcommands: []cli.Subcommand{
			{Name: "greet", Summary: "say hello", Examples: []string{"tool greet --loud"},
				Flags: func(fs *flag.FlagSet) cli.RunFunc {
					fs.StringVar(&tt.name, "name", "world", "whom to greet")
					fs.BoolVar(&tt.loud, "loud", false, "shout")
					return record("greet")
				}},
			{Name: "exec", Summary: "run a command", PassArgs: true,
				Flags: func(fs *flag.FlagSet) cli.RunFunc { return record("exec") }},
			{Name: "role", Summary: "an internal role", Hidden: true, Raw: true,
				Flags: func(fs *flag.FlagSet) cli.RunFunc { return record("role") }},
			{Name: "path", Summary: "paths, with subcommands of their own", Examples: []string{"tool path show"},
				Subcommands: []cli.Subcommand{
					{Name: "set", Summary: "set a path", Usage: "tool path set ADDR --loss N",
						Flags: func(fs *flag.FlagSet) cli.RunFunc {
							fs.StringVar(&tt.name, "loss", "0", "loss")
							return record("path set")
						}},
					{Name: "show", Summary: "show the paths", Flags: func(fs *flag.FlagSet) cli.RunFunc { return record("path show") }},
				}},
			{Name: "fail", Summary: "fail with a missing prerequisite",
				Flags: func(fs *flag.FlagSet) cli.RunFunc {
					return func(context.Context, *slog.Logger, []string) error {
						return cli.Environmentf("no such thing")
					}
				}},
		},
	}
}

// captureStdout runs fn with os.Stdout going to a pipe and returns what it wrote.
func captureStdout(t *testing.T, fn func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	done := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		done <- string(b)
	}()
	defer func() { os.Stdout = old }()
	fn()
	w.Close()
	os.Stdout = old
	return <-done
}

// TestToolDispatch: the subcommand runs with its flags bound wherever they are (before
// the subcommand's name too), its positional arguments in order; PassArgs leaves a
// subcommand's arguments unparsed, Raw every argument; a missing, unknown or bad
// subcommand or flag is a usage error (2) in one line that lists the subcommands; the
// run's error gives the exit code of its type.
func TestToolDispatch(t *testing.T) {
	for _, c := range []struct {
		args []string
		def  string
		code int
		ran  string // what ran, "" for nothing
		want string // a part of stderr
		name string // --name after the run
		loud bool
	}{
		{args: []string{"greet"}, ran: "greet", name: "world"},
		{args: []string{"greet", "a", "--name", "x", "b", "--loud"}, ran: "greet a b", name: "x", loud: true},
		{args: []string{"--name", "x", "greet", "a"}, ran: "greet a", name: "x"},
		{args: []string{"--loud", "greet", "a"}, ran: "greet a", name: "world", loud: true},
		{args: []string{"--name=x", "--log-level", "debug", "greet"}, ran: "greet", name: "x"},
		{args: []string{"greet", "--", "--loud"}, ran: "greet --loud", name: "world"},
		{args: []string{"exec", "--", "ls", "--name", "y"}, ran: "exec ls --name y"},
		{args: []string{"exec", "ls", "--help"}, ran: ""}, // the help of exec, as Command.PassArgs
		{args: []string{"--help", "exec", "--", "ls"}, ran: ""},
		{args: []string{"role", "--table", "x", "--help"}, ran: "role --table x --help"},
		{args: []string{"--name", "x"}, def: "greet", ran: "greet", name: "x"},
		{args: nil, code: cli.ExitUsage, want: "want a subcommand: greet, exec, path, fail"},
		{args: []string{"--log-level", "debug"}, code: cli.ExitUsage, want: "want a subcommand: greet, exec, path, fail"},
		{args: []string{"nope"}, code: cli.ExitUsage, want: `unknown subcommand "nope": want greet, exec, path, fail`},
		{args: []string{"nope"}, def: "greet", code: cli.ExitUsage, want: `unknown subcommand "nope"`},
		{args: []string{"help", "nope"}, code: cli.ExitUsage, want: `unknown subcommand "nope": want greet, exec, path, fail`},
		{args: []string{"help", "greet", "exec"}, code: cli.ExitUsage, want: "help takes one subcommand"},
		{args: []string{"--bogus", "greet"}, code: cli.ExitUsage, want: "flag provided but not defined: -bogus"},
		{args: []string{"greet", "--bogus"}, code: cli.ExitUsage, want: "flag provided but not defined: -bogus"},
		{args: []string{"exec", "--name", "x"}, code: cli.ExitUsage, want: "-name"}, // greet's flag, not exec's
		{args: []string{"greet", "--log-level", "loud"}, code: cli.ExitUsage, want: "--log-level"},
		{args: []string{"fail"}, code: cli.ExitEnvironment, want: "tool fail: error: no such thing"},
		// A subcommand with subcommands of its own.
		{args: []string{"path", "set", "A", "--loss", "5"}, ran: "path set A", name: "5"},
		{args: []string{"--loss", "5", "path", "set", "A"}, ran: "path set A", name: "5"},
		{args: []string{"path", "--loss", "5", "set", "A"}, ran: "path set A", name: "5"},
		{args: []string{"path", "show"}, ran: "path show"},
		{args: []string{"path"}, code: cli.ExitUsage, want: "tool path: want a subcommand: set, show"},
		{args: []string{"path", "frob"}, code: cli.ExitUsage, want: `unknown subcommand "frob": want set, show`},
		{args: []string{"path", "show", "--loss", "5"}, code: cli.ExitUsage, want: "-loss"},
	} {
		t.Run(strings.Join(c.args, " ")+"/"+c.def, func(t *testing.T) {
			tt := &testTool{}
			var stderr bytes.Buffer
			var code int
			captureStdout(t, func() { code = tt.tool(c.def).RunMain(c.args, &stderr) })
			if code != c.code || !strings.Contains(stderr.String(), c.want) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, stderr.String(), c.code, c.want)
			}
			if c.code != cli.ExitOK && strings.Count(strings.TrimSpace(stderr.String()), "\n") != 0 {
				t.Errorf("stderr %q: want one line", stderr.String())
			}
			if got := strings.Join(tt.ran, "|"); got != c.ran {
				t.Errorf("ran %q, want %q", got, c.ran)
			}
			if c.name != "" {
				if tt.name != c.name || tt.loud != c.loud {
					t.Errorf("--name %q --loud %v, want %q %v", tt.name, tt.loud, c.name, c.loud)
				}
			}
		})
	}
}

// TestToolHelp: "tool", "tool --help", "tool -h" and "tool help" print the tool's help
// (its subcommands with their summaries, not the hidden ones); "tool help SUB", "tool
// SUB --help", "tool SUB -h" and "tool --help SUB" print the same help of SUB, with its
// flags and examples; each exits 0 without running anything and prints nothing on
// stderr; --version before or after the subcommand prints the tool's version.
func TestToolHelp(t *testing.T) {
	run := func(t *testing.T, def string, args ...string) (string, int) {
		t.Helper()
		tt := &testTool{}
		var stderr bytes.Buffer
		var code int
		out := captureStdout(t, func() { code = tt.tool(def).RunMain(args, &stderr) })
		if len(tt.ran) != 0 || stderr.Len() != 0 {
			t.Errorf("%q: ran %q, stderr %q; want no run and nothing on stderr", args, tt.ran, stderr.String())
		}
		return out, code
	}
	var want bytes.Buffer
	(&testTool{}).tool("").PrintHelp(&want)
	for _, h := range []string{"Subcommands:", "greet  say hello", "exec   run a command", "tool <subcommand> --help",
		"tool help <subcommand>", "Examples:\n  tool greet --name x", "Exit codes"} {
		if !strings.Contains(want.String(), h) {
			t.Errorf("tool help lacks %q:\n%s", h, want.String())
		}
	}
	if strings.Contains(want.String(), "role") {
		t.Errorf("tool help lists the hidden subcommand:\n%s", want.String())
	}
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}, {"--log-level", "debug", "--help"}} {
		if out, code := run(t, "", args...); code != cli.ExitOK || out != want.String() {
			t.Errorf("%q: exit %d, stdout:\n%s\nwant 0 and the tool's help", args, code, out)
		}
	}
	if out, code := run(t, "greet", "--help"); code != cli.ExitOK || out != want.String() {
		t.Errorf("--help with a default subcommand: exit %d, stdout:\n%s\nwant the tool's help", code, out)
	}
	var sub bytes.Buffer
	if err := (&testTool{}).tool("").SubcommandHelp(&sub, "greet"); err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"tool greet: say hello", "Usage:\n  tool greet [flags]", "-name string", "-loud", "-log-level",
		"Examples:\n  tool greet --loud", "Exit codes", `See "tool help"`} {
		if !strings.Contains(sub.String(), h) {
			t.Errorf("greet's help lacks %q:\n%s", h, sub.String())
		}
	}
	for _, args := range [][]string{{"help", "greet"}, {"greet", "--help"}, {"greet", "-h"}, {"--help", "greet"},
		{"greet", "a", "--name", "x", "--help"}, {"--name", "x", "greet", "-help"}} {
		if out, code := run(t, "", args...); code != cli.ExitOK || out != sub.String() {
			t.Errorf("%q: exit %d, stdout:\n%s\nwant 0 and greet's help", args, code, out)
		}
	}
	// A subcommand with subcommands: its help lists them; theirs is their own.
	var path, set bytes.Buffer
	tl := (&testTool{}).tool("")
	if err := tl.SubcommandHelp(&path, "path"); err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"tool path: paths, with subcommands of their own", "Subcommands:", "set   set a path", "tool path show"} {
		if !strings.Contains(path.String(), h) {
			t.Errorf("path's help lacks %q:\n%s", h, path.String())
		}
	}
	for _, args := range [][]string{{"path", "--help"}, {"help", "path"}, {"--help", "path"}, {"path", "help"}} {
		if out, code := run(t, "", args...); code != cli.ExitOK || out != path.String() {
			t.Errorf("%q: exit %d, stdout:\n%s\nwant 0 and path's help", args, code, out)
		}
	}
	if out, code := run(t, "", "path", "set", "--help"); code != cli.ExitOK || !strings.Contains(out, "tool path set: set a path") ||
		!strings.Contains(out, "-loss string") {
		t.Errorf("path set --help: exit %d, stdout:\n%s", code, out)
	} else {
		set.WriteString(out)
	}
	for _, args := range [][]string{{"help", "path", "set"}, {"path", "help", "set"}, {"--help", "path", "set"}} {
		if out, code := run(t, "", args...); code != cli.ExitOK || out != set.String() {
			t.Errorf("%q: exit %d, stdout:\n%s\nwant 0 and path set's help", args, code, out)
		}
	}
	if err := (&testTool{}).tool("").SubcommandHelp(io.Discard, "nope"); cli.ExitCode(err) != cli.ExitUsage {
		t.Errorf("SubcommandHelp of an unknown subcommand: %v, want a usage error", err)
	}
	for _, args := range [][]string{{"--version"}, {"greet", "--version"}, {"--version", "greet"}, {"exec", "ls", "--version"},
		{"path", "--version"}, {"path", "show", "--version"}, {"--version", "path", "show"}} {
		out, code := run(t, "", args...)
		if code != cli.ExitOK || !strings.HasPrefix(out, "tool ") || strings.Count(out, "\n") != 1 {
			t.Errorf("%q: exit %d, stdout %q; want 0 and the tool's version line", args, code, out)
		}
	}
}

// TestToolDefaultWithoutArgs: with DefaultWithoutArgs the default subcommand runs with
// no argument at all; without it, no argument is a usage error naming the subcommands.
func TestToolDefaultWithoutArgs(t *testing.T) {
	tt := &testTool{}
	tl := tt.tool("greet")
	tl.DefaultWithoutArgs = true
	if code := tl.RunMain(nil, io.Discard); code != cli.ExitOK || strings.Join(tt.ran, "|") != "greet" {
		t.Errorf("no arguments: exit %d, ran %q; want 0 and greet", code, tt.ran)
	}
	tt = &testTool{}
	var stderr bytes.Buffer
	if code := tt.tool("greet").RunMain(nil, &stderr); code != cli.ExitUsage || len(tt.ran) != 0 ||
		!strings.Contains(stderr.String(), "want a subcommand: greet, exec, path, fail") {
		t.Errorf("no arguments: exit %d, ran %q, stderr %q; want 2 and the subcommands", code, tt.ran, stderr.String())
	}
}
