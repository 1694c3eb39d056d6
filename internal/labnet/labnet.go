// Package labnet keeps the lab address space inside the lab. The simulated internet
// (bin/testnet) lives in 198.18.0.0/15 (RFC 2544) and 2001:2::/48 (RFC 5180), inside
// network namespaces the project creates; the testbed marks every link it creates with
// the interface alias "doqscan-testbed:<instance>" (Alias). A Guard lets a tool contact
// an address of those prefixes only when the kernel's route to it leaves by a marked
// link and the process is not in the host's initial network namespace: started on the
// host instead of inside `bin/testnet exec -- ...`, a tool refuses (RefusedError, exit
// code 5) instead of sending lab traffic out through the host's default route.
//
// Addresses outside the lab prefixes (the real internet, loopback) are not this
// package's business: the blocklist and the opt-outs govern them.
package labnet

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
)

// Prefixes are the lab prefixes the guard watches.
var Prefixes = []netip.Prefix{
	netip.MustParsePrefix("198.18.0.0/15"), // RFC 2544 benchmarking
	netip.MustParsePrefix("2001:2::/48"),   // RFC 5180 benchmarking
}

// AliasPrefix starts the alias of every link the testbed creates.
const AliasPrefix = "doqscan-testbed:"

// Alias is the interface alias the testbed sets on the links of instance.
func Alias(instance string) string { return AliasPrefix + instance }

// Marked reports whether an interface alias is the testbed's mark.
func Marked(alias string) bool {
	return strings.HasPrefix(alias, AliasPrefix) && len(alias) > len(AliasPrefix)
}

// Fix is what a refusal tells the operator to do.
const Fix = "run the command inside the simulated internet: bin/testnet exec -- COMMAND (tests: testbed.RunInVantage)"

// RefusedError says why a lab destination may not be contacted from here. Exit code 5
// (missing prerequisite: the testbed) in package cli.
type RefusedError struct {
	Dst       netip.Addr
	Prefix    netip.Prefix // the lab prefix Dst is in
	Interface string       // the interface the route would leave by ("" if unknown)
	Reason    string
}

func (e *RefusedError) Error() string {
	via := "an unknown interface"
	if e.Interface != "" {
		via = "interface " + e.Interface
	}
	return fmt.Sprintf("refusing to contact %s: it is in the lab prefix %s, but its route leaves by %s, %s; %s",
		e.Dst, e.Prefix, via, e.Reason, Fix)
}

// Prefix returns the lab prefix that contains a, if any.
func Prefix(a netip.Addr) (netip.Prefix, bool) {
	a = a.Unmap()
	for _, p := range Prefixes {
		if p.Contains(a) {
			return p, true
		}
	}
	return netip.Prefix{}, false
}

// Route is what the kernel says about the way to a destination.
type Route struct {
	NoRoute   bool   // no route (unreachable, prohibit, blackhole): nothing can be sent
	Interface string // the output interface
	Alias     string // its alias ("" when none)
	HostNS    bool   // the lookup ran in the host's initial network namespace
}

// Guard checks lab destinations; the verdict for each lab prefix is taken once (by the
// first of its destinations that has a route) and kept for the Guard's life, one run.
// Safe for concurrent use.
type Guard struct {
	mu      sync.Mutex
	verdict map[netip.Prefix]error // nil: allowed
	lookup  func(netip.Addr) (Route, error)
}

// NewGuard returns a guard that asks the kernel (netlink) of the calling process's
// network namespace.
func NewGuard() *Guard { return &Guard{lookup: Lookup} }

// Check returns nil when dst may be contacted from here, a *RefusedError otherwise.
// Destinations outside the lab prefixes always pass. A lab destination with no route
// at all passes too (nothing can be sent to it) without settling its prefix's verdict.
func (g *Guard) Check(dst netip.Addr) error {
	p, ok := Prefix(dst)
	if !ok {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if v, done := g.verdict[p]; done {
		if v != nil {
			r := *v.(*RefusedError) //nolint:errorlint // the verdict map holds only *RefusedError values, never wrapped
			r.Dst = dst.Unmap()
			return &r
		}
		return nil
	}
	r, err := g.lookup(dst.Unmap())
	var verdict error
	switch {
	case err != nil:
		verdict = &RefusedError{Dst: dst.Unmap(), Prefix: p, Reason: "the route lookup failed (" + err.Error() + ")"}
	case r.NoRoute:
		return nil
	case r.HostNS:
		verdict = &RefusedError{Dst: dst.Unmap(), Prefix: p, Interface: r.Interface,
			Reason: "and this process runs in the host's network namespace, not in one the testbed created"}
	case !Marked(r.Alias):
		verdict = &RefusedError{Dst: dst.Unmap(), Prefix: p, Interface: r.Interface,
			Reason: fmt.Sprintf("which is not a link the testbed created (its alias %q lacks the mark %q)", r.Alias, AliasPrefix+"<instance>")}
	}
	if g.verdict == nil {
		g.verdict = map[netip.Prefix]error{}
	}
	g.verdict[p] = verdict
	return verdict
}

// Lookup asks the kernel how dst is reached from the calling thread's network namespace
// (RTM_GETROUTE, what `ip route get` sends; then RTM_GETLINK for the interface's name
// and alias) and whether that namespace is the host's initial one.
func Lookup(dst netip.Addr) (Route, error) {
	// The namespace and the netlink socket must be the same thread's.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var r Route
	host, err := inInitialNamespace()
	if err != nil {
		return r, err
	}
	r.HostNS = host
	oif, err := routeGet(dst)
	if errors.Is(err, errNoRoute) {
		r.NoRoute = true
		return r, nil
	}
	if err != nil {
		return r, err
	}
	r.Interface, r.Alias, err = linkGet(oif)
	return r, err
}

// procNetInitIno is the inode of the initial network namespace on kernels that give it
// a fixed one (include/linux/proc_ns.h, Linux 6.x); dynamically numbered namespaces
// start at 0xF0000000, so no other namespace has it.
const procNetInitIno = 0xEFFFFFF9

// inInitialNamespace says whether the calling thread is in the initial network
// namespace: the kernel's fixed inode for it, else the namespace of PID 1 (of a
// container's init, inside a container), else of kthreadd (kernel threads live in the
// initial namespace). When none can be read (not root), it answers false: the link
// mark alone decides.
func inInitialNamespace() (bool, error) {
	self, err := os.Stat("/proc/thread-self/ns/net")
	if err != nil {
		return false, fmt.Errorf("own network namespace: %w", err)
	}
	a := self.Sys().(*syscall.Stat_t)
	if a.Ino == procNetInitIno {
		return true, nil
	}
	for _, pid := range []string{"1", "2"} {
		if pid == "2" {
			if comm, err := os.ReadFile("/proc/2/comm"); err != nil || strings.TrimSpace(string(comm)) != "kthreadd" {
				continue
			}
		}
		ref, err := os.Stat("/proc/" + pid + "/ns/net")
		if err != nil {
			continue
		}
		b := ref.Sys().(*syscall.Stat_t)
		return a.Dev == b.Dev && a.Ino == b.Ino, nil
	}
	return false, nil
}
