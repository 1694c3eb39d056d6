package peers

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/certs/certtest"
	"github.com/doqscan/doqscan/internal/testbed/population"
	"github.com/doqscan/doqscan/internal/testbed/proc"
)

// selfSigned writes a self-signed ECDSA certificate for test.com to dir.
func selfSigned(t *testing.T, dir string) (cert, key string) {
	t.Helper()
	leaf, k := certtest.SelfSignedLeaf(t, certtest.ECDSA, "test.com")
	return certtest.WritePEM(t, dir, leaf, k)
}

// requireInstalled skips when a peer binary is missing (./dev install installs them).
func requireInstalled(t *testing.T, root string, kinds ...Kind) {
	t.Helper()
	for _, k := range kinds {
		if err := Installed(root, k); err != nil {
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
	err := inNamespace(ns, func() error {
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
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	requireInstalled(t, root, Kinds...)
	inst := scratchInternet(t)
	wildcardListeners(t, inst+"-inet", 53, 443, 784, 853, 8853)
	cert, key := selfSigned(t, t.TempDir())

	core := Spec{Kind: CoreDNS, Addr: netip.MustParseAddr("198.19.200.1"), DNSPort: 53, DoTPort: 853, DoHPort: 443, QUICPorts: []uint16{853}, CertFile: cert, KeyFile: key}
	specs := []Spec{
		core,
		{Kind: Hickory, Addr: netip.MustParseAddr("198.19.200.2"), DNSPort: 53, DoTPort: 853, QUICPorts: []uint16{784}, CertFile: cert, KeyFile: key},
		{Kind: Aioquic, Addr: netip.MustParseAddr("198.19.200.3"), QUICPorts: []uint16{784}, Retry: true, CertFile: cert, KeyFile: key,
			Upstream: netip.AddrPortFrom(core.Addr, 53)},
		{Kind: Ngtcp2, Addr: netip.MustParseAddr("198.19.200.4"), QUICPorts: []uint16{443}, CertFile: cert, KeyFile: key},
		{Kind: DNSProxy, Addr: netip.MustParseAddr("198.19.200.5"), DNSPort: 53, DoTPort: 853, DoHPort: 443, DoH3Port: 443,
			QUICPorts: []uint16{784, 853}, CertFile: cert, KeyFile: key, Upstream: netip.AddrPortFrom(core.Addr, 53)},
	}
	answer := netip.MustParseAddr("198.19.7.7")
	runDir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	set, err := Start(ctx, Config{Inst: inst, Root: root, RunDir: runDir, Answer: answer,
		Log: slog.New(slog.NewTextHandler(os.Stderr, nil))}, specs)
	if err != nil {
		t.Fatal(err)
	}
	pids := map[string]int{}
	for _, p := range set.procs {
		pids[p.name] = p.pid
	}
	t.Cleanup(func() { set.Stop() })

	// Start already probed every service; probe again, from the internet namespace,
	// to report each one by name.
	for _, s := range specs {
		for _, svc := range s.Services() {
			t.Run(fmt.Sprintf("%s/%s-%d", s.Kind, svc.Proto, svc.Port), func(t *testing.T) {
				if err := Probe(ctx, inst+"-inet", s.Addr, svc, answer); err != nil {
					t.Errorf("%v", err)
				}
			})
		}
	}
	// A wrong answer must fail the probe (the check can fail).
	if err := Probe(ctx, inst+"-inet", core.Addr, Service{"udp", 53}, netip.MustParseAddr("198.19.9.9")); err == nil {
		t.Error("probe accepted a wrong A record")
	}
	// The wildcard listener still owns every other address of the /16.
	if err := Probe(ctx, inst+"-inet", netip.MustParseAddr("198.19.200.9"), Service{"udp", 53}, answer); err == nil {
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
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	requireInstalled(t, root, CoreDNS)
	inst := scratchInternet(t)
	runDir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	set, err := Start(ctx, Config{Inst: inst, Root: root, RunDir: runDir},
		[]Spec{{Kind: CoreDNS, Addr: netip.MustParseAddr("198.19.201.1"), DNSPort: 53}})
	if err != nil {
		t.Fatal(err)
	}
	pid := set.procs[0].pid
	if err := StopInstance(inst, runDir, nil); err != nil {
		t.Fatal(err)
	}
	// Our own child is reaped by the Wait goroutine of launch.
	select {
	case <-set.procs[0].exited():
	case <-time.After(10 * time.Second):
		t.Fatalf("pid %d still running after StopInstance", pid)
	}
	if _, err := os.Stat("/run/netns/" + inst + "-peers"); err == nil {
		t.Errorf("namespace %s-peers left behind", inst)
	}
	if err := set.Stop(); err != nil {
		t.Errorf("second stop: %v", err)
	}
}

func TestSpecValidate(t *testing.T) {
	good := Spec{Kind: CoreDNS, Addr: netip.MustParseAddr("198.19.1.1"), DNSPort: 53}
	if err := good.validate(); err != nil {
		t.Fatalf("valid spec rejected: %v", err)
	}
	good6 := Spec{Kind: CoreDNS, Addr: netip.MustParseAddr("2001:2:0:8002::60"), DNSPort: 53}
	if err := good6.validate(); err != nil {
		t.Fatalf("valid IPv6 spec rejected: %v", err)
	}
	bad := map[string]Spec{
		"unspecified6":  {Kind: CoreDNS, Addr: netip.IPv6Unspecified(), DNSPort: 53},
		"outside6":      {Kind: CoreDNS, Addr: netip.MustParseAddr("2001:4860::8888"), DNSPort: 53},
		"mapped":        {Kind: CoreDNS, Addr: netip.MustParseAddr("::ffff:198.19.1.1"), DNSPort: 53},
		"unspecified":   {Kind: CoreDNS, Addr: netip.IPv4Unspecified(), DNSPort: 53},
		"outside":       {Kind: CoreDNS, Addr: netip.MustParseAddr("8.8.8.8"), DNSPort: 53},
		"tls-no-cert":   {Kind: CoreDNS, Addr: netip.MustParseAddr("198.19.1.1"), DoTPort: 853},
		"aioquic-8888":  {Kind: Aioquic, Addr: netip.MustParseAddr("198.19.1.1"), QUICPorts: []uint16{784}, CertFile: "c", KeyFile: "k", Upstream: netip.MustParseAddrPort("8.8.8.8:53")},
		"aioquic-noup":  {Kind: Aioquic, Addr: netip.MustParseAddr("198.19.1.1"), QUICPorts: []uint16{784}, CertFile: "c", KeyFile: "k"},
		"hickory-doh":   {Kind: Hickory, Addr: netip.MustParseAddr("198.19.1.1"), DoHPort: 443, CertFile: "c", KeyFile: "k"},
		"coredns-retry": {Kind: CoreDNS, Addr: netip.MustParseAddr("198.19.1.1"), DNSPort: 53, Retry: true},
		"dnsproxy-8888": {Kind: DNSProxy, Addr: netip.MustParseAddr("198.19.1.1"), DNSPort: 53, Upstream: netip.MustParseAddrPort("8.8.8.8:53")},
		"dnsproxy-noup": {Kind: DNSProxy, Addr: netip.MustParseAddr("198.19.1.1"), DNSPort: 53},
		"dnsproxy-nodns": {Kind: DNSProxy, Addr: netip.MustParseAddr("198.19.1.1"), QUICPorts: []uint16{853}, CertFile: "c", KeyFile: "k",
			Upstream: netip.MustParseAddrPort("198.19.1.2:53")},
		"coredns-doh3": {Kind: CoreDNS, Addr: netip.MustParseAddr("198.19.1.1"), DNSPort: 53, DoHPort: 443, DoH3Port: 443, CertFile: "c", KeyFile: "k"},
		"dnsproxy-doh3-port": {Kind: DNSProxy, Addr: netip.MustParseAddr("198.19.1.1"), DNSPort: 53, DoHPort: 443, DoH3Port: 8443,
			CertFile: "c", KeyFile: "k", Upstream: netip.MustParseAddrPort("198.19.1.2:53")},
		"unknown": {Kind: "bind9", Addr: netip.MustParseAddr("198.19.1.1"), DNSPort: 53},
	}
	for name, s := range bad {
		if err := s.validate(); err == nil {
			t.Errorf("%s: accepted %+v", name, s)
		}
	}
}

func TestCorefileBindsOnlyItsAddress(t *testing.T) {
	s := Spec{Kind: CoreDNS, Addr: netip.MustParseAddr("198.19.1.1"), DNSPort: 53, QUICPorts: []uint16{784}, CertFile: "/c.pem", KeyFile: "/k.pem"}
	cf := corefile(s, netip.MustParseAddr("192.0.2.1"), 300)
	for _, want := range []string{"dns://.:53 {", "quic://.:784 {", "bind 198.19.1.1", "tls /c.pem /k.pem", "IN A 192.0.2.1"} {
		if !strings.Contains(cf, want) {
			t.Errorf("Corefile lacks %q:\n%s", want, cf)
		}
	}
	for _, bad := range []string{"forward", "0.0.0.0", "tls://", "https://"} {
		if strings.Contains(cf, bad) {
			t.Errorf("Corefile has %q:\n%s", bad, cf)
		}
	}
}

// TestDNSProxyCommandNamesOnlyTestbedAddresses: every address on dnsproxy's command line
// (listen, upstream, bootstrap, fallback, private rDNS) is a testbed address, each of its
// defaults that names a public resolver is overridden, and the hosts file answers test.com.
func TestDNSProxyCommandNamesOnlyTestbedAddresses(t *testing.T) {
	root := t.TempDir()
	bin := Binary(root, DNSProxy)
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Root: root, RunDir: t.TempDir(), Answer: netip.MustParseAddr("192.0.2.1")}
	if err := cfg.fill(); err != nil {
		t.Fatal(err)
	}
	s := Spec{Kind: DNSProxy, Addr: netip.MustParseAddr("198.19.3.7"), DNSPort: 53, DoTPort: 853, DoHPort: 443, DoH3Port: 443,
		QUICPorts: []uint16{784, 853}, CertFile: "/c", KeyFile: "/k", Upstream: netip.MustParseAddrPort("198.19.3.1:53")}
	argv, err := command(cfg, s, "")
	if err != nil {
		t.Fatal(err)
	}
	line := strings.Join(argv, " ")
	for _, flag := range []string{"--upstream", "--bootstrap", "--fallback", "--private-rdns-upstream"} {
		i := slices.Index(argv, flag)
		if i < 0 || i+1 >= len(argv) || argv[i+1] != "198.19.3.1:53" {
			t.Errorf("%s not set to the testbed upstream: %s", flag, line)
		}
	}
	for i, a := range argv {
		if ap, err := netip.ParseAddrPort(a); err == nil && !testbedOrLoopback(ap.Addr()) {
			t.Errorf("argument %d %q is outside the testbed", i, a)
		}
		if ad, err := netip.ParseAddr(a); err == nil && !testbedOrLoopback(ad) {
			t.Errorf("argument %d %q is outside the testbed", i, a)
		}
	}
	for _, want := range []string{"--listen 198.19.3.7", "--port 53", "--tls-port 853", "--https-port 443", "--http3",
		"--quic-port 784", "--quic-port 853", "--tls-crt /c", "--tls-key /k"} {
		if !strings.Contains(line, want) {
			t.Errorf("command line lacks %q: %s", want, line)
		}
	}
	hosts, err := os.ReadFile(argv[slices.Index(argv, "--hosts-files")+1])
	if err != nil || strings.TrimSpace(string(hosts)) != "192.0.2.1 test.com" {
		t.Errorf("hosts file %q (%v)", hosts, err)
	}
}

// TestFromPopulation derives the specs from the committed population: one per peer=
// record, with that record's services, and aioquic and dnsproxy forwarding inside the testbed.
func TestFromPopulation(t *testing.T) {
	pop, err := population.LoadDefault()
	if err != nil {
		t.Fatal(err)
	}
	specs, err := FromPopulation(pop, "/certs")
	if err != nil {
		t.Fatal(err)
	}
	want, want6, got6 := 0, 0, 0
	for _, r := range pop.AllRecords() {
		if r.Peer != "" {
			want += r.Size()
			if r.Prefix.Addr().Is6() {
				want6 += r.Size()
			}
		}
	}
	for _, s := range specs {
		if s.Addr.Is6() {
			got6++
		}
	}
	if len(specs) != want || want == 0 || got6 != want6 || want6 == 0 {
		t.Fatalf("%d specs (%d IPv6) for %d peer addresses (%d IPv6)", len(specs), got6, want, want6)
	}
	for _, s := range specs {
		r := pop.Lookup(s.Addr)
		if r == nil || peerKinds[r.Peer] != s.Kind {
			t.Errorf("%s: population says %+v", s.Name(), r)
			continue
		}
		if !slices.Equal(s.QUICPorts, r.QUICPorts) || s.DoTPort != r.DoT || s.DoHPort != r.DoH || s.DoH3Port != r.DoH3 || s.Retry != r.Retry ||
			(s.DNSPort != 0) != r.HasDNS("udp") {
			t.Errorf("%s: spec %+v disagrees with record %+v", s.Name(), s, r)
		}
		if s.CertFile != "/certs/"+r.Cert+".crt" {
			t.Errorf("%s: cert %s, want %s", s.Name(), s.CertFile, r.Cert)
		}
		if s.Kind == Aioquic || s.Kind == DNSProxy {
			u := pop.Lookup(s.Upstream.Addr())
			if u == nil || !u.HasDNS("udp") || !pop.Prefix.Contains(s.Upstream.Addr()) {
				t.Errorf("%s: upstream %v is not a DNS server of the population", s.Name(), s.Upstream)
			}
		}
	}
}
