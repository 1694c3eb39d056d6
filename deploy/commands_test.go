package deploy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/doqscan/doqscan/internal/testsupport"
)

// The configuration a deployment gives the scripts (what /etc/doqscan/doqscan.env or the
// compose environment holds on a real vantage point).
var siteEnv = map[string]string{
	"POSTGRES_PASSWORD": "test-only",
	"DOQSCAN_VANTAGE":   "fra1",
	"ZPROBE_ARGS":       "--allowlist /etc/doqscan/targets.conf --rate 10000 --seed 42",
	"VERIFY_ARGS":       "--concurrency 32",
	"MEASURE_ARGS":      "--concurrency 32",
	"REPORT_ARGS":       "--vantages fra1",
}

// The tools the schedules run (real binaries, built by the test).
var tools = []string{"jobrun", "zprobe", "verify", "conncheck", "measure", "optout"}

// scheduled is one command line a deployment file starts.
type scheduled struct {
	origin string
	argv   []string // compose and systemd (exec form)
	shell  string   // cron (a shell line)
	env    map[string]string
	period string // every.sh's period (compose), "" elsewhere
}

// sandbox is a project home whose bin/ holds recording stand-ins of the tools, so the
// scripts' command lines can be captured without running anything.
type sandbox struct {
	home, records, envFile, logDir string
}

func newSandbox(t *testing.T) sandbox {
	t.Helper()
	sb := sandbox{home: t.TempDir(), records: t.TempDir(), logDir: t.TempDir()}
	os.MkdirAll(filepath.Join(sb.home, "bin"), 0o755)
	shim := "#!/bin/sh\nf=$(mktemp \"$DOQSCAN_TEST_RECORDS/XXXXXXXX\")\nprintf '%s\\0' \"$0\" \"$@\" > \"$f\"\n"
	for _, tool := range tools {
		if err := os.WriteFile(filepath.Join(sb.home, "bin", tool), []byte(shim), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(repoRoot(t), "deploy"), filepath.Join(sb.home, "deploy")); err != nil {
		t.Fatal(err)
	}
	var env strings.Builder
	for _, k := range sortedKeys(siteEnv) {
		if k != "POSTGRES_PASSWORD" {
			fmt.Fprintf(&env, "%s=%q\n", k, siteEnv[k])
		}
	}
	sb.envFile = filepath.Join(t.TempDir(), "doqscan.env")
	os.WriteFile(sb.envFile, []byte(env.String()), 0o644)
	return sb
}

// recorded returns the argv of every tool start recorded so far, and clears them.
func (sb sandbox) recorded(t *testing.T) [][]string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(sb.records, "*"))
	var out [][]string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00"))
		os.Remove(f)
	}
	return out
}

// run starts a scheduled line in the sandbox, its paths mapped from prefix to the
// sandbox home, and returns the tool starts it recorded.
func (sb sandbox) run(t *testing.T, s scheduled, prefix string) ([][]string, string, error) {
	t.Helper()
	env := []string{"PATH=" + os.Getenv("PATH"), "DOQSCAN_TEST_RECORDS=" + sb.records}
	for k, v := range s.env {
		env = append(env, k+"="+strings.ReplaceAll(v, prefix, sb.home))
	}
	var cmd *exec.Cmd
	if s.shell != "" {
		line := strings.ReplaceAll(s.shell, prefix, sb.home)
		line = strings.ReplaceAll(line, "/etc/doqscan/doqscan.env", sb.envFile)
		line = strings.ReplaceAll(line, "/var/log/", sb.logDir+"/")
		cmd = exec.Command("/bin/bash", "-c", line)
	} else {
		argv := make([]string, len(s.argv))
		for i, a := range s.argv {
			argv[i] = strings.ReplaceAll(a, prefix, sb.home)
		}
		cmd = exec.Command(argv[0], argv[1:]...)
	}
	cmd.Env = env
	cmd.Dir = t.TempDir() // never the project home: nothing may depend on the working directory
	out, err := cmd.CombinedOutput()
	return sb.recorded(t), string(out), err
}

var composeVar = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}`)

// expand applies the compose file's ${VAR}, ${VAR:-default} and ${VAR:?message}.
func expand(s string, env map[string]string) (string, error) {
	var err error
	out := composeVar.ReplaceAllStringFunc(s, func(m string) string {
		g := composeVar.FindStringSubmatch(m)
		v, set := env[g[1]]
		switch {
		case g[2] == ":-" && v == "", g[2] == "-" && !set:
			return g[3]
		case (g[2] == ":?" && v == "") || (g[2] == "?" && !set):
			err = fmt.Errorf("%s: %s", g[1], g[3])
		}
		return v
	})
	return out, err
}

type composeService struct {
	Image       string            `yaml:"image"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
}

// composeLines reads docker-compose.yml's service commands, environment expanded as
// docker compose would with env.
func composeLines(t *testing.T, env map[string]string) map[string]scheduled {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Services map[string]composeService `yaml:"services"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	out := map[string]scheduled{}
	for name, svc := range f.Services {
		if len(svc.Command) == 0 {
			continue // db, jupyter: the image's own command
		}
		s := scheduled{origin: "docker-compose.yml service " + name, env: map[string]string{}}
		for k, v := range svc.Environment {
			if s.env[k], err = expand(v, env); err != nil {
				t.Fatalf("%s: environment %s: %v", s.origin, k, err)
			}
		}
		s.argv = svc.Command
		if len(s.argv) >= 3 && filepath.Base(s.argv[0]) == "every.sh" {
			s.period, s.argv = s.argv[1], s.argv[2:]
		}
		out[name] = s
	}
	return out
}

// systemdLines reads the ExecStart of every service unit with its Environment=.
func systemdLines(t *testing.T) map[string]scheduled {
	t.Helper()
	units, _ := filepath.Glob(filepath.Join(repoRoot(t), "deploy", "systemd", "*.service"))
	out := map[string]scheduled{}
	for _, u := range units {
		b, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		s := scheduled{origin: "deploy/systemd/" + filepath.Base(u), env: map[string]string{}}
		for k, v := range siteEnv { // EnvironmentFile=/etc/doqscan/doqscan.env
			if k != "POSTGRES_PASSWORD" {
				s.env[k] = v
			}
		}
		for _, l := range strings.Split(string(b), "\n") {
			switch {
			case strings.HasPrefix(l, "Environment="):
				k, v, _ := strings.Cut(strings.TrimPrefix(l, "Environment="), "=")
				s.env[k] = v
			case strings.HasPrefix(l, "ExecStart="):
				s.argv = strings.Fields(strings.TrimPrefix(l, "ExecStart="))
			}
		}
		if len(s.argv) == 0 {
			t.Fatalf("%s: no ExecStart", s.origin)
		}
		out[filepath.Base(u)] = s
	}
	return out
}

// cronLines reads the crontab's commands.
func cronLines(t *testing.T) map[string]scheduled {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "crontab"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]scheduled{}
	for i, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		f := strings.Fields(l)
		if len(f) < 7 || strings.HasPrefix(l, "#") || strings.Contains(f[0], "=") {
			continue
		}
		cmd := strings.Join(f[6:], " ")
		out[fmt.Sprintf("line %d", i+1)] = scheduled{origin: fmt.Sprintf("deploy/crontab line %d", i+1), shell: cmd}
	}
	return out
}

// buildTools builds the real binaries the schedules start.
func buildTools(t *testing.T) string {
	t.Helper()
	bin := t.TempDir()
	args := []string{"build", "-o", bin + "/"}
	for _, tool := range tools {
		args = append(args, "./cmd/"+tool)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = repoRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// checkFlags runs the real binary with the recorded flags and --help last: the flag
// parser accepts every flag and value (typed flags are parsed) before the help stops it.
// It runs in a network namespace of its own with no route anywhere, so a command line
// that reached the tool's work instead of its help could contact nothing.
func checkFlags(t *testing.T, origin, bin string, argv []string, env map[string]string) {
	t.Helper()
	tool := filepath.Base(argv[0])
	args := append(append(testsupport.UnshareNet(), filepath.Join(bin, tool)), argv[1:]...)
	args = append(args, "--help")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "DATABASE_URL=postgres://doqscan@127.0.0.1:1/none?connect_timeout=1"}
	for k, v := range env {
		if k != "DATABASE_URL" {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	cmd.Dir = t.TempDir()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil || !strings.Contains(stdout.String(), "Usage") {
		t.Errorf("%s: %s %s: flags not accepted (%v)\n%s%s", origin, tool, strings.Join(argv[1:], " "), err,
			stderr.String(), tail(stdout.String()))
	}
}

func tail(s string) string {
	if len(s) > 400 {
		return "..." + s[len(s)-400:]
	}
	return s
}

// checkReport checks the report command's arguments with the analysis package's parser.
func checkReport(t *testing.T, origin string, argv []string) {
	t.Helper()
	root := repoRoot(t)
	py := filepath.Join(root, ".venv", "bin", "python")
	if _, err := os.Stat(py); err != nil {
		t.Logf("%s: report arguments not checked: no .venv (./dev install makes it)", origin)
		return
	}
	var args []string
	switch {
	case filepath.Base(argv[0]) == "dev" && len(argv) > 1 && argv[1] == "report":
		args = argv[2:]
	case len(argv) >= 3 && strings.HasPrefix(filepath.Base(argv[0]), "python") && argv[1] == "-m" && argv[2] == "doqscan_analysis.report":
		args = argv[3:]
	default:
		t.Errorf("%s: the report job runs %q, not dev report or python3 -m doqscan_analysis.report", origin, argv)
		return
	}
	cmd := exec.Command(py, append([]string{"-m", "doqscan_analysis.report"}, append(args, "--help")...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("%s: report %s: %v\n%s", origin, strings.Join(args, " "), err, tail(string(out)))
	}
}

func flagValue(argv []string, name string) (string, bool) {
	for i, a := range argv {
		if a == "--" {
			break
		}
		for _, p := range []string{"-" + name, "--" + name} {
			if a == p && i+1 < len(argv) {
				return argv[i+1], true
			}
			if strings.HasPrefix(a, p+"=") {
				return strings.TrimPrefix(a, p+"="), true
			}
		}
	}
	return "", false
}

// checkStarts checks every recorded tool start of one scheduled line: paths under the
// project home, jobrun's flags and its command's flags accepted by the real binaries,
// one vantage point for the lock and the data. It returns the jobs (and direct tools)
// started.
func checkStarts(t *testing.T, origin, home, bin string, starts [][]string, env map[string]string) []string {
	t.Helper()
	var jobs []string
	for _, argv := range starts {
		if !strings.HasPrefix(argv[0], home+"/") {
			t.Errorf("%s: started %s, not a path under the project home", origin, argv[0])
		}
		if filepath.Base(argv[0]) != "jobrun" {
			checkFlags(t, origin, bin, argv, env)
			jobs = append(jobs, filepath.Base(argv[0]))
			continue
		}
		sep := -1
		for i, a := range argv {
			if a == "--" {
				sep = i
				break
			}
		}
		if sep < 0 || sep == len(argv)-1 {
			t.Errorf("%s: jobrun without -- COMMAND: %q", origin, argv)
			continue
		}
		job, _ := flagValue(argv[:sep], "job")
		jobs = append(jobs, job)
		checkFlags(t, origin, bin, argv[:sep], env)
		child := argv[sep+1:]
		if job == "report" {
			checkReport(t, origin, child)
			continue
		}
		if !strings.HasPrefix(child[0], home+"/") {
			t.Errorf("%s: jobrun --job %s runs %s, not a path under the project home", origin, job, child[0])
		}
		checkFlags(t, origin, bin, child, env)
		// The lock and the stored data name one vantage point.
		lock, ok := flagValue(argv[:sep], "vantage")
		if !ok {
			t.Errorf("%s: jobrun --job %s without --vantage", origin, job)
		}
		data, ok := flagValue(child, "vantage")
		if !ok || data != lock {
			t.Errorf("%s: jobrun locks vantage %q but %s stores under %q (explicit: %v)", origin, lock,
				filepath.Base(child[0]), data, ok)
		}
		if lock != siteEnv["DOQSCAN_VANTAGE"] {
			t.Errorf("%s: vantage %q, want DOQSCAN_VANTAGE=%s", origin, lock, siteEnv["DOQSCAN_VANTAGE"])
		}
	}
	sort.Strings(jobs)
	return jobs
}

// absolutePaths reports a command-line word that names a path relative to the working
// directory.
func absolutePaths(t *testing.T, origin string, words []string) {
	t.Helper()
	for _, w := range words {
		w = strings.TrimSuffix(strings.TrimLeft(w, "0123456789<>&"), ";")
		if strings.Contains(w, "/") && !strings.HasPrefix(w, "/") && !strings.HasPrefix(w, "@DOQSCAN_HOME@") &&
			!strings.Contains(w, "://") {
			t.Errorf("%s: %q is a path relative to the working directory", origin, w)
		}
	}
}

// TestScheduledCommandLines runs every command line of docker-compose.yml, the systemd
// units and the crontab (through deploy/*.sh, with stand-ins recording what they start)
// and checks each tool start against the real binaries' flag parsing: the flags exist,
// their values parse, jobrun and the tool name the same vantage point, and every job of
// the schedule (scan, verify, conncheck, measure, report, the opt-out page) is started.
func TestScheduledCommandLines(t *testing.T) {
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("needs unshare (util-linux): the binaries' flag checks run in an empty network namespace")
	}
	if err := exec.Command("unshare", append(testsupport.UnshareNet(), "true")...).Run(); err != nil {
		t.Skipf("unshare %s does not work here (user namespaces disabled?): %v", strings.Join(testsupport.UnshareNet(), " "), err)
	}
	bin := buildTools(t)
	want := "conncheck measure optout report scan verify"
	t.Run("compose", func(t *testing.T) {
		wantPeriod := map[string]string{"scanner": "weekly", "measure": "hourly", "report": "hourly", "optout": ""}
		all := startAll(t, bin, composeLines(t, siteEnv), "/opt/doqscan", nil, func(name string, s scheduled) {
			if s.env["DOQSCAN_HOME"] != "/opt/doqscan" {
				t.Errorf("%s: DOQSCAN_HOME=%q, want /opt/doqscan", s.origin, s.env["DOQSCAN_HOME"])
			}
			if p, ok := wantPeriod[name]; !ok || s.period != p {
				t.Errorf("%s: every.sh period %q, want %q (hourly or weekly, as the timers)", s.origin, s.period, p)
			}
			absolutePaths(t, s.origin, s.argv)
		})
		if got := strings.Join(all, " "); got != want {
			t.Errorf("the compose services start %q, want %q", got, want)
		}
	})
	t.Run("systemd", func(t *testing.T) {
		all := startAll(t, bin, systemdLines(t), "@DOQSCAN_HOME@", nil, func(_ string, s scheduled) {
			absolutePaths(t, s.origin, s.argv)
		})
		if got := strings.Join(all, " "); got != want {
			t.Errorf("the systemd units start %q, want %q", got, want)
		}
	})
	t.Run("cron", func(t *testing.T) {
		all := startAll(t, bin, cronLines(t), "@DOQSCAN_HOME@", siteEnv, func(_ string, s scheduled) {
			absolutePaths(t, s.origin, strings.Fields(s.shell))
		})
		// The opt-out page is a daemon: systemd runs it, cron cannot.
		if got := strings.Join(all, " "); got != "conncheck measure report scan verify" {
			t.Errorf("the crontab starts %q, want %q", got, "conncheck measure report scan verify")
		}
	})
}

// startAll runs every line (after check looked at it) in a fresh sandbox, with prefix
// as the lines' DOQSCAN_HOME, and returns the tool starts they make, each checked by
// checkStarts against env (nil: the line's own environment), sorted.
func startAll(t *testing.T, bin string, lines map[string]scheduled, prefix string, env map[string]string, check func(name string, s scheduled)) []string {
	t.Helper()
	sb := newSandbox(t)
	var all []string
	for _, name := range sortedKeys(lines) {
		s := lines[name]
		check(name, s)
		starts, out, err := sb.run(t, s, prefix)
		if err != nil {
			t.Errorf("%s: %v\n%s", s.origin, err, out)
		}
		e := env
		if e == nil {
			e = s.env
		}
		all = append(all, checkStarts(t, s.origin, sb.home, bin, starts, e)...)
	}
	sort.Strings(all)
	return all
}

// TestScannerWithoutTargetsSaysWhy: a compose deployment without ZPROBE_ARGS fails at
// once with exit 2, naming the variable, and starts nothing.
func TestScannerWithoutTargetsSaysWhy(t *testing.T) {
	env := map[string]string{}
	for k, v := range siteEnv {
		if k != "ZPROBE_ARGS" {
			env[k] = v
		}
	}
	sb := newSandbox(t)
	s, ok := composeLines(t, env)["scanner"]
	if !ok {
		t.Fatal("docker-compose.yml has no scanner service")
	}
	starts, out, err := sb.run(t, s, "/opt/doqscan")
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Errorf("scanner without ZPROBE_ARGS: %v, want exit 2", err)
	}
	if !strings.Contains(out, "ZPROBE_ARGS") {
		t.Errorf("scanner without ZPROBE_ARGS does not name it:\n%s", out)
	}
	if len(starts) > 0 {
		t.Errorf("scanner without ZPROBE_ARGS started %q", starts)
	}
}

// TestEveryBoundaries: every.sh's schedule is the timers' (weekly: Mondays 00:00 UTC,
// hourly: :00), whatever weekday the epoch fell on.
func TestEveryBoundaries(t *testing.T) {
	every := filepath.Join(repoRoot(t), "deploy", "every.sh")
	next := func(period string, now time.Time) (time.Time, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, every, "--next", period, strconv.FormatInt(now.Unix(), 10)).Output()
		if err != nil {
			return time.Time{}, fmt.Errorf("every.sh --next %s: %v", period, err)
		}
		s, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
		return time.Unix(s, 0).UTC(), err
	}
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC) // a Sunday
	for h := 0; h < 9*24; h += 7 {
		now := start.Add(time.Duration(h)*time.Hour + 17*time.Minute)
		w, err := next("weekly", now)
		if err != nil {
			t.Fatal(err)
		}
		if w.Weekday() != time.Monday || w.Hour() != 0 || w.Minute() != 0 || w.Second() != 0 || !w.After(now) ||
			w.Sub(now) > 7*24*time.Hour {
			t.Errorf("weekly boundary after %s (%s) is %s (%s), want the next Monday 00:00 UTC",
				now.Format(time.RFC3339), now.Weekday(), w.Format(time.RFC3339), w.Weekday())
		}
		hr, err := next("hourly", now)
		if err != nil {
			t.Fatal(err)
		}
		if want := now.Truncate(time.Hour).Add(time.Hour); !hr.Equal(want) {
			t.Errorf("hourly boundary after %s is %s, want %s", now.Format(time.RFC3339), hr.Format(time.RFC3339), want.Format(time.RFC3339))
		}
	}
	// On a boundary, the next one is a whole period later.
	mon := time.Date(2026, 11, 9, 0, 0, 0, 0, time.UTC)
	if w, err := next("weekly", mon); err != nil || !w.Equal(mon.Add(7*24*time.Hour)) {
		t.Errorf("weekly boundary after %s: %s, %v", mon, w, err)
	}
	// A period in seconds (Thursday boundaries) is refused.
	if err := exec.Command(every, "604800", "true").Run(); err == nil {
		t.Error("every.sh 604800 accepted a period other than hourly or weekly")
	}
}

func sortedKeys[V any](m map[string]V) []string {
	var k []string
	for s := range m {
		k = append(k, s)
	}
	sort.Strings(k)
	return k
}

// TestDefaultPathsAbsolute: every default path a scheduled tool prints in --help is
// absolute (derived from the project home), whatever the working directory: a run
// started by systemd or cron in / must not write var/scans there.
func TestDefaultPathsAbsolute(t *testing.T) {
	bin := buildTools(t)
	def := regexp.MustCompile(`\(default "([^"]*)"\)`)
	for _, argv := range [][]string{{"zprobe", "scan"}, {"zprobe", "send"}, {"zprobe", "blocklist"}, {"verify"},
		{"measure"}, {"optout"}, {"jobrun"}} {
		cmd := exec.Command(filepath.Join(bin, argv[0]), append(argv[1:], "--help")...)
		cmd.Dir = t.TempDir()
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
		out, err := cmd.Output()
		if err != nil {
			t.Errorf("%s --help: %v", argv, err)
			continue
		}
		n := 0
		for _, m := range def.FindAllStringSubmatch(string(out), -1) {
			v := m[1]
			if !strings.Contains(v, "/") || strings.Contains(v, "://") || regexp.MustCompile(`^[0-9a-f.:]+/\d+$`).MatchString(v) {
				continue
			}
			n++
			if !filepath.IsAbs(v) {
				t.Errorf("%s: default path %q is relative to the working directory", strings.Join(argv, " "), v)
			}
		}
		t.Logf("%s: %d default paths", strings.Join(argv, " "), n)
	}
}
