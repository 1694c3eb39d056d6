package e2e_test

import (
	"bytes"
	"context"
	"net/netip"
	"testing"

	"github.com/doqscan/doqscan/internal/testbed"
	"github.com/doqscan/doqscan/internal/testbed/population"
)

// ipv6GroundTruth is every QUIC endpoint of the population's IPv6 half plus, for each
// dual-stack twin, the same port on its IPv4 address; twin maps each IPv6 endpoint to its
// IPv4 one.
func ipv6GroundTruth(t *testing.T) (groundTruth, map[netip.AddrPort]netip.AddrPort) {
	g := loadGroundTruth(t)
	pop6 := g.pop.IPv6()
	g6 := groundTruth{pop: g.pop, pki: g.pki, sniNames: g.sniNames,
		want: map[netip.AddrPort]population.Verdict{}, rec: map[netip.AddrPort]*population.Record{}}
	twins := map[netip.AddrPort]netip.AddrPort{}
	for _, e := range pop6.QUICEndpoints() {
		r := pop6.Lookup(e.Addr)
		if err := testbed.PeerSilent(t, g.pop, r); err != nil {
			t.Logf("excluding IPv6 peer %s: %v", e.Addr, err)
			continue
		}
		a := netip.AddrPortFrom(e.Addr, e.Port)
		g6.targets = append(g6.targets, a)
		g6.want[a], g6.rec[a] = pop6.ExpectVerify(e.Addr, e.Port), r
		if r.Twin.IsValid() {
			a4 := netip.AddrPortFrom(r.Twin, e.Port)
			w, ok := g.want[a4]
			if !ok {
				t.Fatalf("twin %s of %s is no QUIC endpoint of the IPv4 half", a4, a)
			}
			g6.targets = append(g6.targets, a4)
			g6.want[a4], g6.rec[a4] = w, g.rec[a4]
			twins[a] = a4
		}
	}
	if len(twins) == 0 || len(g6.targets) == len(twins)*2 {
		t.Fatalf("the IPv6 half needs twins and IPv6-only endpoints: %d targets, %d twins", len(g6.targets), len(twins))
	}
	return g6, twins
}

// The whole pipeline (targets file -> verify.Run -> database, GeoIP) over the IPv6 half and the
// twins' IPv4 addresses: every stored row matches the population, IPv6 addresses are
// stored as such, and a dual-stack twin presents the same leaf certificate on both
// addresses (one server, one certificate).
func TestTestbedIPv6RunMatchesPopulation(t *testing.T) {
	g, twins := ipv6GroundTruth(t)
	s, sum := runVerify(t, g, "e2e-ipv6", "the population's IPv6 half and the IPv4 addresses of its twins")
	t.Logf("%d targets (%d twins) in %.1f s: %v", sum.Targets, len(twins), sum.Elapsed, sum.Outcomes)
	leaves := map[netip.AddrPort][]byte{}
	n6 := 0
	for a, r := range checkStoredRows(t, context.Background(), s, g, sum.RunID) {
		if (r.family == 6) != a.Addr().Is6() {
			t.Errorf("%s stored as family %d", a, r.family)
		}
		if r.family == 6 {
			n6++
		}
		leaves[a] = r.leaf
	}
	if want := len(g.targets) - len(twins); n6 != want {
		t.Errorf("%d IPv6 rows stored, %d IPv6 targets", n6, want)
	}
	for a6, a4 := range twins {
		if g.want[a6].ALPN == "" {
			continue // no handshake, no certificate
		}
		if len(leaves[a6]) == 0 || !bytes.Equal(leaves[a6], leaves[a4]) {
			t.Errorf("twin %s and %s: different (or missing) leaf certificates", a6, a4)
		}
	}
}
