package peers

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// stopGrace is how long a peer gets to exit after SIGTERM before SIGKILL.
const stopGrace = 5 * time.Second

// proc is one running peer process.
type proc struct {
	name    string
	pid     int
	cmd     *exec.Cmd // nil when adopted from a pid file
	exited  chan struct{}
	logPath string
	pidPath string
}

// launch starts argv (wrapped in `ip netns exec <inst>-peers` when cfg.Inst is set),
// output to <RunDir>/<name>.log, pid to <RunDir>/<name>.pid. The process gets its own
// process group so a terminal's ^C to `testnet up` does not reach it; Stop or
// StopInstance ends it.
func launch(cfg Config, s Spec, argv []string) (*proc, error) {
	if cfg.Inst != "" {
		argv = append([]string{"ip", "netns", "exec", cfg.Inst + "-peers"}, argv...)
	}
	p := &proc{
		name:    s.Name(),
		exited:  make(chan struct{}),
		logPath: filepath.Join(cfg.RunDir, s.Name()+".log"),
		pidPath: filepath.Join(cfg.RunDir, s.Name()+".pid"),
	}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("peers: %w", err)
	}
	defer logf.Close()
	fmt.Fprintf(logf, "# %s\n", strings.Join(argv, " "))
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = cfg.RunDir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), "RUST_LOG=info", "PYTHONUNBUFFERED=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("peers: start %s: %w", p.name, err)
	}
	p.cmd, p.pid = cmd, cmd.Process.Pid
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	// `ip netns exec` execs the server in place, so this pid is the server's.
	if err := os.WriteFile(p.pidPath, []byte(strconv.Itoa(p.pid)+"\n"+serverArgv(argv)[0]+"\n"), 0o644); err != nil {
		p.stop(cfg.Log)
		return nil, fmt.Errorf("peers: %w", err)
	}
	return p, nil
}

// serverArgv strips an `ip netns exec NS` prefix.
func serverArgv(argv []string) []string {
	if len(argv) > 4 && argv[0] == "ip" && argv[1] == "netns" && argv[2] == "exec" {
		return argv[4:]
	}
	return argv
}

// running reports whether the process is still alive.
func (p *proc) running() bool {
	if p.cmd != nil {
		select {
		case <-p.exited:
			return false
		default:
			return true
		}
	}
	return syscall.Kill(p.pid, 0) == nil
}

// stop sends SIGTERM, waits up to stopGrace, then SIGKILL; it removes the pid file.
func (p *proc) stop(log *slog.Logger) error {
	defer os.Remove(p.pidPath)
	if !p.running() {
		return nil
	}
	_ = syscall.Kill(p.pid, syscall.SIGTERM)
	if p.waitExit(stopGrace) {
		log.Debug("peer stopped", "peer", p.name, "pid", p.pid)
		return nil
	}
	log.Warn("peer ignored SIGTERM, killing", "peer", p.name, "pid", p.pid)
	_ = syscall.Kill(p.pid, syscall.SIGKILL)
	if !p.waitExit(stopGrace) {
		return fmt.Errorf("peers: %s (pid %d) survived SIGKILL", p.name, p.pid)
	}
	return nil
}

func (p *proc) waitExit(d time.Duration) bool {
	if p.cmd != nil {
		select {
		case <-p.exited:
			return true
		case <-time.After(d):
			return false
		}
	}
	// Not our child: poll /proc (there is no exit notification for a non-child).
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if !p.running() || zombie(p.pid) {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

func zombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] == 'Z'
}

// pidAlive reports whether the pid file names a live process still running the binary
// it records.
func pidAlive(pidFile string) bool {
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return false
	}
	pid, err := strconv.Atoi(f[0])
	if err != nil {
		return false
	}
	cmdline, err := os.ReadFile("/proc/" + f[0] + "/cmdline")
	return err == nil && strings.Contains(string(cmdline), filepath.Base(f[1])) && !zombie(pid)
}

// stopFromPidFiles stops every peer listed in runDir/*.pid whose process still runs
// the binary recorded there (a recycled pid is left alone).
func stopFromPidFiles(runDir string, log *slog.Logger) error {
	files, err := filepath.Glob(filepath.Join(runDir, "*.pid"))
	if err != nil {
		return fmt.Errorf("peers: %w", err)
	}
	var errs []error
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		lines := strings.Fields(string(b))
		if len(lines) < 2 {
			os.Remove(f)
			continue
		}
		pid, err := strconv.Atoi(lines[0])
		if err != nil {
			os.Remove(f)
			continue
		}
		exe := lines[1]
		cmdline, err := os.ReadFile("/proc/" + lines[0] + "/cmdline")
		if err != nil || !strings.Contains(string(cmdline), filepath.Base(exe)) {
			os.Remove(f) // gone, or the pid now belongs to something else
			continue
		}
		p := &proc{name: strings.TrimSuffix(filepath.Base(f), ".pid"), pid: pid, pidPath: f}
		errs = append(errs, p.stop(log))
	}
	return errors.Join(errs...)
}

// Running is one peer recorded in a run directory's pid files.
type Running struct {
	Name   string // the peer's spec name (pid file name), e.g. "coredns-198.19.3.4"
	Binary string // the binary recorded with the pid
	Pid    int
	Alive  bool // the process still runs that binary
}

// ListRunning lists the peers recorded in runDir/*.pid (what `testnet status` shows),
// sorted by name; an unreadable or malformed pid file is listed with pid 0, not alive.
func ListRunning(runDir string) ([]Running, error) {
	files, err := filepath.Glob(filepath.Join(runDir, "*.pid"))
	if err != nil {
		return nil, err
	}
	var out []Running
	for _, f := range files {
		r := Running{Name: strings.TrimSuffix(filepath.Base(f), ".pid")}
		if b, err := os.ReadFile(f); err == nil {
			if fs := strings.Fields(string(b)); len(fs) >= 2 {
				r.Pid, _ = strconv.Atoi(fs[0])
				r.Binary = filepath.Base(fs[1])
			}
		}
		r.Alive = r.Pid > 0 && pidAlive(f)
		out = append(out, r)
	}
	return out, nil // Glob returns names sorted
}
