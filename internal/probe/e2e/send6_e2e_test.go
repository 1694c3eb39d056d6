package e2e_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/probe"

	"github.com/doqscan/doqscan/internal/store/storetest"
)

// testbedPrefix6 is the IPv6 half of the simulated internet (docs/testbed.md).
var testbedPrefix6 = netip.MustParsePrefix("2001:2:0:8000::/49")

// TestSendIPv6Hitlist: `zprobe send` (probe.Send with probe.ReadHitlist's file, the command's path)
// over an IPv6 hitlist of every listed address of the population's IPv6 half plus silent
// neighbours finds exactly the population's IPv6 QUIC speakers (per port) and DNS
// servers; a database opt-out and a blocklist-file prefix, both listed in the hitlist,
// receive no datagram at all (tcpdump in the internet namespace).
func TestSendIPv6Hitlist(t *testing.T) {
	e := requireTestbed(t)
	v := e.v
	e6 := &e2eSetup{v: v, pop: v.Population.IPv6(), skip: e.skip}
	if len(e6.pop.Records) == 0 {
		t.Fatal("the population has no IPv6 half")
	}
	ctx := context.Background()
	s := storetest.Open(t)
	optout := netip.MustParsePrefix("2001:2:0:8001::9/128")   // a dual-stack DNS server
	blocked := netip.MustParsePrefix("2001:2:0:8002::30/127") // the IPv6-only DNS servers
	if e6.pop.Lookup(optout.Addr()) == nil || e6.pop.Lookup(blocked.Addr()) == nil {
		t.Fatal("test setup: the excluded prefixes hold no population host")
	}
	if _, err := s.Pool.Exec(ctx, `INSERT INTO optout_requests (prefix, email, note) VALUES ($1, 'noc@example.net', 'e2e ipv6')`, optout); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	blDir := filepath.Join(dir, "blocklist")
	os.Mkdir(blDir, 0o755)
	if err := os.WriteFile(filepath.Join(blDir, "e2e.conf"), []byte(blocked.String()+"  # e2e: asked not to be scanned\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	excluded := []netip.Prefix{optout, blocked}

	var sb strings.Builder
	sb.WriteString("# the population's IPv6 half, and a silent neighbour of each host\n")
	n := 0
	for a := range e6.pop.Hosts {
		fmt.Fprintf(&sb, "%s\n", a)
		n++
		if next := a.Next(); e6.pop.Lookup(next) == nil {
			fmt.Fprintf(&sb, "%s  # silent\n", next)
			n++
		}
	}
	hitlist := filepath.Join(dir, "hitlist6.txt")
	if err := os.WriteFile(hitlist, []byte(sb.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	hl, err := probe.ReadHitlist(hitlist)
	if err != nil || len(hl) != n {
		t.Fatalf("probe.ReadHitlist: %d of %d addresses, %v", len(hl), n, err)
	}
	safety, err := probe.PrepareSafety(ctx, s, nil, &testbedPrefix6, false, blDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	capture := startCapture(t, v.Instance, excluded)
	sum, err := probe.Send(ctx, probe.SendConfig{Store: s, VantageID: "e2e6", Week: "2026-W47", Hitlist: hl, Safety: safety,
		QUICPorts: probe.DefaultQUICPorts, DNSPorts: probe.DefaultDNSPorts, Rate: 200, Cooldown: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if got := capture.stop(t); got != 0 {
		t.Errorf("the opted-out %s and blocklisted %s received %d datagrams", optout, blocked, got)
	} else {
		t.Logf("target side: 0 datagrams reached the opted-out %s and the blocklisted %s", optout, blocked)
	}
	t.Logf("send: %d hitlist addresses, summary %+v", len(hl), sum)
	got := scanReplies(t, s, excluded)
	wantVN, wantAny, wantDNS := e6.expected(probe.DefaultQUICPorts, excluded)
	if len(wantVN[853]) == 0 || len(wantDNS) == 0 {
		t.Fatal("the IPv6 half has no QUIC speaker on 853 or no DNS server")
	}
	for _, port := range probe.DefaultQUICPorts {
		var gotVN, gotAny []netip.Addr
		for a, r := range got[port] {
			if !a.Is6() {
				t.Errorf("%s:%d: an IPv4 reply to an IPv6 hitlist", a, port)
			}
			if r.ReplyKind == string(probe.KindICMPUnreach) {
				continue
			}
			gotAny = append(gotAny, a)
			if r.ReplyKind == string(probe.KindQUICVN) {
				gotVN = append(gotVN, a)
			}
		}
		diff(t, fmt.Sprintf("IPv6 port %d quic-vn", port), wantVN[port], gotVN)
		diff(t, fmt.Sprintf("IPv6 port %d any UDP reply", port), wantAny[port], gotAny)
	}
	checkDNS(t, wantDNS, got[53], nil)
}
