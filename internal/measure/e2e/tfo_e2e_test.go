package e2e_test

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/testbed"
	"github.com/doqscan/doqscan/internal/testbed/netns"
	"github.com/doqscan/doqscan/internal/testbed/simdns"
)

// resolveTolerance is the share of the path RTT a single exchange may deviate by here
// (the testbed's paths are lossless and jitter-free; the error is the line's forwarding
// and the scheduling of a shared 2-core machine).
const resolveTolerance = 0.1

// silentAddr returns an address of the simulated internet the population leaves silent.
func silentAddr(t *testing.T, v *testbed.Vantage) netip.Addr {
	t.Helper()
	for a := netip.MustParseAddr("198.19.250.1"); a.As4()[2] == 250; a = a.Next() {
		if v.Population.Lookup(a) == nil {
			return a
		}
	}
	t.Fatal("no silent address in 198.19.250.0/24")
	return netip.Addr{}
}

// TestTCPFastOpenCheck measures DoTCP with TCP Fast Open against a real TFO listener
// (simdns with TCP_FASTOPEN, the server bit of net.ipv4.tcp_fastopen set in the
// internet namespace) on an otherwise silent address, and against a population DoTCP
// server without TFO: the second SYN carries the query only where the server issued a
// cookie, and measure says so (the campaign's "tfo" feature check is these two calls).
func TestTCPFastOpenCheck(t *testing.T) {
	v, _ := testbed.RequirePopulation(t)
	addr := silentAddr(t, v)
	table := simdns.Table{}
	table.Set(addr, simdns.Behaviour{Class: simdns.ClassAnswer, FastOpen: true}, simdns.DoTCP)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var srv *simdns.Server
	inet := netns.Instance{Name: v.Instance}.Inet()
	// Our own port (a free one), so this server never shares a socket group with the
	// testbed's simserver on port 53.
	err := netns.Do(inet, func() (err error) {
		srv, err = simdns.Start(ctx, simdns.Config{Directory: table, Ports: simdns.Ports{UDP: -1, TCP: -1, DoT: -1, DoH: -1},
			EnableFastOpenSysctl: true})
		return err
	})
	if err != nil {
		t.Fatalf("simdns in %s: %v", inet, err)
	}
	defer srv.Close()
	port := uint16(srv.Addr(simdns.DoTCP).(*net.TCPAddr).Port)

	m, _ := measure.For(measure.DoTCP)
	tfo := func(a netip.AddrPort) *measure.Result {
		req := measure.Request{Addr: a, FastOpen: true, Timeout: 5 * time.Second}
		var res *measure.Result
		for i := 0; i < 2; i++ { // the first connection gets the cookie
			res = m.Measure(ctx, &req)
			if res.Status != measure.StatusOK {
				t.Fatalf("DoTCP with TFO to %s (connection %d): %s %v", a, i+1, res.Status, res.Err)
			}
		}
		return res
	}
	res := tfo(netip.AddrPortFrom(addr, port))
	if res.TFO == nil || !*res.TFO {
		t.Fatalf("TFO server %s:%d: TFO = %v, want true", addr, port, res.TFO)
	}
	// The query rode in the SYN: one round trip for everything, and the SYN/SYN-ACK
	// sample is that same round trip.
	path := v.Population.PathOf(addr).RTT
	tol := time.Duration(resolveTolerance * float64(path))
	t.Logf("TFO server: handshake %v, resolve %v (path %v)", res.Handshake, res.First().Resolve, path)
	if d := res.First().Resolve - path; d < -tol || d > tol {
		t.Errorf("TFO resolve %v, want the path's RTT %v +- %v", res.First().Resolve, path, tol)
	}
	if !res.HasHandshake || res.Handshake < path-tol || res.Handshake > path+tol {
		t.Errorf("TFO handshake %v (known %v), want the path's RTT %v +- %v", res.Handshake, res.HasHandshake, path, tol)
	}

	// Control: a population DoTCP server (no TFO listener) never accepts data in the SYN.
	var plain netip.Addr
	for _, ep := range benchEndpoints(v.Population, measure.DoTCP) {
		plain = ep.addr
		break
	}
	if !plain.IsValid() {
		t.Fatal("no DoTCP endpoint in the population")
	}
	res = tfo(netip.AddrPortFrom(plain, 53))
	if res.TFO == nil || *res.TFO {
		t.Fatalf("plain server %s: TFO = %v, want false", plain, res.TFO)
	}
}
