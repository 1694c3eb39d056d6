package dnsbench_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/labnet"
	"github.com/doqscan/doqscan/internal/testbed/netns"
)

// The two hosts' addresses: a /30 of the testbed's prefix, on a veth pair between two
// network namespaces of the benchmark's own (no other link, no default route).
const (
	twoHostsServer = "198.18.254.1"
	twoHostsClient = "198.18.254.2"
)

// benchNet is where the comparison's server listens and how its clients are started.
type benchNet struct {
	host   string   // the server's address
	launch []string // the command line a client's own goes after (taskset, ip netns exec)
	server string   // namespace the server's sockets are made in ("": this one)
}

// compareNet picks the network of the comparison (DNSBENCH_COMPARE_NET). "veth" (the
// default as root with iproute2, on split CPUs) is as on two hosts: server and clients in
// two network namespaces joined by a veth pair, each side's receive processing steered
// (RPS) to its own CPUs, so that the kernel wakes a client for its answer on the client's
// CPU, as a network card's interrupt would on the client's host. On loopback ("loopback")
// the server's send runs the client's receive path and wake-up on the server's CPU, and
// pays for them: more the more often the client's CPU sleeps. serverCPUs and clientCPUs
// are splitCPUs's halves (nil: shared).
func compareNet(b *testing.B, serverCPUs, clientCPUs []int) benchNet {
	loop := benchNet{host: "127.0.0.5"}
	if len(clientCPUs) > 0 {
		loop.launch = []string{"taskset", "-c", cpuList(clientCPUs)}
	}
	want := os.Getenv("DNSBENCH_COMPARE_NET")
	switch want {
	case "loopback":
		b.Logf("network: loopback (DNSBENCH_COMPARE_NET)")
		return loop
	case "", "veth":
	default:
		b.Fatalf("DNSBENCH_COMPARE_NET=%q: want veth or loopback", want)
	}
	why := ""
	if len(clientCPUs) == 0 {
		why = "server and clients share the CPUs"
	} else if err := netns.Preflight(); err != nil {
		why = err.Error()
	}
	if why != "" {
		if want == "veth" {
			b.Fatalf("DNSBENCH_COMPARE_NET=veth: %s", why)
		}
		b.Logf("network: loopback (two hosts on a veth pair need split CPUs and root with iproute2: %s)", why)
		return loop
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Both namespaces are "<prefix>-...", which netns's Down and VerifyNoRouteOut cover.
	prefix := "dnsbench" + strconv.Itoa(os.Getpid())
	srv, cli := prefix+"-srv", prefix+"-cli"
	var r netns.Runner
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := r.Down(ctx, prefix); err != nil {
			b.Errorf("two hosts: %v", err)
		}
	})
	for _, ns := range []string{srv, cli} {
		if _, err := r.IP(ctx, "netns", "add", ns); err != nil {
			b.Fatalf("two hosts: %v", err)
		}
	}
	if err := r.Veth(ctx, labnet.Alias("dnsbench"), srv, "srv0", "02:d9:00:01:00:01", cli, "cli0", "02:d9:00:01:00:02"); err != nil {
		b.Fatalf("two hosts: %v", err)
	}
	steps := [][]string{
		{"-n", srv, "address", "add", twoHostsServer + "/30", "dev", "srv0"},
		{"-n", cli, "address", "add", twoHostsClient + "/30", "dev", "cli0"},
		{"-n", srv, "link", "set", "lo", "up"},
		{"-n", cli, "link", "set", "lo", "up"},
		// Each side's received packets are processed on its own CPUs.
		{"netns", "exec", srv, "sh", "-c", "echo " + cpuMask(serverCPUs) + " > /sys/class/net/srv0/queues/rx-0/rps_cpus"},
		{"netns", "exec", cli, "sh", "-c", "echo " + cpuMask(clientCPUs) + " > /sys/class/net/cli0/queues/rx-0/rps_cpus"},
	}
	for _, s := range steps {
		if _, err := r.IP(ctx, s...); err != nil {
			b.Fatalf("two hosts: %v", err)
		}
	}
	// Nothing may lead out: no route outside the lab prefixes and loopback.
	if err := r.VerifyNoRouteOut(ctx, netns.Instance{Name: prefix}); err != nil {
		b.Fatalf("two hosts: %v", err)
	}
	b.Logf("network: two hosts on a veth pair (namespaces %s %s, %s -> %s), receive steered to CPUs %v (server) and %v (clients)",
		srv, cli, twoHostsClient, twoHostsServer, serverCPUs, clientCPUs)
	return benchNet{
		host:   twoHostsServer,
		launch: append([]string{"ip", "netns", "exec", cli}, loop.launch...),
		server: srv,
	}
}

// listen runs fn, which starts servers, so that their sockets are made in the server's
// namespace.
func (n benchNet) listen(b *testing.B, fn func()) {
	if n.server == "" {
		fn()
		return
	}
	if err := netns.Do(n.server, func() error { fn(); return nil }); err != nil {
		b.Fatal(err)
	}
}

// cpuList is taskset's list form of cpus ("1,3").
func cpuList(cpus []int) string {
	s := make([]string, len(cpus))
	for i, c := range cpus {
		s[i] = strconv.Itoa(c)
	}
	return strings.Join(s, ",")
}

// cpuMask is the hexadecimal CPU mask of cpus, as rps_cpus takes it (words of 32 CPUs
// separated by commas).
func cpuMask(cpus []int) string {
	top := 0
	for _, c := range cpus {
		top = max(top, c)
	}
	words := make([]uint32, top/32+1)
	for _, c := range cpus {
		words[c/32] |= 1 << (c % 32)
	}
	parts := make([]string, len(words))
	for i, w := range words {
		parts[len(words)-1-i] = fmt.Sprintf("%08x", w)
	}
	return strings.Join(parts, ",")
}
