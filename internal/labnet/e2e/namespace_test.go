package e2e

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"testing"

	"github.com/doqscan/doqscan/internal/labnet"
	"github.com/doqscan/doqscan/internal/labnet/labnettest"
)

// TestLookupInHostNamespace: the test runs in the host's namespace, and Lookup knows it
// (a route lookup sends no packet).
func TestLookupInHostNamespace(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		t.Skip("inside the throwaway namespace")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to read PID 1's network namespace")
	}
	r, err := labnet.Lookup(netip.MustParseAddr("198.19.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	if !r.HostNS {
		t.Fatalf("Lookup in the host namespace: %+v", r)
	}
	if err := labnet.NewGuard().Check(netip.MustParseAddr("198.19.0.1")); err == nil && !r.NoRoute {
		t.Fatalf("the host namespace routes 198.19.0.1 by %s and the guard allowed it", r.Interface)
	}
}

const childEnv = "DOQSCAN_LABNET_CHILD"

// TestGuardInThrowawayNamespace runs the real guard (netlink) in a namespace whose only
// routes lead into a veth pair with both ends inside that namespace: whatever the guard
// decides, no packet can leave it. Unmarked link: refused; marked: allowed.
func TestGuardInThrowawayNamespace(t *testing.T) {
	switch os.Getenv(childEnv) {
	case "unmarked", "marked":
		checkInside(t, os.Getenv(childEnv) == "marked")
		return
	}
	ns := labnettest.Throwaway(t)
	for _, mode := range []string{"unmarked", "marked"} {
		t.Run(mode, func(t *testing.T) {
			if mode == "marked" {
				ns.Mark(t, labnet.Alias("guardtest"))
			}
			c := ns.Command(os.Args[0], "-test.run", "^TestGuardInThrowawayNamespace$", "-test.v")
			c.Env = append(os.Environ(), childEnv+"="+mode)
			out, err := c.CombinedOutput()
			t.Logf("inside %s:\n%s", ns.Name, out)
			if err != nil {
				t.Fatalf("inside the namespace: %v", err)
			}
		})
	}
}

func checkInside(t *testing.T, marked bool) {
	for _, dst := range []string{"198.19.0.1", "2001:2::1"} {
		a := netip.MustParseAddr(dst)
		r, err := labnet.Lookup(a)
		if err != nil {
			t.Fatal(err)
		}
		if r.HostNS || r.NoRoute || r.Interface != labnettest.Link {
			t.Fatalf("%s: route %+v, want one leaving by %s", dst, r, labnettest.Link)
		}
		err = labnet.NewGuard().Check(a)
		var re *labnet.RefusedError
		switch {
		case marked && err != nil:
			t.Errorf("%s over a marked link: %v", dst, err)
		case !marked && !errors.As(err, &re):
			t.Errorf("%s over an unmarked link: %v, want a RefusedError", dst, err)
		case !marked && re.Interface != labnettest.Link:
			t.Errorf("refusal names interface %q, want %s", re.Interface, labnettest.Link)
		}
	}
	// Outside the lab prefixes the guard does not look.
	if err := labnet.NewGuard().Check(netip.MustParseAddr("192.0.2.1")); err != nil {
		t.Errorf("outside the lab: %v", err)
	}
	fmt.Println("checked inside, marked =", marked)
}
