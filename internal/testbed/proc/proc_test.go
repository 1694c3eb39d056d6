package proc

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func spec(t *testing.T, script string, ready time.Duration) Spec {
	return Spec{Name: "t", Argv: []string{"/bin/sh", "-c", script}, Log: filepath.Join(t.TempDir(), "t.log"), Truncate: true, Ready: ready}
}

func TestReady(t *testing.T) {
	p, err := Start(context.Background(), spec(t, `echo ready >&$DOQSCAN_READY_FD; exec sleep 60`, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if !p.Running() || !Alive(p.Pid) {
		t.Fatal("not running after ready")
	}
	if err := p.Stop(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if p.Running() {
		t.Fatal("running after Stop")
	}
	var ee *exec.ExitError
	if err := p.Err(); !errors.As(err, &ee) {
		t.Fatalf("exit of a SIGTERMed process: %v, want an ExitError", err)
	}
}

func TestExitBeforeReady(t *testing.T) {
	_, err := Start(context.Background(), spec(t, `echo boom-in-log; exit 3`, 10*time.Second))
	if err == nil || !strings.Contains(err.Error(), "exited before ready") || !strings.Contains(err.Error(), "boom-in-log") {
		t.Fatalf("err = %v, want exited before ready with the log tail", err)
	}
}

func TestWrongReadyLine(t *testing.T) {
	_, err := Start(context.Background(), spec(t, `echo nope >&$DOQSCAN_READY_FD; exec sleep 60`, 10*time.Second))
	if err == nil {
		t.Fatal("started despite a wrong readiness line")
	}
}

func TestNotReadyInTime(t *testing.T) {
	_, err := Start(context.Background(), spec(t, `exec sleep 60`, 200*time.Millisecond))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want a deadline", err)
	}
}

// A process that ignores SIGTERM is killed after the grace period and reaped.
func TestStopKillsAfterGrace(t *testing.T) {
	p, err := Start(context.Background(), spec(t, `trap '' TERM; echo ready >&$DOQSCAN_READY_FD; while :; do sleep 1; done`, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if err := p.Stop(300 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d < 300*time.Millisecond {
		t.Fatalf("stopped after %v, before the grace period: SIGTERM was not ignored?", d)
	}
	if Alive(p.Pid) {
		t.Fatal("alive after Stop")
	}
}

func TestExitReported(t *testing.T) {
	p, err := Start(context.Background(), spec(t, `exit 7`, 0))
	if err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	var ee *exec.ExitError
	if err := p.Err(); !errors.As(err, &ee) || ee.ExitCode() != 7 {
		t.Fatalf("Err = %v, want exit status 7", err)
	}
	if err := StopPid(p.Pid, time.Second); err != nil {
		t.Fatalf("StopPid of a reaped process: %v", err)
	}
}
