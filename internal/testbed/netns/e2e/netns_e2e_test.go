// Package e2e brings up and tears down a real instance of the simulated internet's
// namespaces (root, ip, /dev/net/tun): the steering rules, on-link gateways, the absence
// of any route out of the testbed, and nothing left after Down. It skips, saying why,
// without them.
package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/doqscan/doqscan/internal/testbed/netns"
)

func TestUpDown(t *testing.T) {
	if err := netns.Preflight(); err != nil {
		t.Skipf("SKIP: %v", err)
	}
	ctx := context.Background()
	var r netns.Runner
	in, err := netns.New(fmt.Sprintf("nt%d", os.Getpid()%100000), 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Down(context.Background(), in.Name) })
	for round := 0; round < 2; round++ {
		if err := r.Up(ctx, in); err != nil {
			t.Fatalf("Up round %d: %v", round, err)
		}
	}
	rules, err := r.IP(ctx, "-n", in.Router(), "rule", "show")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(rules, "lookup "+netns.DelayTable); n != 3 {
		t.Errorf("want 3 steering rules after two Ups, got %d:\n%s", n, rules)
	}
	rules6, err := r.IP(ctx, "-n", in.Router(), "-6", "rule", "show")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(rules6, "lookup "+netns.DelayTable); n != 3 {
		t.Errorf("want 3 IPv6 steering rules after two Ups, got %d:\n%s", n, rules6)
	}
	for i := 0; i < in.Vantages; i++ {
		// The gateway is on-link: ping it (not through the delay line).
		if out, err := r.IP(ctx, "netns", "exec", in.Vantage(i), "ping", "-c1", "-W2", netns.GatewayAddr(i).String()); err != nil {
			t.Errorf("vantage %d cannot reach its gateway: %v\n%s", i, err, out)
		}
		// Outside the testbed there is no route at all.
		for _, dst := range []string{"8.8.8.8", "10.0.0.1", "127.0.0.2", "198.20.0.1"} {
			out, err := r.IP(ctx, "-n", in.Vantage(i), "route", "get", dst)
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
		if out, err := r.IP(ctx, "netns", "exec", in.Vantage(i), "ping", "-6", "-c1", "-W2", netns.GatewayAddr6(i).String()); err != nil {
			t.Errorf("vantage %d cannot reach its IPv6 gateway: %v\n%s", i, err, out)
		}
		for _, dst := range []string{"2001:4860:4860::8888", "2001:db8::1", "2001:3::1", "fd00::1", "::ffff:8.8.8.8"} {
			if out, err := r.IP(ctx, "-n", in.Vantage(i), "-6", "route", "get", dst); err == nil {
				t.Errorf("vantage %d has an IPv6 route to %s: %s", i, dst, out)
			}
		}
		out, err := r.IP(ctx, "-n", in.Vantage(i), "-6", "route", "get", "2001:2:0:8123::45")
		if err != nil || !strings.Contains(out, "via "+netns.GatewayAddr6(i).String()) {
			t.Errorf("vantage %d: 2001:2:0:8123::45 not via its gateway: %q %v", i, out, err)
		}
		// No address came from autoconfiguration: only the ones Up set, and link-local.
		addrs, err := r.IP(ctx, "-n", in.Vantage(i), "-6", "-o", "addr", "show", "scope", "global")
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(addrs, "inet6 "); n != 1 || !strings.Contains(addrs, netns.VantageAddr6(i).String()+"/64") {
			t.Errorf("vantage %d global IPv6 addresses:\n%s", i, addrs)
		}
	}
	for _, ns := range []string{in.Router(), in.Inet()} {
		if out, err := r.IP(ctx, "-n", ns, "route", "get", "8.8.8.8"); err == nil {
			t.Errorf("%s has a route to 8.8.8.8: %s", ns, out)
		}
		if out, err := r.IP(ctx, "-n", ns, "-6", "route", "get", "2001:4860:4860::8888"); err == nil {
			t.Errorf("%s has a route to 2001:4860:4860::8888: %s", ns, out)
		}
	}
	if out, err := r.IP(ctx, "-n", in.Inet(), "-6", "route", "get", "2001:2:0:8123::45"); err != nil || !strings.HasPrefix(out, "local") {
		t.Errorf("2001:2:0:8123::45 not local in %s: %q %v", in.Inet(), out, err)
	}
	if err := r.VerifyHostNoLabRoute(ctx); err != nil {
		t.Errorf("after Up: %v", err)
	}
	// AnyIP: any address of the /16 is local in the internet namespace.
	if out, err := r.IP(ctx, "-n", in.Inet(), "route", "get", "198.19.123.45"); err != nil || !strings.HasPrefix(out, "local") {
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
	links, err := r.IP(ctx, "-o", "link", "show")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(links, " "+in.Name+"-") {
		t.Errorf("host links left after Down:\n%s", links)
	}
}
