// Package e2e checks how the wrappers treat the command they run (cli.RunChild):
// `testnet exec` and `jobrun` forward SIGINT, SIGTERM and SIGHUP to it, wait for it and
// exit with its exit code; killed themselves, they leave no orphan; jobrun stops the
// command when the connection holding its lock drops. The command is this test binary
// in helper mode: a doqscan tool in miniature (cli.RunMain) that says "ready" once its
// signal handling is in place and ends gracefully (exit 130) when interrupted.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/store"
	"github.com/doqscan/doqscan/internal/store/storetest"
	"github.com/doqscan/doqscan/internal/testsupport"
)

const helperEnv = "DOQSCAN_SIGNAL_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(helper())
	}
	os.Exit(m.Run())
}

// helper is the child: it prints "ready PID" once SIGINT/SIGTERM are handled, waits to
// be interrupted and returns the context's error, as every doqscan tool does (exit 130).
func helper() int {
	var common cli.Common
	fs := cli.NewFlagSet(cli.Command{Name: "sighelper", Summary: "test helper", Usage: "sighelper"}, &common)
	return cli.RunMain(fs, &common, nil, os.Stderr, func(ctx context.Context, log *slog.Logger, args []string) error {
		fmt.Printf("ready %d\n", os.Getpid())
		<-ctx.Done()
		fmt.Fprintf(os.Stderr, "helper: stopping gracefully: %v\n", context.Cause(ctx))
		return ctx.Err()
	})
}

// timeLimit bounds every wait of these tests: reaching it is a failure, never a
// synchronization.
const timeLimit = 60 * time.Second

// wrapped is a wrapper process running the helper.
type wrapped struct {
	c      *exec.Cmd
	stderr bytes.Buffer
	helper int // the helper's pid, from its ready line
	done   chan error
}

// start runs argv (a wrapper whose command is the helper) and waits for the helper's
// ready line.
func start(t *testing.T, env []string, argv ...string) *wrapped {
	t.Helper()
	w := &wrapped{c: exec.Command(argv[0], argv[1:]...), done: make(chan error, 1)}
	w.c.Env = append(append(os.Environ(), helperEnv+"=1"), env...)
	w.c.Stderr = &w.stderr
	out, err := w.c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if w.c.ProcessState == nil {
			w.c.Process.Kill()
		}
		if w.helper > 0 {
			syscall.Kill(w.helper, syscall.SIGKILL) // only if a failed test left it
		}
	})
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if l := sc.Text(); strings.HasPrefix(l, "ready ") {
				ready <- l
				break
			}
		}
		io.Copy(io.Discard, out)
		close(ready)
		w.done <- w.c.Wait()
	}()
	select {
	case l, ok := <-ready:
		if !ok {
			t.Fatalf("%s ended before the helper was ready: %v\n%s", argv[0], <-w.done, w.stderr.String())
		}
		fmt.Sscanf(l, "ready %d", &w.helper)
	case <-time.After(timeLimit):
		t.Fatalf("no ready line from the helper within %v\n%s", timeLimit, w.stderr.String())
	}
	return w
}

// wait returns the wrapper's exit code.
func (w *wrapped) wait(t *testing.T) int {
	t.Helper()
	select {
	case err := <-w.done:
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		return w.c.ProcessState.ExitCode()
	case <-time.After(timeLimit):
		t.Fatalf("the wrapper did not end within %v\n%s", timeLimit, w.stderr.String())
	}
	return 0
}

// helperGone waits until the helper process has ended (pidfd: it need not be our child).
func helperGone(t *testing.T, pid int) {
	t.Helper()
	fd, err := unixPidfdOpen(pid)
	if errors.Is(err, syscall.ESRCH) {
		return // already gone
	}
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if !pollReadable(fd, timeLimit) {
		t.Fatalf("the helper (pid %d) still runs %v after its wrapper died: orphaned", pid, timeLimit)
	}
}

func testnetInstance(t *testing.T) (bin, name string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("testnet exec needs root (network namespaces)")
	}
	b := make([]byte, 3)
	rand.Read(b)
	name = "sg" + hex.EncodeToString(b)
	// Only the vantage namespace exec enters, empty: the helper sends nothing.
	if out, err := exec.Command("ip", "netns", "add", name+"-vantage").CombinedOutput(); err != nil {
		t.Skipf("cannot create a network namespace: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name+"-vantage").Run() })
	return testsupport.Commands(t, "testnet"), name
}

func TestTestnetExecForwardsSignals(t *testing.T) {
	bin, name := testnetInstance(t)
	self, _ := os.Executable()
	for _, c := range []struct {
		sig  syscall.Signal
		code int
		says string
	}{
		{syscall.SIGTERM, cli.ExitInterrupted, "helper: stopping gracefully: terminated received"},
		{syscall.SIGINT, cli.ExitInterrupted, "helper: stopping gracefully: interrupt received"},
		{syscall.SIGHUP, 128 + int(syscall.SIGHUP), ""}, // the helper does not catch SIGHUP: it dies by it
	} {
		t.Run(c.sig.String(), func(t *testing.T) {
			w := start(t, nil, filepath.Join(bin, "testnet"), "--name", name, "exec", "--", self)
			if err := w.c.Process.Signal(c.sig); err != nil {
				t.Fatal(err)
			}
			if code := w.wait(t); code != c.code {
				t.Errorf("testnet exec exited %d after %v, want %d\n%s", code, c.sig, c.code, w.stderr.String())
			}
			if !strings.Contains(w.stderr.String(), c.says) {
				t.Errorf("the helper did not say %q:\n%s", c.says, w.stderr.String())
			}
			helperGone(t, w.helper)
		})
	}
}

func TestTestnetExecKilledLeavesNoOrphan(t *testing.T) {
	bin, name := testnetInstance(t)
	self, _ := os.Executable()
	w := start(t, nil, filepath.Join(bin, "testnet"), "--name", name, "exec", "--", self)
	if err := w.c.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	helperGone(t, w.helper)
	w.wait(t) // its stderr pipe closes once the helper has gone too
	if !strings.Contains(w.stderr.String(), "helper: stopping gracefully: terminated received") {
		t.Errorf("the helper was not stopped by SIGTERM:\n%s", w.stderr.String())
	}
}

// jobrunEnv is a fresh database and the jobrun binary.
func jobrunEnv(t *testing.T) (bin string, s *store.Store, env []string) {
	t.Helper()
	s, url := storetest.OpenURL(t)
	return testsupport.Commands(t, "jobrun"), s, []string{"DATABASE_URL=" + url}
}

func jobRow(t *testing.T, s *store.Store) (status, detail string) {
	t.Helper()
	if err := s.Pool.QueryRow(context.Background(), `SELECT status, detail FROM job_runs
		WHERE job = 'measure' AND vantage_id = 'vpsig' AND run_key = '2026-11-22T04'`).Scan(&status, &detail); err != nil {
		t.Fatal(err)
	}
	return status, detail
}

func TestJobrunForwardsSIGTERM(t *testing.T) {
	bin, s, env := jobrunEnv(t)
	self, _ := os.Executable()
	w := start(t, env, filepath.Join(bin, "jobrun"), "--job", "measure", "--vantage", "vpsig",
		"--now", "2026-11-22T04:05:00Z", "--", self)
	if err := w.c.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := w.wait(t); code != cli.ExitInterrupted {
		t.Errorf("jobrun exited %d after SIGTERM, want %d\n%s", code, cli.ExitInterrupted, w.stderr.String())
	}
	if !strings.Contains(w.stderr.String(), "helper: stopping gracefully: terminated received") {
		t.Errorf("the helper did not end gracefully:\n%s", w.stderr.String())
	}
	helperGone(t, w.helper)
	if status, detail := jobRow(t, s); status != "interrupted" || !strings.Contains(detail, "exited with 130") {
		t.Errorf("job_runs: %s %q, want interrupted with the command's exit 130", status, detail)
	}
}

func TestJobrunLockConnectionLost(t *testing.T) {
	bin, s, env := jobrunEnv(t)
	self, _ := os.Executable()
	// A long ping interval: the loss must be noticed from the connection itself.
	w := start(t, env, filepath.Join(bin, "jobrun"), "--job", "measure", "--vantage", "vpsig",
		"--now", "2026-11-22T04:05:00Z", "--lock-check", "1h", "--", self)
	ctx := context.Background()
	var holders []int32
	rows, err := s.Pool.Query(ctx, `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var pid int32
		rows.Scan(&pid)
		holders = append(holders, pid)
	}
	if rows.Err() != nil || len(holders) != 1 {
		t.Fatalf("advisory lock holders %v (%v), want jobrun's one", holders, rows.Err())
	}
	var ok bool
	if err := s.Pool.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, holders[0]).Scan(&ok); err != nil || !ok {
		t.Fatalf("pg_terminate_backend: %v %v", ok, err)
	}
	if code := w.wait(t); code != cli.ExitDatabase {
		t.Errorf("jobrun exited %d after losing its lock, want %d\n%s", code, cli.ExitDatabase, w.stderr.String())
	}
	for _, want := range []string{"job lock lost", "helper: stopping gracefully: terminated received"} {
		if !strings.Contains(w.stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, w.stderr.String())
		}
	}
	helperGone(t, w.helper)
	if status, detail := jobRow(t, s); status != "failed" || !strings.Contains(detail, store.ErrLockLost.Error()) {
		t.Errorf("job_runs: %s %q, want failed with the lock's loss", status, detail)
	}
}
