package peers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"

	"github.com/doqscan/doqscan/internal/labnet"
	"github.com/doqscan/doqscan/internal/testbed/netns"
)

// Interface names inside the namespaces (names are per namespace, so they are fixed).
const (
	inetSideIf = "peers0" // in <inst>-inet
	peerSideIf = "inet0"  // in <inst>-peers
)

// probeSource is the source address of packets the internet namespace sends to a peer
// (readiness probes): in 198.19.0.0/24, which the population leaves unassigned
// (docs/population.md), and local in the internet namespace through its AnyIP route.
var probeSource = netip.MustParseAddr("198.19.0.254")

// The veth's fixed link-local addresses: IPv6 peers are routed through them in both
// directions (no neighbour proxying: the kernel answers neighbour solicitations only for
// addresses of the receiving interface, and a peer's address is on lo).
var (
	inetSideLL = netip.MustParseAddr("fe80::1")
	peerSideLL = netip.MustParseAddr("fe80::2")
)

// Namespace is `<inst>-peers`: the peer addresses on its loopback, a veth to
// `<inst>-inet`, and a /32 route per address in the internet namespace's local table.
type Namespace struct {
	inst string
}

// Name is the namespace's name, <inst>-peers.
func (n *Namespace) Name() string { return n.inst + "-peers" }
func (n *Namespace) inet() string { return n.inst + "-inet" }

// SetupNamespace creates (or re-creates) the peers namespace for inst and routes addrs
// into it. The internet namespace must exist.
func SetupNamespace(ctx context.Context, inst string, addrs []netip.Addr) (*Namespace, error) {
	n := &Namespace{inst: inst}
	if _, err := os.Stat("/run/netns/" + n.inet()); err != nil {
		return nil, fmt.Errorf("peers: internet namespace %s does not exist (testnet up first): %w", n.inet(), err)
	}
	// A leftover from a crashed run would hold stale routes: start clean.
	if err := n.Teardown(); err != nil {
		return nil, err
	}
	ns, inet := n.Name(), n.inet()
	cmds := [][]string{
		{"netns", "add", ns},
		{"-n", ns, "link", "set", "lo", "up"},
		{"-n", inet, "link", "add", inetSideIf, "type", "veth", "peer", "name", peerSideIf, "netns", ns},
		{"-n", inet, "link", "set", inetSideIf, "up", "alias", labnet.Alias(inst)},
		{"-n", ns, "link", "set", peerSideIf, "up", "alias", labnet.Alias(inst)},
		// The testbed's space (and nothing else: no default route, so nothing can lead
		// out) goes to the internet namespace, which answers ARP for it (proxy_arp) and
		// forwards it on.
		{"-n", ns, "route", "add", testbedPrefix.String(), "dev", peerSideIf},
	}
	v6 := false
	for _, a := range addrs {
		if a.Is6() {
			cmds = append(cmds, []string{"-n", ns, "addr", "add", a.String() + "/128", "dev", "lo", "nodad"})
			v6 = true
			continue
		}
		cmds = append(cmds,
			[]string{"-n", ns, "addr", "add", a.String() + "/32", "dev", "lo"},
		)
	}
	if v6 {
		// IPv6: the testbed's 2001:2::/48 (and nothing else) via the internet side's
		// fixed link-local address; the internet namespace routes each peer address to
		// the peer side's (below).
		cmds = append(cmds,
			[]string{"-n", inet, "addr", "add", inetSideLL.String() + "/64", "dev", inetSideIf, "nodad"},
			[]string{"-n", ns, "addr", "add", peerSideLL.String() + "/64", "dev", peerSideIf, "nodad"},
			[]string{"-n", ns, "-6", "route", "add", testbedPrefix6.String(), "via", inetSideLL.String(), "dev", peerSideIf})
	}
	for _, c := range cmds {
		if err := ip(ctx, c...); err != nil {
			n.Teardown()
			return nil, err
		}
	}
	for _, a := range addrs {
		if a.Is6() {
			// In the local table, longest prefix wins over `local 2001:2:0:8000::/49 dev lo`.
			if err := ip(ctx, "-n", inet, "-6", "route", "add", "table", "local", a.String()+"/128",
				"via", peerSideLL.String(), "dev", inetSideIf); err != nil {
				n.Teardown()
				return nil, err
			}
			continue
		}
		// In the local table, longest prefix wins over `local 198.19.0.0/16 dev lo`.
		// src: packets the internet namespace itself sends to a peer (readiness probes)
		// need a source the peer can answer; the AnyIP range provides one.
		route := []string{"-n", inet, "route", "add", "table", "local", a.String() + "/32", "dev", inetSideIf}
		if err := ip(ctx, append(route, "src", probeSource.String())...); err != nil {
			if err := ip(ctx, route...); err != nil {
				n.Teardown()
				return nil, err
			}
		}
	}
	// proxy_delay=0: the kernel answers a broadcast ARP request for a proxied address
	// after a random 0..proxy_delay (0.8 s by default), and the peers namespace resolves
	// each vantage address separately (its route has no gateway), so a peer's first
	// reply to every new vantage address would wait up to 0.8 s: a QUIC client meets a
	// PTO there. Without the delay the reply comes at once.
	sysctls := map[string][]string{
		inet: {"net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1", "net.ipv4.conf." + inetSideIf + ".proxy_arp=1",
			"net.ipv4.neigh." + inetSideIf + ".proxy_delay=0",
			"net.ipv4.conf." + inetSideIf + ".rp_filter=0", "net.ipv4.conf.all.rp_filter=0"},
		ns: {"net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf." + peerSideIf + ".rp_filter=0",
			"net.ipv6.conf.all.accept_ra=0", "net.ipv6.conf.default.accept_ra=0", "net.ipv6.conf.all.autoconf=0",
			"net.ipv6.conf.default.autoconf=0", "net.ipv6.conf.all.accept_redirects=0"},
	}
	for nsName, kv := range sysctls {
		args := append([]string{"netns", "exec", nsName, "sysctl", "-q", "-w"}, kv...)
		if err := ip(ctx, args...); err != nil {
			n.Teardown()
			return nil, err
		}
	}
	return n, nil
}

// Teardown deletes the peers namespace; its veth pair, and with it the routes in the
// internet namespace, go with it. Missing namespaces are fine.
func (n *Namespace) Teardown() error {
	if _, err := os.Stat("/run/netns/" + n.Name()); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	// The inet end disappears with its peer; delete it explicitly too in case the
	// namespace lingers (a process still inside keeps it alive).
	if _, err := os.Stat("/run/netns/" + n.inet()); err == nil {
		_ = ip(context.Background(), "-n", n.inet(), "link", "del", inetSideIf)
	}
	return ip(context.Background(), "netns", "del", n.Name())
}

func ip(ctx context.Context, args ...string) error {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, "ip", args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("peers: ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

// inNamespace runs fn in network namespace name through netns.Do (the caller's namespace
// when name is empty).
func inNamespace(name string, fn func() error) error {
	if name == "" {
		return fn()
	}
	return netns.Do(name, fn)
}
