package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/store/storetest"
)

// run runs the command in-process through the real flag parsing and returns its exit
// code and stderr.
func run(t *testing.T, args ...string) (int, string) {
	t.Helper()
	fs, common, runFn := command()
	var stderr bytes.Buffer
	code := cli.RunMain(fs, common, args, &stderr, runFn)
	return code, stderr.String()
}

// TestBadFlagsExitUsage: every numeric flag out of its range is refused with exit code 2
// and a message naming the flag, before anything runs (none is replaced by its default).
func TestBadFlagsExitUsage(t *testing.T) {
	t.Setenv("DATABASE_URL", storetest.NewDatabase(t))
	missing := filepath.Join(t.TempDir(), "absent.txt") // reached only if the flags pass
	for _, c := range []struct {
		args []string
		flag string
	}{
		{[]string{"--concurrency", "-5"}, "--concurrency"},
		{[]string{"--concurrency", "0"}, "--concurrency"},
		{[]string{"--concurrency", "100000"}, "--concurrency"},
		{[]string{"--timeout", "0s"}, "--timeout"},
		{[]string{"--timeout", "-1s"}, "--timeout"},
		{[]string{"--timeout", "3h"}, "--timeout"},
		{[]string{"--rtt-samples", "-3"}, "--rtt-samples"},
		{[]string{"--rtt-samples", "0"}, "--rtt-samples"},
		{[]string{"--rtt-samples", "100000"}, "--rtt-samples"},
		{[]string{"--persistent", "1"}, "--persistent"},
		{[]string{"--persistent", "-2"}, "--persistent"},
		{[]string{"--persistent", "5000"}, "--persistent"},
		{[]string{"--spread", "-1s"}, "--spread"},
		{[]string{"--spread", "2h"}, "--spread"},
		{[]string{"--every", "30m"}, "--every"},
		{[]string{"--every", "90m"}, "--every"},
		{[]string{"--every", "1000h"}, "--every"},
		{[]string{"--run-id", "-1"}, "--run-id"},
		{[]string{"--query-name", "a..b"}, "--query-name"},
		{[]string{"--vantage", ""}, "--vantage"},
		{[]string{"--protocols", "smtp"}, "--protocols"},
		{[]string{"--concurrency", "x"}, "-concurrency"},
	} {
		t.Run(strings.Join(c.args, "="), func(t *testing.T) {
			code, out := run(t, append(c.args, "--targets", missing)...)
			if code != cli.ExitUsage || !strings.Contains(out, c.flag) || strings.Count(strings.TrimSpace(out), "\n") != 0 {
				t.Errorf("exit %d, stderr %q; want %d and one line naming %s", code, out, cli.ExitUsage, c.flag)
			}
		})
	}
}

// TestTargetsFileErrors: a missing targets file is a missing prerequisite (5); a bad or
// 200 KB line is bad input (2), and the message names the file and the line.
func TestTargetsFileErrors(t *testing.T) {
	t.Setenv("DATABASE_URL", storetest.NewDatabase(t))
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		name, path string
		code       int
		want       string
	}{
		{"missing", filepath.Join(dir, "absent.txt"), cli.ExitEnvironment, "absent.txt"},
		{"bad line", write("bad.txt", "127.0.0.1\n\n127.0.0.2 doq=853/h2\n"), cli.ExitUsage, "bad.txt:3: "},
		{"200 KB line", write("long.txt", "127.0.0.1\n# a\n"+strings.Repeat("1", 200<<10)+"\n"), cli.ExitUsage, "long.txt:3: line longer than"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out := run(t, "--targets", c.path)
			if code != c.code || !strings.Contains(out, c.want) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, out, c.code, c.want)
			}
		})
	}
}
