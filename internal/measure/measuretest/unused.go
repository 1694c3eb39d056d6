package measuretest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
)

// portRangeFile holds the kernel's ephemeral port range (the ports bind(0) and an
// unbound connect are given).
const portRangeFile = "/proc/sys/net/ipv4/ip_local_port_range"

// UnusedPort returns a loopback UDP/TCP address where nothing listens, so that a query
// to it meets an ICMP port unreachable or a TCP RST. The port is taken below the
// kernel's ephemeral range and checked free by binding and closing it: no socket of
// this or another process that asks the kernel for a port (bind to port 0, connect
// unbound) can be given it after the check, which a port found by binding port 0 could
// be (and a client of another test then answers in its place).
func UnusedPort(tb testing.TB, network, host string) netip.AddrPort {
	tb.Helper()
	lo, err := ephemeralLow(portRangeFile)
	if err != nil {
		tb.Fatal(err)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		tb.Fatal(err)
	}
	// Ports from 16384 up to the ephemeral range: above the fixed ports tests and
	// servers bind (53, 853, 5432, 8853, ...).
	const first = 16384
	if lo <= first {
		tb.Fatalf("%s starts at %d: no room for an unused port between %d and it", portRangeFile, lo, first)
	}
	for range 100 {
		ap := netip.AddrPortFrom(ip, uint16(first+rand.IntN(lo-first)))
		if free(network, ap) {
			return ap
		}
	}
	tb.Fatalf("no free %s port on %s between %d and %d in 100 tries", network, host, first, lo)
	return netip.AddrPort{}
}

// ephemeralLow reads the first port of the kernel's ephemeral range from file.
func ephemeralLow(file string) (int, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, fmt.Errorf("ephemeral port range: %w", err)
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, fmt.Errorf("ephemeral port range: %s holds %q, not two ports", file, b)
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil || lo < 1 || lo > 65535 {
		return 0, fmt.Errorf("ephemeral port range: %s holds %q", file, b)
	}
	return lo, nil
}

// free reports whether ap can be bound for network ("udp" or "tcp") now.
func free(network string, ap netip.AddrPort) bool {
	if network == "udp" {
		c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(ap))
		if err != nil {
			return false
		}
		return c.Close() == nil
	}
	l, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(ap))
	if err != nil {
		return false
	}
	return l.Close() == nil
}
