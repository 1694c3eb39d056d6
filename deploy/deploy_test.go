// Package deploy holds the schedules (systemd units, crontab), the container scheduler
// scripts and their tests; there is no Go code to import.
package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func repoRoot(t *testing.T) string {
	wd, _ := os.Getwd()
	return filepath.Dir(wd)
}

// TestSystemdUnitsVerify renders the units for a project home of this checkout's files
// and freshly built tools, and runs systemd-analyze verify on them (it checks syntax,
// unknown keys and that every ExecStart exists).
func TestSystemdUnitsVerify(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed (Debian: systemd)")
	}
	root := repoRoot(t)
	home := t.TempDir()
	for _, p := range []string{"README.md", "deploy", "blocklist"} {
		if err := os.Symlink(filepath.Join(root, p), filepath.Join(home, p)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(buildTools(t), filepath.Join(home, "bin")); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	units, _ := filepath.Glob(filepath.Join(root, "deploy", "systemd", "*"))
	if len(units) < 5 {
		t.Fatalf("expected the weekly/hourly services and timers and the opt-out service, found %v", units)
	}
	var paths []string
	for _, u := range units {
		b, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, filepath.Base(u))
		os.WriteFile(out, []byte(strings.ReplaceAll(string(b), "@DOQSCAN_HOME@", home)), 0o644)
		paths = append(paths, out)
	}
	cmd := exec.Command(sa, append([]string{"verify"}, paths...)...)
	out, err := cmd.CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	// The timers fire when the crontab does.
	for unit, want := range map[string]string{"doqscan-weekly.timer": "Mon *-*-* 00:00:00 UTC", "doqscan-hourly.timer": "hourly"} {
		b, _ := os.ReadFile(filepath.Join(root, "deploy", "systemd", unit))
		if !strings.Contains(string(b), "OnCalendar="+want) || !strings.Contains(string(b), "Persistent=true") {
			t.Errorf("%s: want OnCalendar=%s and Persistent=true", unit, want)
		}
	}
}

// TestCrontabMatchesTimers checks the crontab's syntax and that it runs what the timers run.
func TestCrontabMatchesTimers(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "crontab"))
	if err != nil {
		t.Fatal(err)
	}
	field := `(\*|[0-9]+(-[0-9]+)?(,[0-9]+)*)(/[0-9]+)?`
	line := regexp.MustCompile(`^` + strings.Repeat(field+`\s+`, 5) + `root\s+(.+)$`)
	got := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") || regexp.MustCompile(`^[A-Z_]+=`).MatchString(l) {
			continue
		}
		if !line.MatchString(l) {
			t.Errorf("not a cron line: %q", l)
			continue
		}
		f := strings.Fields(l)
		sched := strings.Join(f[:5], " ")
		switch {
		case strings.Contains(l, "deploy/weekly.sh"):
			got["weekly"] = sched
		case strings.Contains(l, "deploy/hourly.sh"):
			got["hourly"] = sched
		}
	}
	if got["weekly"] != "0 0 * * 1" || got["hourly"] != "0 * * * *" {
		t.Errorf("crontab schedules %v, want weekly Monday 00:00 and hourly at :00 (as the timers)", got)
	}
}

// TestComposeFile validates docker-compose.yml with docker-compose (Debian's package;
// no engine is needed for `config`) and checks what each service must have.
func TestComposeFile(t *testing.T) {
	dc, err := exec.LookPath("docker-compose")
	if err != nil {
		t.Skip("docker-compose not installed (apt-get install docker-compose; ./dev install does)")
	}
	root := repoRoot(t)
	cmd := exec.Command(dc, "-f", filepath.Join(root, "docker-compose.yml"), "config")
	cmd.Env = append(os.Environ(), "POSTGRES_PASSWORD=test-only")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("docker-compose config: %v\n%s", err, out)
	}
	cfg := string(out)
	for _, want := range []string{"  db:", "  scanner:", "  measure:", "  optout:", "  report:", "  jupyter:", "pgdata:", "network_mode: host",
		"NET_RAW", "NET_ADMIN", "127.0.0.1:5432", "pg_isready"} {
		if !strings.Contains(cfg, want) {
			t.Errorf("compose config lacks %q", want)
		}
	}
	// Without a password the file must refuse to start, not run with an empty one.
	cmd = exec.Command(dc, "-f", filepath.Join(root, "docker-compose.yml"), "config")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Errorf("compose config accepted a missing POSTGRES_PASSWORD:\n%.300s", out)
	}
}
