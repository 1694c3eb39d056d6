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

// TestBadFlags: every flag out of its range or malformed is refused with exit code 2 and
// a message naming it, before anything runs; a missing file a flag names is 5.
func TestBadFlags(t *testing.T) {
	t.Setenv("DATABASE_URL", storetest.NewDatabase(t))
	missing := filepath.Join(t.TempDir(), "absent.txt") // reached only if the flags pass
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--concurrency", "-5"}, cli.ExitUsage, "--concurrency"},
		{[]string{"--concurrency", "0"}, cli.ExitUsage, "--concurrency"},
		{[]string{"--concurrency", "1000000"}, cli.ExitUsage, "--concurrency"},
		{[]string{"--rate", "-1"}, cli.ExitUsage, "--rate"},
		{[]string{"--rate", "NaN"}, cli.ExitUsage, "--rate"},
		{[]string{"--rate", "1e9"}, cli.ExitUsage, "--rate"},
		{[]string{"--batch", "0"}, cli.ExitUsage, "--batch"},
		{[]string{"--batch", "10000000"}, cli.ExitUsage, "--batch"},
		{[]string{"--progress", "0s"}, cli.ExitUsage, "--progress"},
		{[]string{"--progress", "48h"}, cli.ExitUsage, "--progress"},
		{[]string{"--handshake-timeout", "0s"}, cli.ExitUsage, "--handshake-timeout"},
		{[]string{"--handshake-timeout", "1h"}, cli.ExitUsage, "--handshake-timeout"},
		{[]string{"--query-timeout", "-1s"}, cli.ExitUsage, "--query-timeout"},
		{[]string{"--target-timeout", "0s"}, cli.ExitUsage, "--target-timeout"},
		{[]string{"--max-sni-attempts", "-3"}, cli.ExitUsage, "--max-sni-attempts"},
		{[]string{"--max-sni-attempts", "1000"}, cli.ExitUsage, "--max-sni-attempts"},
		{[]string{"--query-name", "a..b"}, cli.ExitUsage, "--query-name"},
		{[]string{"--ports", "70000"}, cli.ExitUsage, "--ports"},
		{[]string{"--alpns", "h3"}, cli.ExitUsage, "--alpns"},
		{[]string{"--quic-versions", "draft-29"}, cli.ExitUsage, "--quic-versions"},
		{[]string{"--sni-names", "198.19.0.1"}, cli.ExitUsage, "--sni-names"},
		{[]string{"--week", "2026-47"}, cli.ExitUsage, "--week"},
		{[]string{"--scan-id", "-1"}, cli.ExitUsage, "--scan-id"},
		{[]string{"--scan-id", "3", "--week", "2026-W47"}, cli.ExitUsage, "--scan-id"},
		{[]string{"--geoip-city", "x.mmdb"}, cli.ExitUsage, "--geoip-asn"},
		{[]string{"--vantage", ""}, cli.ExitUsage, "--vantage"},
		{[]string{"--roots", "/nonexistent/roots.pem"}, cli.ExitEnvironment, "roots.pem"},
	} {
		t.Run(strings.Join(c.args, "="), func(t *testing.T) {
			code, out := run(t, append(c.args, "--targets", missing)...)
			if code != c.code || !strings.Contains(out, c.want) || strings.Count(strings.TrimSpace(out), "\n") != 0 {
				t.Errorf("exit %d, stderr %q; want %d and one line naming %s", code, out, c.code, c.want)
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
		{"bad line", write("bad.txt", "127.0.0.1:853\n\n127.0.0.2:99999\n"), cli.ExitUsage, "bad.txt:3: "},
		{"200 KB line", write("long.txt", "127.0.0.1\n# a\n"+strings.Repeat("1", 200<<10)+"\n"), cli.ExitUsage, "long.txt:3: line longer than"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out := run(t, "--targets", c.path)
			if code != c.code || !strings.Contains(out, c.want) {
				t.Errorf("exit %d, stderr %.300q; want %d and %q", code, out, c.code, c.want)
			}
		})
	}
}

// TestHelp: --help exits 0; the help names the flags, examples and exit codes.
func TestHelp(t *testing.T) {
	if code, out := run(t, "--help"); code != cli.ExitOK {
		t.Fatalf("--help: exit %d, stderr %q", code, out)
	}
	fs, _, _ := command()
	var b bytes.Buffer
	cli.PrintHelp(&b, cmd, fs)
	for _, want := range []string{"verify [flags]", "-quic-versions string", "-scan-id int", "verify --targets hosts.txt", "Exit codes"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("help lacks %q:\n%s", want, b.String())
		}
	}
}
