package e2e_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/verify"

	"github.com/doqscan/doqscan/internal/home"
	"github.com/doqscan/doqscan/internal/store/storetest"
	"github.com/doqscan/doqscan/internal/testbed/geodb"
	"github.com/doqscan/doqscan/internal/testbed/peers"
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
		if r.Peer != "" {
			if err := peers.Installed(home.Dir(), peers.Kind(r.Peer)); err != nil {
				t.Logf("excluding IPv6 peer %s: %v", e.Addr, err)
				continue
			}
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
	s := storetest.Open(t)
	dir := t.TempDir()
	geo, err := geodb.Write(g.pop, filepath.Join(dir, "geoip"), time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "targets.txt")
	var sb strings.Builder
	sb.WriteString("# the population's IPv6 half and the IPv4 addresses of its twins\n")
	for _, a := range g.targets {
		sb.WriteString(a.String() + "\n")
	}
	if err := os.WriteFile(p, []byte(sb.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sum, err := verify.Run(ctx, s, verify.RunConfig{Verify: verify.Config{SNINames: g.sniNames, Roots: g.pki.Roots()},
		Vantage: "testbed", Label: "e2e-ipv6", TargetsFile: p, Concurrency: e2eConcurrency, RetryTimeouts: true,
		CityDB: geo.City, ASNDB: geo.ASN}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d targets (%d twins) in %.1f s: %v", sum.Targets, len(twins), sum.Elapsed, sum.Outcomes)
	rows, err := s.Pool.Query(ctx, `SELECT address, family(address), port, outcome, detail, coalesce(alpn, ''),
		coalesce(quic_version, 0), coalesce(sni, ''), coalesce(sni_source, ''), cert_valid_for_sni,
		coalesce(array_length(cert_chain, 1), 0),
		(SELECT c.der FROM certificates c WHERE c.sha256 = cert_chain[1])
		FROM verification_results WHERE run_id = $1`, sum.RunID)
	if err != nil {
		t.Fatal(err)
	}
	leaves := map[netip.AddrPort][]byte{}
	n6 := 0
	for rows.Next() {
		var addr netip.Addr
		var family, port int32
		var qv int64
		var f fields
		var leaf []byte
		if err := rows.Scan(&addr, &family, &port, &f.outcome, &f.detail, &f.alpn, &qv, &f.sni, &f.sniSource,
			&f.certValid, &f.chainLen, &leaf); err != nil {
			t.Fatal(err)
		}
		a := netip.AddrPortFrom(addr, uint16(port))
		if (family == 6) != addr.Is6() {
			t.Errorf("%s stored as family %d", a, family)
		}
		if family == 6 {
			n6++
		}
		if _, ok := g.want[a]; !ok {
			t.Errorf("%s: stored but not a target", a)
			continue
		}
		f.quicVersion = uint32(qv)
		if len(leaf) > 0 {
			leaves[a] = leaf
			if c, err := x509.ParseCertificate(leaf); err == nil {
				f.leafCN = c.Subject.CommonName
			}
		}
		f.caIssued = storedChainCAIssued(t, ctx, s.Pool, g, sum.RunID, a)
		for _, b := range g.check(a, f) {
			t.Errorf("%s (%s%s) stored: %s", a, g.rec[a].Class, peerTag(g.rec[a]), b)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
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
