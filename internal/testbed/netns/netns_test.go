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
	for _, ns := range []string{in.Router(), in.Inet()} {
		if out, err := r.ip(ctx, "-n", ns, "route", "get", "8.8.8.8"); err == nil {
			t.Errorf("%s has a route to 8.8.8.8: %s", ns, out)
		}
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
