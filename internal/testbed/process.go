package testbed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/doqscan/doqscan/internal/testbed/netns"
	"github.com/doqscan/doqscan/internal/testbed/proc"
)

// service is a detached process started in a namespace, tracked by a pid file.
type service struct {
	Name string // pid file <state>/<name>.pid, log <state>/<name>.log
	NS   string
	Argv []string
	Env  []string
}

// start runs svc detached (own session, output appended to its log file) inside its
// namespace and waits for the readiness line (proc.SignalReady). The process keeps
// running after the caller exits.
func start(ctx context.Context, state string, svc service, timeout time.Duration) (int, error) {
	// ip netns exec execs the program in place: the pid is the program's.
	p, err := proc.Start(ctx, proc.Spec{
		Name:   svc.Name,
		Argv:   append([]string{"ip", "netns", "exec", svc.NS}, svc.Argv...),
		Env:    svc.Env,
		Dir:    "/",
		Log:    filepath.Join(state, svc.Name+".log"),
		Detach: true,
		Ready:  timeout,
	})
	if err != nil {
		return 0, err
	}
	if err := os.WriteFile(filepath.Join(state, svc.Name+".pid"), []byte(strconv.Itoa(p.Pid)+"\n"), 0o644); err != nil {
		return p.Pid, err
	}
	return p.Pid, nil
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
	return proc.Alive(pid)
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
			errs = append(errs, proc.StopPid(p, 5*time.Second))
		}
	}
	return errors.Join(errs...)
}
