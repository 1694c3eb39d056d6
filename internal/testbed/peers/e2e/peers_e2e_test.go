// Package e2e starts the third-party DNS servers (CoreDNS, hickory-dns, aioquic, ngtcp2,
// dnsproxy) in scratch network namespaces and checks each answers real queries, stops
// cleanly, and reaches new addresses promptly. It needs root (network namespaces) and
// the installed peers (./dev install); each test skips, saying why, without them.
package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/certs/certtest"
	"github.com/doqscan/doqscan/internal/testbed/netns"
	"github.com/doqscan/doqscan/internal/testbed/peers"
	"github.com/doqscan/doqscan/internal/testbed/proc"
)

// selfSigned writes a self-signed ECDSA certificate for test.com to dir.
func selfSigned(t *testing.T, dir string) (cert, key string) {
	t.Helper()
	leaf, k := certtest.SelfSignedLeaf(t, certtest.ECDSA, "test.com")
	return certtest.WritePEM(t, dir, leaf, k)
}

// requireInstalled skips when a peer binary is missing (./dev install installs them).
func requireInstalled(t *testing.T, root string, kinds ...peers.Kind) {
	t.Helper()
	for _, k := range kinds {
		if err := peers.Installed(root, k); err != nil {
			t.Skipf("%v", err)
		}
	}
}

// scratchInternet creates `<inst>-inet` the way the testbed does (AnyIP for
// 198.19.0.0/16 on lo) and returns inst; it is deleted at cleanup.
func scratchInternet(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces")
	}
	inst := fmt.Sprintf("pt%d", os.Getpid()%100000)
	ns := inst + "-inet"
	run := func(args ...string) {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	exec.Command("ip", "netns", "del", ns).Run()
	run("netns", "add", ns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	run("-n", ns, "link", "set", "lo", "up")
	run("-n", ns, "route", "add", "local", "198.19.0.0/16", "dev", "lo")
	return inst
}

// wildcardListeners binds UDP and TCP 0.0.0.0:port in namespace ns, as the project's
// own multi-tenant servers do, and reports which addresses they were reached at.
func wildcardListeners(t *testing.T, ns string, ports ...uint16) {
	t.Helper()
	err := netns.Do(ns, func() error {
		for _, p := range ports {
			u, err := net.ListenPacket("udp4", fmt.Sprintf("0.0.0.0:%d", p))
			if err != nil {
				return err
			}
			t.Cleanup(func() { u.Close() })
			l, err := net.Listen("tcp4", fmt.Sprintf("0.0.0.0:%d", p))
			if err != nil {
				return err
			}
			t.Cleanup(func() { l.Close() })
		}
		return nil
	})
	if err != nil {
		t.Fatalf("wildcard listeners: %v", err)
	}
}

// TestAllPeersInNamespace starts every stack in a scratch internet namespace that
// already has wildcard listeners on the same ports (as the project's servers have),
// checks each service answers through the peers namespace with a real query or
// handshake, then checks Stop leaves no process, namespace or route behind.
func TestAllPeersInNamespace(t *testing.T) {
	root, err := peers.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	requireInstalled(t, root, peers.Kinds...)
	inst := scratchInternet(t)
	wildcardListeners(t, inst+"-inet", 53, 443, 784, 853, 8853)
	cert, key := selfSigned(t, t.TempDir())

	core := peers.Spec{Kind: peers.CoreDNS, Addr: netip.MustParseAddr("198.19.200.1"), DNSPort: 53, DoTPort: 853, DoHPort: 443, QUICPorts: []uint16{853}, CertFile: cert, KeyFile: key}
	specs := []peers.Spec{
		core,
		{Kind: peers.Hickory, Addr: netip.MustParseAddr("198.19.200.2"), DNSPort: 53, DoTPort: 853, QUICPorts: []uint16{784}, CertFile: cert, KeyFile: key},
		{Kind: peers.Aioquic, Addr: netip.MustParseAddr("198.19.200.3"), QUICPorts: []uint16{784}, Retry: true, CertFile: cert, KeyFile: key,
			Upstream: netip.AddrPortFrom(core.Addr, 53)},
		{Kind: peers.Ngtcp2, Addr: netip.MustParseAddr("198.19.200.4"), QUICPorts: []uint16{443}, CertFile: cert, KeyFile: key},
		{Kind: peers.DNSProxy, Addr: netip.MustParseAddr("198.19.200.5"), DNSPort: 53, DoTPort: 853, DoHPort: 443, DoH3Port: 443,
			QUICPorts: []uint16{784, 853}, CertFile: cert, KeyFile: key, Upstream: netip.AddrPortFrom(core.Addr, 53)},
		{Kind: peers.LazyDNS, Addr: netip.MustParseAddr("198.19.200.6"), QUICPorts: []uint16{853}, CertFile: cert, KeyFile: key},
	}
	answer := netip.MustParseAddr("198.19.7.7")
	runDir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	set, err := peers.Start(ctx, peers.Config{Inst: inst, Root: root, RunDir: runDir, Answer: answer,
		Log: slog.New(slog.NewTextHandler(os.Stderr, nil))}, specs)
	if err != nil {
		t.Fatal(err)
	}
	pids := map[string]int{}
	for _, p := range set.Processes() {
		pids[p.Name] = p.Pid
	}
	t.Cleanup(func() { set.Stop() })

	// peers.Start already probed every service; probe again, from the internet namespace,
	// to report each one by name.
	for _, s := range specs {
		for _, svc := range s.Services() {
			t.Run(fmt.Sprintf("%s/%s-%d", s.Kind, svc.Proto, svc.Port), func(t *testing.T) {
				if err := peers.Probe(ctx, inst+"-inet", s.Addr, svc, answer); err != nil {
					t.Errorf("%v", err)
				}
			})
		}
	}
	// A wrong answer must fail the probe (the check can fail).
	if err := peers.Probe(ctx, inst+"-inet", core.Addr, peers.Service{Proto: "udp", Port: 53}, netip.MustParseAddr("198.19.9.9")); err == nil {
		t.Error("probe accepted a wrong A record")
	}
	// The wildcard listener still owns every other address of the /16.
	if err := peers.Probe(ctx, inst+"-inet", netip.MustParseAddr("198.19.200.9"), peers.Service{Proto: "udp", Port: 53}, answer); err == nil {
		t.Error("an address not given to a peer answered like a peer")
	}

	if err := set.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	for name, pid := range pids {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil && proc.Alive(pid) {
			t.Errorf("%s (pid %d) still running after Stop", name, pid)
		}
	}
	if _, err := os.Stat("/run/netns/" + inst + "-peers"); err == nil {
		t.Errorf("namespace %s-peers left behind", inst)
	}
	out, _ := exec.Command("ip", "-n", inst+"-inet", "route", "show", "table", "local").CombinedOutput()
	if strings.Contains(string(out), "198.19.200.") {
		t.Errorf("routes left behind in %s-inet:\n%s", inst, out)
	}
	if left, _ := filepath.Glob(filepath.Join(runDir, "*.pid")); len(left) > 0 {
		t.Errorf("pid files left behind: %v", left)
	}
}

// TestStopInstance stops peers from their pid files, as `testnet down` does from
// another process.
func TestStopInstance(t *testing.T) {
	root, err := peers.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	requireInstalled(t, root, peers.CoreDNS)
	inst := scratchInternet(t)
	runDir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	set, err := peers.Start(ctx, peers.Config{Inst: inst, Root: root, RunDir: runDir},
		[]peers.Spec{{Kind: peers.CoreDNS, Addr: netip.MustParseAddr("198.19.201.1"), DNSPort: 53}})
	if err != nil {
		t.Fatal(err)
	}
	pid := set.Processes()[0].Pid
	if err := peers.StopInstance(inst, runDir, nil); err != nil {
		t.Fatal(err)
	}
	// Our own child is reaped by the Wait goroutine of launch.
	select {
	case <-set.Processes()[0].Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("pid %d still running after peers.StopInstance", pid)
	}
	if _, err := os.Stat("/run/netns/" + inst + "-peers"); err == nil {
		t.Errorf("namespace %s-peers left behind", inst)
	}
	if err := set.Stop(); err != nil {
		t.Errorf("second stop: %v", err)
	}
}
