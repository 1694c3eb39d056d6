package netns

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
)

func TestNames(t *testing.T) {
	in, err := New("abcdefghij", MaxVantages)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < in.Vantages; i++ {
		for _, n := range []string{in.VantageIf(i), in.RouterIf(i), in.RouterInetIf(), in.InetIf()} {
			if len(n) > 15 {
				t.Errorf("interface name %q longer than 15 bytes", n)
			}
		}
	}
	if in.Vantage(0) != "abcdefghij-vantage" || in.Vantage(1) != "abcdefghij-vantage2" {
		t.Errorf("vantage names %q %q", in.Vantage(0), in.Vantage(1))
	}
	if VantageAddr(1).String() != "198.18.1.2" {
		t.Errorf("vantage 1 address %v", VantageAddr(1))
	}
	for _, bad := range []string{"", "A", "1ab", "abcdefghijk", "a-b", "a b"} {
		if ValidName(bad) == nil {
			t.Errorf("ValidName(%q) accepted", bad)
		}
	}
}

// TestUpDown builds an instance twice (idempotence), checks the routes, then removes it
// and checks nothing is left. The delay line is not running, so only router-local
// traffic is checked here; end-to-end paths are tested in package testbed.
func TestCheckRoute(t *testing.T) {
	for _, c := range []struct {
		family, line string
		ok           bool
	}{
		{"-4", "198.19.0.0/16 via 198.18.0.1 dev dq-v0", true},
		{"-4", "local 198.19.0.0/16 dev lo table local proto kernel scope host", true},
		{"-4", "broadcast 127.255.255.255 dev lo table local proto kernel scope link src 127.0.0.1", true},
		{"-4", "default via 10.0.0.1 dev eth0", false},
		{"-4", "10.0.0.0/8 dev eth0", false},
		{"-4", "198.18.0.0/14 dev x", false},
		{"-6", "2001:2:0:8000::/49 via 2001:2::1 dev dq-v0 metric 1024 pref medium", true},
		{"-6", "local 2001:2:0:8000::/49 dev lo table local metric 1024 pref medium", true},
		{"-6", "anycast 2001:2:: dev dq-v0 table local proto kernel metric 0 pref medium", true},
		{"-6", "fe80::/64 dev dq-v0 proto kernel metric 256 pref medium", true},
		{"-6", "local fe80::d9:ff:fe00:2 dev dq-v0 table local proto kernel metric 0 pref medium", true},
		{"-6", "multicast ff00::/8 dev dq-v0 table local proto kernel metric 256 pref medium", true},
		{"-6", "local ::1 dev lo table local proto kernel metric 0 pref medium", true},
		{"-6", "default via fe80::1 dev eth0 proto ra metric 1024", false},
		{"-6", "2001:2::/47 dev x", false},
		{"-6", "2001:db8::/32 dev x", false},
		{"-6", "::ffff:0.0.0.0/96 dev x", false},
		{"-6", "fe80::/10 dev x", false},
	} {
		if err := checkRoute(c.family, c.line); (err == nil) != c.ok {
			t.Errorf("%s %q: %v, want ok=%v", c.family, c.line, err, c.ok)
		}
	}
}

func TestUpDown(t *testing.T) {
	if err := Preflight(); err != nil {
		t.Skipf("SKIP: %v", err)
	}
	ctx := context.Background()
	var r Runner
	in, err := New(fmt.Sprintf("nt%d", os.Getpid()%100000), 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Down(context.Background(), in.Name) })
	for round := 0; round < 2; round++ {
		if err := r.Up(ctx, in); err != nil {
			t.Fatalf("Up round %d: %v", round, err)
		}
	}
	rules, err := r.ip(ctx, "-n", in.Router(), "rule", "show")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(rules, "lookup "+DelayTable); n != 3 {
		t.Errorf("want 3 steering rules after two Ups, got %d:\n%s", n, rules)
	}
	rules6, err := r.ip(ctx, "-n", in.Router(), "-6", "rule", "show")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(rules6, "lookup "+DelayTable); n != 3 {
		t.Errorf("want 3 IPv6 steering rules after two Ups, got %d:\n%s", n, rules6)
	}
	for i := 0; i < in.Vantages; i++ {
		// The gateway is on-link: ping it (not through the delay line).
		if out, err := r.ip(ctx, "netns", "exec", in.Vantage(i), "ping", "-c1", "-W2", GatewayAddr(i).String()); err != nil {
			t.Errorf("vantage %d cannot reach its gateway: %v\n%s", i, err, out)
		}
		// Outside the testbed there is no route at all.
		for _, dst := range []string{"8.8.8.8", "10.0.0.1", "127.0.0.2", "198.20.0.1"} {
			out, err := r.ip(ctx, "-n", in.Vantage(i), "route", "get", dst)
			if dst == "127.0.0.2" {
				if !strings.Contains(out, "dev lo") {
					t.Errorf("127.0.0.2 should stay on lo: %q", out)
				}
				continue
			}
			if err == nil {
				t.Errorf("vantage %d has a route to %s: %s", i, dst, out)
			}
		}
	}
	for i := 0; i < in.Vantages; i++ {
		// IPv6: the gateway is on-link; nothing outside 2001:2::/48 has a route.
		if out, err := r.ip(ctx, "netns", "exec", in.Vantage(i), "ping", "-6", "-c1", "-W2", GatewayAddr6(i).String()); err != nil {
			t.Errorf("vantage %d cannot reach its IPv6 gateway: %v\n%s", i, err, out)
		}
		for _, dst := range []string{"2001:4860:4860::8888", "2001:db8::1", "2001:3::1", "fd00::1", "::ffff:8.8.8.8"} {
			if out, err := r.ip(ctx, "-n", in.Vantage(i), "-6", "route", "get", dst); err == nil {
				t.Errorf("vantage %d has an IPv6 route to %s: %s", i, dst, out)
			}
		}
		out, err := r.ip(ctx, "-n", in.Vantage(i), "-6", "route", "get", "2001:2:0:8123::45")
		if err != nil || !strings.Contains(out, "via "+GatewayAddr6(i).String()) {
			t.Errorf("vantage %d: 2001:2:0:8123::45 not via its gateway: %q %v", i, out, err)
		}
		// No address came from autoconfiguration: only the ones Up set, and link-local.
		addrs, err := r.ip(ctx, "-n", in.Vantage(i), "-6", "-o", "addr", "show", "scope", "global")
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(addrs, "inet6 "); n != 1 || !strings.Contains(addrs, VantageAddr6(i).String()+"/64") {
			t.Errorf("vantage %d global IPv6 addresses:\n%s", i, addrs)
		}
	}
	for _, ns := range []string{in.Router(), in.Inet()} {
		if out, err := r.ip(ctx, "-n", ns, "route", "get", "8.8.8.8"); err == nil {
			t.Errorf("%s has a route to 8.8.8.8: %s", ns, out)
		}
		if out, err := r.ip(ctx, "-n", ns, "-6", "route", "get", "2001:4860:4860::8888"); err == nil {
			t.Errorf("%s has a route to 2001:4860:4860::8888: %s", ns, out)
		}
	}
	if out, err := r.ip(ctx, "-n", in.Inet(), "-6", "route", "get", "2001:2:0:8123::45"); err != nil || !strings.HasPrefix(out, "local") {
		t.Errorf("2001:2:0:8123::45 not local in %s: %q %v", in.Inet(), out, err)
	}
	if err := r.VerifyHostNoLabRoute(ctx); err != nil {
		t.Errorf("after Up: %v", err)
	}
	// AnyIP: any address of the /16 is local in the internet namespace.
	if out, err := r.ip(ctx, "-n", in.Inet(), "route", "get", "198.19.123.45"); err != nil || !strings.HasPrefix(out, "local") {
		t.Errorf("198.19.123.45 not local in %s: %q %v", in.Inet(), out, err)
	}
	if err := r.Down(ctx, in.Name); err != nil {
		t.Fatal(err)
	}
	left, err := r.Leftovers(ctx, in.Name)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Errorf("namespaces left after Down: %v", left)
	}
	links, err := r.ip(ctx, "-o", "link", "show")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(links, " "+in.Name+"-") {
		t.Errorf("host links left after Down:\n%s", links)
	}
}
