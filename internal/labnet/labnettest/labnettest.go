// Package labnettest gives tests a throwaway network namespace in which nothing can
// leave: its only link is a veth pair with both ends inside it, and its only routes to
// the lab prefixes lead into that pair. A test of the lab guard runs the guard (or a
// whole command) there, so a broken guard still sends nothing beyond the namespace.
package labnettest

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Link is the namespace's veth whose routes lead to the lab prefixes; Peer its other
// end, also inside the namespace, with no address.
const (
	Link = "dqg0"
	Peer = "dqg1"
)

// Namespace is a throwaway network namespace.
type Namespace struct{ Name string }

// Throwaway creates the namespace (deleted when the test ends); it skips the test,
// saying why, without root or iproute2.
func Throwaway(t testing.TB) *Namespace {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a network namespace")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2's ip command")
	}
	b := make([]byte, 3)
	rand.Read(b)
	n := &Namespace{Name: "dqguard" + hex.EncodeToString(b)}
	run(t, "netns", "add", n.Name)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", n.Name).Run() }) //nolint:errcheck // cleanup: the namespace may be gone already
	for _, s := range [][]string{
		{"link", "set", "lo", "up"},
		// Both ends are created inside the namespace: nothing ever appears on the host.
		{"link", "add", Link, "type", "veth", "peer", "name", Peer},
		{"link", "set", Link, "up"},
		{"link", "set", Peer, "up"},
		{"addr", "add", "198.18.250.1/24", "dev", Link},
		{"-6", "addr", "add", "2001:2:0:ff::1/64", "dev", Link, "nodad"},
		{"route", "add", "198.19.0.0/16", "dev", Link},
		{"-6", "route", "add", "2001:2::/48", "dev", Link},
	} {
		run(t, append([]string{"-n", n.Name}, s...)...)
	}
	return n
}

// Mark sets the alias of Link ("" removes it).
func (n *Namespace) Mark(t testing.TB, alias string) {
	t.Helper()
	if alias == "" {
		// iproute2 clears an alias with an empty string.
		run(t, "-n", n.Name, "link", "set", "dev", Link, "alias", "")
		return
	}
	run(t, "-n", n.Name, "link", "set", "dev", Link, "alias", alias)
}

// Command returns argv run inside the namespace.
func (n *Namespace) Command(argv ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", n.Name}, argv...)...)
}

func run(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}
