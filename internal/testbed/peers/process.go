package peers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/doqscan/doqscan/internal/testbed/proc"
)

// stopGrace is how long a peer gets to exit after SIGTERM before SIGKILL.
const stopGrace = 5 * time.Second

// peerProc is one peer process: a child of this process, or one adopted from a pid file.
type peerProc struct {
	name    string
	pid     int
	child   *proc.Proc // nil when adopted from a pid file
	logPath string
	pidPath string
}

// launch starts argv (wrapped in `ip netns exec <inst>-peers` when cfg.Inst is set),
// output to <RunDir>/<name>.log, pid to <RunDir>/<name>.pid. The process gets its own
// process group so a terminal's ^C to `testnet up` does not reach it; Stop or
// StopInstance ends it.
func launch(cfg Config, s Spec, argv []string) (*peerProc, error) {
	if cfg.Inst != "" {
		argv = append([]string{"ip", "netns", "exec", cfg.Inst + "-peers"}, argv...)
	}
	p := &peerProc{
		name:    s.Name(),
		logPath: filepath.Join(cfg.RunDir, s.Name()+".log"),
		pidPath: filepath.Join(cfg.RunDir, s.Name()+".pid"),
	}
	c, err := proc.Start(context.Background(), proc.Spec{Name: p.name, Argv: argv, Dir: cfg.RunDir,
		Env: []string{"RUST_LOG=info", "PYTHONUNBUFFERED=1"}, Log: p.logPath, Truncate: true})
	if err != nil {
		return nil, fmt.Errorf("peers: %w", err)
	}
	p.child, p.pid = c, c.Pid
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
func (p *peerProc) running() bool {
	if p.child != nil {
		return p.child.Running()
	}
	return proc.Alive(p.pid)
}

// exited is closed when a child exits (never for an adopted process).
func (p *peerProc) exited() <-chan struct{} {
	if p.child != nil {
		return p.child.Done()
	}
	return nil
}

// stop sends SIGTERM, SIGKILL after stopGrace, and removes the pid file.
func (p *peerProc) stop(log *slog.Logger) error {
	defer os.Remove(p.pidPath)
	if !p.running() {
		return nil
	}
	var err error
	if p.child != nil {
		err = p.child.Stop(stopGrace)
	} else {
		err = proc.StopPid(p.pid, stopGrace)
	}
	if err != nil {
		return fmt.Errorf("peers: %s: %w", p.name, err)
	}
	log.Debug("peer stopped", "peer", p.name, "pid", p.pid)
	return nil
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
	return err == nil && strings.Contains(string(cmdline), filepath.Base(f[1])) && proc.Alive(pid)
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
		p := &peerProc{name: strings.TrimSuffix(filepath.Base(f), ".pid"), pid: pid, pidPath: f}
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
