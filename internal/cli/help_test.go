package cli_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/cli/clitest"
	"github.com/doqscan/doqscan/internal/dnsmsg"
	"github.com/doqscan/doqscan/internal/testsupport"
)

// TestEveryHelp runs the real binary of every cmd/<tool> with --help, and every
// subcommand its help names with "<tool> <sub> --help": each must exit 0, print a usage
// (the subcommand's own where the tool's help says "<tool> <subcommand> --help") and no
// panic (the flag package prints "panic calling String method ..." into the help
// and exits 0, so only the text shows it). The binaries run with no database, a project
// home of their own, a testbed instance name of their own and no network (a network
// namespace of their own), so a --help that reached the tool's work would find nothing
// to touch.
func TestEveryHelp(t *testing.T) {
	tools, run := everyTool(t)
	help := func(t *testing.T, argv ...string) string {
		t.Helper()
		out, err := run(append(argv, "--help")...)
		switch {
		case err != nil:
			t.Errorf("%s --help: %v\n%s", strings.Join(argv, " "), err, testsupport.Tail(out, 600))
		case strings.Contains(out, "panic"):
			t.Errorf("%s --help prints a panic:\n%s", strings.Join(argv, " "), out)
		case !strings.Contains(out, "Usage"):
			t.Errorf("%s --help prints no usage:\n%s", strings.Join(argv, " "), testsupport.Tail(out, 600))
		}
		return out
	}
	for _, tool := range tools {
		t.Run(tool, func(t *testing.T) {
			top := help(t, tool)
			subs := clitest.Subcommands(tool, top)
			t.Logf("%s: subcommands %q", tool, subs)
			// A tool whose help sends the reader to each subcommand's help must show it
			// (not its own again: the subcommand's flags would be parsed as the tool's).
			own := strings.Contains(top, tool+" <subcommand> --help")
			for _, sub := range subs {
				// "optout [serve]": the default subcommand's help is the tool's.
				if out := help(t, tool, sub); own && out == top && !strings.Contains(top, "["+sub+"]") {
					t.Errorf("%s %s --help prints the help of %s, not of %s %s", tool, sub, tool, tool, sub)
				}
			}
		})
	}
}

// TestEveryVersion: --version prints the tool's version (its name, the release, the
// revision and the Go version: cli.VersionLine) and exits 0 in every tool, before and
// after each subcommand its help names ("zprobe scan --version" is the tool's version,
// not a flag of the scan), without doing the subcommand's work.
func TestEveryVersion(t *testing.T) {
	tools, run := everyTool(t)
	version := func(t *testing.T, tool string, argv ...string) {
		t.Helper()
		out, err := run(append(argv, "--version")...)
		want := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(tool) + ` .*go1\.[0-9]+`)
		if err != nil || !want.MatchString(out) || strings.Count(strings.TrimSpace(out), "\n") != 0 {
			t.Errorf("%s --version: %v\n%s\nwant one line %q", strings.Join(argv, " "), err, testsupport.Tail(out, 600), want)
		}
	}
	for _, tool := range tools {
		t.Run(tool, func(t *testing.T) {
			version(t, tool, tool)
			help, err := run(tool, "--help")
			if err != nil {
				t.Fatalf("%s --help: %v", tool, err)
			}
			for _, sub := range clitest.Subcommands(tool, help) {
				version(t, tool, tool, sub)
			}
		})
	}
}

// TestOneDefaultQueryName: every tool and subcommand with --query-name defaults it to
// the one name (dnsmsg.DefaultQueryName), and its help says so.
func TestOneDefaultQueryName(t *testing.T) {
	tools, run := everyTool(t)
	flagRE := regexp.MustCompile(`(?m)^\s+-query-name string\n(?:\s{4,}.*\n)*?\s{4,}.*\(default "([^"]*)"\)`)
	seen := 0
	check := func(t *testing.T, argv ...string) string {
		t.Helper()
		out, err := run(append(argv, "--help")...)
		if err != nil {
			t.Fatalf("%s --help: %v", strings.Join(argv, " "), err)
		}
		if !strings.Contains(out, "-query-name") {
			return out
		}
		seen++
		m := flagRE.FindStringSubmatch(out)
		if m == nil || m[1] != dnsmsg.DefaultQueryName {
			t.Errorf("%s --help: --query-name default %q, want %q", strings.Join(argv, " "), m, dnsmsg.DefaultQueryName)
		}
		return out
	}
	for _, tool := range tools {
		for _, sub := range clitest.Subcommands(tool, check(t, tool)) {
			check(t, tool, sub)
		}
	}
	if seen < 3 {
		t.Errorf("--query-name in %d helps; want verify, measure and zprobe scan/send at least", seen)
	}
}

// everyTool builds every cmd/<tool> and returns their names and a function that runs
// one of them (argv[0] names it) with no database, a project home of its own, a testbed
// instance name of its own and no network (a network namespace of its own), returning
// its stdout and stderr together. The test is skipped where unshare does not work.
func everyTool(t *testing.T) ([]string, func(argv ...string) (string, error)) {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(testsupport.Root(), "cmd", "*", "main.go"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no cmd/*/main.go (%v)", err)
	}
	var tools []string
	for _, d := range dirs {
		tools = append(tools, filepath.Base(filepath.Dir(d)))
	}
	if err := exec.Command("unshare", append(testsupport.UnshareNet(), "true")...).Run(); err != nil {
		t.Skipf("unshare %s does not work here (user namespaces disabled?): %v", strings.Join(testsupport.UnshareNet(), " "), err)
	}
	bin := testsupport.Commands(t, tools...)
	home := t.TempDir()
	return tools, func(argv ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		args := append(append(testsupport.UnshareNet(), filepath.Join(bin, argv[0])), argv[1:]...)
		cmd := exec.CommandContext(ctx, "unshare", args...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "DOQSCAN_HOME=" + home, "DOQSCAN_TESTNET=helptest",
			"DATABASE_URL=host=/nonexistent-doqscan-socket dbname=doqscan connect_timeout=1"}
		cmd.Dir = home
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		return stdout.String() + stderr.String(), err
	}
}
