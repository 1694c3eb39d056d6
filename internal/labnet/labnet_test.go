package labnet

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestGuardVerdicts(t *testing.T) {
	calls := 0
	route := map[netip.Addr]Route{}
	fake := func(a netip.Addr) (Route, error) {
		calls++
		r, ok := route[a]
		if !ok {
			return r, errors.New("lookup failed")
		}
		return r, nil
	}
	a := netip.MustParseAddr
	route[a("198.19.0.1")] = Route{NoRoute: true}
	route[a("198.19.0.2")] = Route{Interface: "dq-v0", Alias: Alias("dq")}
	route[a("2001:2::1")] = Route{Interface: "eth0"}
	g := &Guard{lookup: fake}

	if err := g.Check(a("1.1.1.1")); err != nil || calls != 0 {
		t.Fatalf("outside the lab: %v, %d lookups", err, calls)
	}
	if err := g.Check(a("127.0.0.1")); err != nil || calls != 0 {
		t.Fatalf("loopback: %v, %d lookups", err, calls)
	}
	if err := g.Check(a("198.19.0.1")); err != nil {
		t.Fatalf("no route: %v", err)
	}
	if err := g.Check(a("198.19.0.2")); err != nil {
		t.Fatalf("marked link refused: %v", err)
	}
	n := calls
	if err := g.Check(a("198.18.77.1")); err != nil || calls != n {
		t.Fatalf("second address of an allowed prefix: %v, looked up again: %v", err, calls != n)
	}
	err := g.Check(a("2001:2::1"))
	var re *RefusedError
	if !errors.As(err, &re) || re.Prefix != Prefixes[1] || re.Interface != "eth0" {
		t.Fatalf("unmarked link: %v", err)
	}
	for _, want := range []string{"2001:2::1", "2001:2::/48", "interface eth0", "bin/testnet exec --"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q lacks %q", err, want)
		}
	}
	n = calls
	err = g.Check(a("2001:2::2"))
	if !errors.As(err, &re) || re.Dst != a("2001:2::2") || calls != n {
		t.Fatalf("refusal is kept for the prefix: %v (lookups %d -> %d)", err, n, calls)
	}

	host := &Guard{lookup: func(netip.Addr) (Route, error) {
		return Route{Interface: "dq-v0", Alias: Alias("dq"), HostNS: true}, nil
	}}
	if err := host.Check(a("::ffff:198.19.0.3")); !errors.As(err, &re) || !strings.Contains(err.Error(), "host's network namespace") {
		t.Fatalf("host namespace: %v", err)
	}
	failing := &Guard{lookup: fake}
	if err := failing.Check(a("198.19.9.9")); !errors.As(err, &re) {
		t.Fatalf("failed lookup must refuse: %v", err)
	}
}

func TestMarked(t *testing.T) {
	for alias, want := range map[string]bool{Alias("dq"): true, AliasPrefix: false, "": false, "eth0": false, "x" + Alias("dq"): false} {
		if Marked(alias) != want {
			t.Errorf("Marked(%q) = %v", alias, !want)
		}
	}
}

func FuzzParseReplies(f *testing.F) {
	f.Add([]byte{})
	f.Add(make([]byte, 16))
	// A well-formed RTM_NEWROUTE with RTA_OIF 7, and an RTM_NEWLINK with name and alias.
	route := []byte{36, 0, 0, 0, 24, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0,
		2, 32, 0, 0, 254, 0, 0, 1, 0, 0, 0, 0, 8, 0, 4, 0, 7, 0, 0, 0}
	f.Add(route)
	link := []byte{48, 0, 0, 0, 16, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0,
		0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		8, 0, 3, 0, 'v', '0', 0, 0, 8, 0, 20, 0, 'd', 'q', 0, 0}
	f.Add(link)
	f.Add([]byte{20, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0x9b, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		parseRouteReply(b) // the fuzzer looks for panics, not errors
		parseLinkReply(b)  // the fuzzer looks for panics, not errors
	})
}

func TestParseReplies(t *testing.T) {
	route := []byte{36, 0, 0, 0, 24, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0,
		2, 32, 0, 0, 254, 0, 0, 1, 0, 0, 0, 0, 8, 0, 4, 0, 7, 0, 0, 0}
	if oif, err := parseRouteReply(route); err != nil || oif != 7 {
		t.Errorf("route reply: %d %v", oif, err)
	}
	link := []byte{48, 0, 0, 0, 16, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0,
		0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		8, 0, 3, 0, 'v', '0', 0, 0, 8, 0, 20, 0, 'd', 'q', 0, 0}
	if name, alias, err := parseLinkReply(link); err != nil || name != "v0" || alias != "dq" {
		t.Errorf("link reply: %q %q %v", name, alias, err)
	}
	unreachable := []byte{20, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0x9b, 0xff, 0xff, 0xff} // -ENETUNREACH (101)
	if _, err := parseRouteReply(unreachable); !errors.Is(err, errNoRoute) {
		t.Errorf("unreachable: %v", err)
	}
}
