package testbed

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/doqscan/doqscan/internal/testbed/netns"
)

// Readiness contract for every long-lived process the testbed starts (the delay line,
// bin/simserver): the process inherits a pipe as file descriptor 3 and the environment
// variable DOQSCAN_READY_FD=3; it writes one line "ready\n" there once it serves (every
// listener bound), then may close it. A process that exits first, or a line other than
// "ready", fails the start with the process's log attached.
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

// service is a detached process started in a namespace, tracked by a pid file.
type service struct {
	Name string // pid file <state>/<name>.pid, log <state>/<name>.log
	NS   string
	Argv []string
	Env  []string
}

// start runs svc detached (own session, output to its log file) inside its namespace and
// waits for the readiness line. The process keeps running after the caller exits.
func start(ctx context.Context, state string, svc service, timeout time.Duration) (int, error) {
	logPath := filepath.Join(state, svc.Name+".log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, err
	}
	defer logf.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	defer pr.Close()
	// ip netns exec execs the program in place: the pid is the program's.
	cmd := exec.Command("ip", append([]string{"netns", "exec", svc.NS}, svc.Argv...)...)
	cmd.Env = append(append(os.Environ(), svc.Env...), fmt.Sprintf("%s=%d", EnvReadyFD, readyFD))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{pw} // fd 3
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Dir = "/"
	if err := cmd.Start(); err != nil {
		pw.Close()
		return 0, fmt.Errorf("starting %s: %w", svc.Name, err)
	}
	pw.Close()
	pid := cmd.Process.Pid
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }() // reaps it if it dies while we live
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(pr).ReadString('\n')
		line <- strings.TrimSpace(s)
	}()
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	fail := func(why error) (int, error) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		return 0, fmt.Errorf("%s: %w; log %s:\n%s", svc.Name, why, logPath, tail(logPath, 20))
	}
	select {
	case l := <-line:
		if l != readyLine {
			// EOF without a line: the process exited or closed the pipe.
			select {
			case err := <-exited:
				return fail(fmt.Errorf("exited before ready (%v)", err))
			case <-tctx.Done():
				return fail(fmt.Errorf("closed its ready pipe without %q", readyLine))
			}
		}
	case <-tctx.Done():
		return fail(fmt.Errorf("not ready within %v: %w", timeout, tctx.Err()))
	}
	if err := os.WriteFile(filepath.Join(state, svc.Name+".pid"), []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		return pid, err
	}
	return pid, nil
}

func tail(path string, n int) string {
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

// readPid returns the pid in <state>/<name>.pid and whether that process is alive and
// inside namespace ns.
func readPid(state, name, ns string) (pid int, alive bool) {
	b, err := os.ReadFile(filepath.Join(state, name+".pid"))
	if err != nil {
		return 0, false
	}
	pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return 0, false
	}
	return pid, inNamespace(pid, ns)
}

// inNamespace reports whether pid runs in the named network namespace (same inode as
// /run/netns/<ns>) and is not a zombie.
func inNamespace(pid int, ns string) bool {
	var a, b unix.Stat_t
	if unix.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &a) != nil || unix.Stat("/run/netns/"+ns, &b) != nil {
		return false
	}
	if a.Ino != b.Ino || a.Dev != b.Dev {
		return false
	}
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	if i := strings.LastIndexByte(string(st), ')'); i > 0 && i+2 < len(st) && st[i+2] == 'Z' {
		return false
	}
	return true
}

// stopPid sends SIGTERM, waits for exit (pidfd, no polling) up to grace, then SIGKILL.
func stopPid(pid int, grace time.Duration) error {
	pfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil
		}
		return fmt.Errorf("pidfd_open %d: %w", pid, err)
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
	return fmt.Errorf("process %d did not exit after SIGKILL", pid)
}

func waitPidfd(pfd int, d time.Duration) bool {
	fds := []unix.PollFd{{Fd: int32(pfd), Events: unix.POLLIN}}
	deadline := time.Now().Add(d)
	for {
		ms := int(time.Until(deadline).Milliseconds())
		if ms < 0 {
			return false
		}
		n, err := unix.Poll(fds, ms)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return n > 0
	}
}

// stopNamespace stops every process left in the namespace (all of them were started by
// the testbed: nothing else lives in its namespaces).
func stopNamespace(ctx context.Context, r netns.Runner, ns string) error {
	pids, err := r.PIDs(ctx, ns)
	if err != nil {
		return nil // namespace gone
	}
	var errs []error
	for _, p := range pids {
		if p != os.Getpid() {
			errs = append(errs, stopPid(p, 5*time.Second))
		}
	}
	return errors.Join(errs...)
}
