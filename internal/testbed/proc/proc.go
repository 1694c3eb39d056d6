// Package proc supervises the child processes of the testbed (the delay line,
// bin/simserver, the third-party peers): it starts a process with its output in a log
// file, optionally waits for its readiness line, reaps it and reports its exit, and stops
// it (SIGTERM, then SIGKILL after a grace period) whether it is a child of this process or
// one adopted from a pid file.
package proc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Readiness contract for a process started with Spec.Ready > 0: the process inherits a
// pipe as file descriptor 3 and the environment variable DOQSCAN_READY_FD=3; it writes
// one line "ready\n" there once it serves (every listener bound), then may close it. A
// process that exits first, or a line other than "ready", fails the start with the tail
// of its log attached.
const (
	EnvReadyFD = "DOQSCAN_READY_FD"
	readyFD    = 3
	readyLine  = "ready"
)

// SignalReady writes the readiness line to DOQSCAN_READY_FD if it is set (no-op otherwise).
func SignalReady() error {
	s := os.Getenv(EnvReadyFD)
	if s == "" {
		return nil
	}
	fd, err := strconv.Atoi(s)
	if err != nil {
		return fmt.Errorf("bad %s=%q", EnvReadyFD, s)
	}
	f := os.NewFile(uintptr(fd), "ready")
	defer f.Close()
	_, err = f.WriteString(readyLine + "\n")
	return err
}

// Spec is a process to start.
type Spec struct {
	Name string   // for errors and logs
	Argv []string // program and arguments
	Env  []string // added to this process's environment
	Dir  string   // working directory ("" = this process's)
	Log  string   // stdout and stderr go to this file
	// Truncate empties Log first (else output is appended) and writes the command line
	// as its first line.
	Truncate bool
	// Detach puts the process in its own session: it keeps running after this process
	// exits. Otherwise it gets its own process group, so a terminal's ^C does not reach it.
	Detach bool
	// Ready > 0 waits this long for the readiness line (see SignalReady).
	Ready time.Duration
}

// Proc is a started child process. Its exit is reaped by a goroutine of this package.
type Proc struct {
	Name string
	Pid  int
	Log  string
	done chan struct{}
	err  error
}

// Start starts s. With s.Ready > 0 it returns once the process is ready, or an error
// (the process killed and reaped) when it exits first, says something else, or ctx or
// the wait ends.
func Start(ctx context.Context, s Spec) (*Proc, error) {
	if len(s.Argv) == 0 {
		return nil, fmt.Errorf("proc: %s: empty command", s.Name)
	}
	flags := os.O_CREATE | os.O_WRONLY | os.O_APPEND
	if s.Truncate {
		flags = os.O_CREATE | os.O_WRONLY | os.O_TRUNC
	}
	logf, err := os.OpenFile(s.Log, flags, 0o644)
	if err != nil {
		return nil, fmt.Errorf("proc: %s: %w", s.Name, err)
	}
	defer logf.Close()
	if s.Truncate {
		fmt.Fprintf(logf, "# %s\n", strings.Join(s.Argv, " "))
	}
	cmd := exec.Command(s.Argv[0], s.Argv[1:]...)
	cmd.Dir = s.Dir
	cmd.Env = append(os.Environ(), s.Env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if s.Detach {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	} else {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	var pr, pw *os.File
	if s.Ready > 0 {
		if pr, pw, err = os.Pipe(); err != nil {
			return nil, fmt.Errorf("proc: %s: %w", s.Name, err)
		}
		defer pr.Close()
		cmd.Env = append(cmd.Env, fmt.Sprintf("%s=%d", EnvReadyFD, readyFD))
		cmd.ExtraFiles = []*os.File{pw} // fd 3
	}
	err = cmd.Start()
	if pw != nil {
		pw.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("proc: start %s: %w", s.Name, err)
	}
	p := &Proc{Name: s.Name, Pid: cmd.Process.Pid, Log: s.Log, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	if s.Ready > 0 {
		if err := p.awaitReady(ctx, pr, s.Ready); err != nil {
			_ = syscall.Kill(p.Pid, syscall.SIGKILL)
			<-p.done
			return nil, fmt.Errorf("%s: %w; log %s:\n%s", s.Name, err, s.Log, Tail(s.Log, 20))
		}
	}
	return p, nil
}

func (p *Proc) awaitReady(ctx context.Context, pr *os.File, timeout time.Duration) error {
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(pr).ReadString('\n')
		line <- strings.TrimSpace(s)
	}()
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	select {
	case l := <-line:
		switch l {
		case readyLine:
			return nil
		case "":
		default:
			return fmt.Errorf("wrote %q on its ready pipe instead of %q", l, readyLine)
		}
		// EOF without the line: the process exited or closed the pipe.
		select {
		case <-p.done:
			return fmt.Errorf("exited before ready (%v)", p.err)
		case <-tctx.Done():
			return fmt.Errorf("closed its ready pipe without %q", readyLine)
		}
	case <-tctx.Done():
		return fmt.Errorf("not ready within %v: %w", timeout, tctx.Err())
	}
}

// Done is closed once the process has exited and been reaped.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err is the exit status (nil for exit code 0) once Done is closed.
func (p *Proc) Err() error {
	<-p.done
	return p.err
}

// Running reports whether the process has not exited yet.
func (p *Proc) Running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Stop sends SIGTERM, SIGKILL after grace, and returns once the process is reaped.
func (p *Proc) Stop(grace time.Duration) error {
	if !p.Running() {
		return nil
	}
	if err := StopPid(p.Pid, grace); err != nil {
		return err
	}
	<-p.done
	return nil
}

// ErrSurvived is returned by StopPid when a process outlives SIGKILL.
var ErrSurvived = errors.New("process did not exit after SIGKILL")

// StopPid stops any process by pid, a child or not: SIGTERM, a wait of up to grace for
// its exit (a pidfd, no polling), then SIGKILL. A pid that does not exist is stopped.
// A child of this process is reaped by whoever waits for it (Proc does).
func StopPid(pid int, grace time.Duration) error {
	pfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil
		}
		return fmt.Errorf("proc: pidfd_open %d: %w", pid, err)
	}
	defer unix.Close(pfd)
	_ = unix.PidfdSendSignal(pfd, unix.SIGTERM, nil, 0)
	if waitPidfd(pfd, grace) {
		return nil
	}
	_ = unix.PidfdSendSignal(pfd, unix.SIGKILL, nil, 0)
	if waitPidfd(pfd, 5*time.Second) {
		return nil
	}
	return fmt.Errorf("proc: %d: %w", pid, ErrSurvived)
}

// waitPidfd waits up to d for the process behind pfd to exit (the pidfd turns readable).
func waitPidfd(pfd int, d time.Duration) bool {
	fds := []unix.PollFd{{Fd: int32(pfd), Events: unix.POLLIN}}
	deadline := time.Now().Add(d)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		ms := int((left + time.Millisecond - 1) / time.Millisecond) // round up: never wake early
		n, err := unix.Poll(fds, ms)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return n > 0
	}
}

// Alive reports whether pid exists and is not a zombie.
func Alive(pid int) bool {
	st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(st), ')')
	return !(i > 0 && i+2 < len(st) && st[i+2] == 'Z')
}

// Tail returns the last n lines of the file at path ("" if it cannot be read).
func Tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
