package e2e_test

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/store"
	"github.com/doqscan/doqscan/internal/store/storetest"
	"github.com/doqscan/doqscan/internal/testbed/population"
	"github.com/doqscan/doqscan/internal/verify"
)

// TestTestbedDDR: a scan whose DNS probe found every plain-DNS server of the population
// on UDP/53 (and no QUIC host), verified with DDR on. Every responder is asked for
// _dns.resolver.arpa SVCB; the stored designations must be exactly the population's
// (priority, target, ALPNs, port, dohpath, address hints), every other well-behaved
// responder answers without one; and the designated DoQ endpoints, the scan's only
// targets, must be verified as the population says: DoQ on UDP/10853 (a port no scan
// probes) doq-verified, the designated port where nothing answers a timeout.
func TestTestbedDDR(t *testing.T) {
	g := loadGroundTruth(t)
	ctx := context.Background()
	s := storetest.Open(t)
	if err := s.EnsureVantage(ctx, store.Vantage{ID: "scanner"}); err != nil {
		t.Fatal(err)
	}
	scanID, _, err := s.StartScan(ctx, store.Scan{ISOWeek: "2026-W48", VantageID: "scanner", Label: "ddr", Ports: []int32{53}})
	if err != nil {
		t.Fatal(err)
	}
	responders := g.pop.DNSServers("udp")
	var replies []store.ScanReply
	for _, a := range responders {
		replies = append(replies, store.ScanReply{ScanID: scanID, Port: 53, Address: a, ReplyKind: "dns", ReceivedAt: time.Now(), ISOWeek: "2026-W48"})
	}
	if _, err := store.Insert(ctx, s, store.TableScanReplies, replies); err != nil {
		t.Fatal(err)
	}
	id := scanID
	sum, err := verify.Run(ctx, s, verify.RunConfig{Verify: verify.Config{Roots: g.pki.Roots()}, Vantage: "testbed", Label: "ddr-e2e",
		Scan: verify.ScanSelection{ScanID: &id}, Concurrency: e2eConcurrency, RetryTimeouts: true},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if sum.DDR == nil {
		t.Fatal("no DDR summary")
	}
	t.Logf("DDR: %+v; outcomes %v", *sum.DDR, sum.Outcomes)

	// Every responder asked once; designations as the population's.
	type desig struct {
		prio    int32
		target  string
		alpns   []string
		port    *int32
		dohpath *string
		hints   []netip.Addr
	}
	got := map[netip.Addr][]desig{}
	rows, err := s.Pool.Query(ctx, `SELECT resolver, priority, target, alpns, port, dohpath, ipv4hints FROM ddr_designations
		WHERE run_id = $1 ORDER BY resolver, seq`, sum.RunID)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var a netip.Addr
		var d desig
		if err := rows.Scan(&a, &d.prio, &d.target, &d.alpns, &d.port, &d.dohpath, &d.hints); err != nil {
			t.Fatal(err)
		}
		got[a.Unmap()] = append(got[a.Unmap()], d)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	status := map[netip.Addr]string{}
	qrows, err := s.Pool.Query(ctx, `SELECT address, status FROM ddr_queries WHERE run_id = $1`, sum.RunID)
	if err != nil {
		t.Fatal(err)
	}
	for qrows.Next() {
		var a netip.Addr
		var st string
		if err := qrows.Scan(&a, &st); err != nil {
			t.Fatal(err)
		}
		status[a.Unmap()] = st
	}
	if len(status) != len(responders) {
		t.Errorf("%d responders asked, the scan found %d", len(status), len(responders))
	}
	designating, lossyTimeouts := 0, 0
	for _, a := range responders {
		r := g.pop.Lookup(a)
		want := g.pop.DDR(a)
		if len(want) > 0 {
			designating++
		}
		if r.Hostile != "" {
			continue // garbage, truncated, stalled answers: classified, not compared
		}
		// No designation: NOERROR without SVCB records, or (hickory's zone) NXDOMAIN.
		wantStatus := []string{verify.DDRNone, verify.DDRNXDomain}
		switch {
		case len(want) > 0:
			wantStatus = []string{verify.DDRDesignations}
		case r.RCode == "REFUSED":
			wantStatus = []string{verify.DDRRefused}
		case r.RCode == "SERVFAIL":
			wantStatus = []string{verify.DDRDNSError}
		}
		if g.pop.PathOf(a).Loss > 0 && status[a] == verify.DDRTimeout {
			lossyTimeouts++ // both tries lost on a lossy path
			continue
		}
		if !slices.Contains(wantStatus, status[a]) {
			t.Errorf("%s (%s%s): DDR status %q, want %v", a, r.Class, peerTag(r), status[a], wantStatus)
		}
		if len(got[a]) != len(want) {
			t.Errorf("%s (%s): %d designations, population has %d", a, r.Class, len(got[a]), len(want))
			continue
		}
		for i, w := range want {
			d := got[a][i]
			if d.prio != int32(w.Priority) || d.target != w.Target || !slices.Equal(d.alpns, w.ALPNs) || d.port == nil ||
				*d.port != int32(w.Port) || !slices.Equal(d.hints, w.IPv4Hints) || (w.DoHPath == "") != (d.dohpath == nil) ||
				(d.dohpath != nil && *d.dohpath != w.DoHPath) {
				t.Errorf("%s (%s) designation %d: %+v, population says %+v", a, r.Class, i+1, d, w)
			}
		}
	}
	if designating == 0 {
		t.Fatal("the population designates no resolver")
	}
	t.Logf("%d responders designate resolvers; %d on lossy paths lost both tries", designating, lossyTimeouts)

	// The designated DoQ endpoints, and only those, verified as the population says.
	want := map[netip.AddrPort]population.Verdict{}
	for _, e := range g.pop.DDREndpoints() {
		want[netip.AddrPortFrom(e.Addr, e.Port)] = g.pop.ExpectVerify(e.Addr, e.Port)
	}
	vrows, err := s.Pool.Query(ctx, `SELECT address, port, outcome, detail FROM verification_results WHERE run_id = $1`, sum.RunID)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[netip.AddrPort]bool{}
	var unusual, dead int
	for vrows.Next() {
		var addr netip.Addr
		var port int32
		var outcome, detail string
		if err := vrows.Scan(&addr, &port, &outcome, &detail); err != nil {
			t.Fatal(err)
		}
		a := netip.AddrPortFrom(addr.Unmap(), uint16(port))
		seen[a] = true
		w, ok := want[a]
		switch {
		case !ok:
			t.Errorf("%s: verified, but no DDR designation names it", a)
		case w.Class == population.OutcomeTimeout && (outcome == string(verify.OutcomeTimeout) || outcome == string(verify.OutcomeUnreachable)):
			// Nothing listens there: silence, or the kernel's port unreachable.
			dead++
		case outcome != w.Class:
			t.Errorf("%s (designated): %s (%s), population says %s", a, outcome, detail, w.Class)
		case outcome == string(verify.OutcomeVerified) && port != 784 && port != 853 && port != 8853:
			unusual++
		}
	}
	if err := vrows.Err(); err != nil {
		t.Fatal(err)
	}
	for a := range want {
		if !seen[a] {
			t.Errorf("%s: designated DoQ endpoint not verified", a)
		}
	}
	if unusual == 0 || dead == 0 || sum.DDR.NewTargets != len(want) {
		t.Errorf("DoQ verified on ports no scan probes: %d, designated endpoints that do not answer: %d, new targets %d of %d; want some of each, all new",
			unusual, dead, sum.DDR.NewTargets, len(want))
	}
	if !strings.Contains(strings.Join(keys(sum.DDR.Statuses), ","), verify.DDRDesignations) {
		t.Errorf("summary statuses %v", sum.DDR.Statuses)
	}
}

func keys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
