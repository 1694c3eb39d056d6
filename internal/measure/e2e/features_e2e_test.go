package e2e_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/measure/campaign"
	"github.com/doqscan/doqscan/internal/store/storetest"
	"github.com/doqscan/doqscan/internal/testbed"
	"github.com/doqscan/doqscan/internal/testbed/population"
)

// TestFeaturesOnlyFromExchangesThatShowThem: a round with the support checks (modes
// fresh, resumed, 0rtt) over the testbed's CoreDNS and dnsproxy peers and over endpoints
// where every exchange fails: a closed DoQ port (CoreDNS's 8853, where nothing listens
// in the peers' namespace), a closed UDP/443 for DoH3 (CoreDNS serves no HTTP/3), and
// servers whose every DoQ handshake fails (h3-only ALPN, garbage, a VN listing only
// drafts). Asserted, from the stored rows:
//   - no resolver_features row is false where no exchange of its endpoint succeeded;
//   - every feature of a failing endpoint is NULL, with a detail starting "unknown:";
//   - the peers' features are known and what they do (docs/peers.md): NEW_TOKEN sent,
//     no Retry (the dnsproxy addresses were primed), tickets resumed, 0-RTT accepted;
//   - no DoQ measurement whose handshake did not complete says false for token_received,
//     retry_seen or vn_seen.
func TestFeaturesOnlyFromExchangesThatShowThem(t *testing.T) {
	_, pop := testbed.RequirePopulation(t)
	byClass := map[string]*population.Record{}
	for i := range pop.Records {
		byClass[pop.Records[i].Class] = &pop.Records[i]
	}
	need := func(class string) *population.Record {
		r := byClass[class]
		if r == nil {
			t.Fatalf("the population has no class %s", class)
		}
		testbed.RequirePeer(t, pop, r)
		return r
	}
	coredns, dnsproxy := need("peer-coredns"), need("peer-dnsproxy")
	h3only, garbage, drafts := need("quic-h3"), need("hostile-garbage"), need("quic-draft-only")
	primeRetryFirst(t, dnsproxy, dnsproxy.Prefix.Addr(), dnsproxy.QUICPorts...)

	type ep = campaign.Endpoint
	peer := func(r *population.Record, extra ...ep) campaign.Target {
		tg := campaign.Target{Addr: r.Prefix.Addr(), Endpoints: []ep{{Protocol: measure.DoTCP, Port: 53}, {Protocol: measure.DoT, Port: r.DoT}}}
		for _, p := range r.QUICPorts {
			tg.Endpoints = append(tg.Endpoints, ep{Protocol: measure.DoQ, Port: p, ALPN: "doq"})
		}
		tg.Endpoints = append(tg.Endpoints, extra...)
		return tg
	}
	failing := func(r *population.Record) campaign.Target {
		return campaign.Target{Addr: r.Prefix.Addr(), Endpoints: []ep{{Protocol: measure.DoQ, Port: r.QUICPorts[0], ALPN: "doq"}}}
	}
	targets := []campaign.Target{
		peer(coredns, ep{Protocol: measure.DoQ, Port: 8853, ALPN: "doq"}, ep{Protocol: measure.DoH3, Port: 443}),
		peer(dnsproxy, ep{Protocol: measure.DoH3, Port: dnsproxy.DoH3}),
		failing(h3only), failing(garbage), failing(drafts),
	}
	s := storetest.OpenVantage(t, "testbed")
	ctx := context.Background()
	cfg := campaign.Config{VantageID: "testbed", Label: "features", Hour: time.Now().UTC().Truncate(time.Hour),
		Concurrency: len(targets), Features: true, Timeout: 2 * time.Second, RTTSamples: 1,
		Protocols:   []measure.Protocol{measure.DoTCP, measure.DoT, measure.DoQ, measure.DoH3},
		Modes:       []measure.Mode{measure.ModeFresh, measure.ModeResumed, measure.Mode0RTT},
		DoHVariants: []string{measure.VariantGET}}
	sum, err := campaign.Run(ctx, s, cfg, targets, nil)
	if err != nil {
		t.Fatal(err)
	}

	// No false where no exchange of the endpoint succeeded.
	rows, err := s.Pool.Query(ctx, `SELECT host(f.address), f.protocol, f.port, f.feature, f.detail FROM resolver_features f
		WHERE f.campaign_id = $1 AND f.supported = false AND NOT EXISTS (SELECT 1 FROM measurements m
		  WHERE m.campaign_id = f.campaign_id AND m.address = f.address AND m.protocol = f.protocol AND m.port = f.port AND m.status = 'ok')`,
		sum.CampaignID)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var a, proto, feature, detail string
		var port int32
		if err := rows.Scan(&a, &proto, &port, &feature, &detail); err != nil {
			t.Fatal(err)
		}
		t.Errorf("%s %s:%d %s = false (%s), but no exchange of the endpoint succeeded", proto, a, port, feature, detail)
	}
	rows.Close()

	type fv struct {
		v      string
		detail string
	}
	got := map[string]fv{}
	rows, err = s.Pool.Query(ctx, `SELECT host(address) || ' ' || protocol || ':' || port || ' ' || feature,
		coalesce(supported::text, 'NULL'), detail FROM resolver_features WHERE campaign_id = $1`, sum.CampaignID)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		var f fv
		if err := rows.Scan(&k, &f.v, &f.detail); err != nil {
			t.Fatal(err)
		}
		got[k] = f
	}
	rows.Close()
	want := map[string]string{}
	key := func(a netip.Addr, p measure.Protocol, port uint16, f string) string {
		return fmt.Sprintf("%s %s:%d %s", a, p, port, f)
	}
	doqFeatures := []string{campaign.FeatureNewToken, campaign.FeatureRetry, campaign.FeatureSessionTicket, campaign.Feature0RTT}
	for _, r := range []*population.Record{h3only, garbage, drafts} {
		for _, f := range doqFeatures {
			want[key(r.Prefix.Addr(), measure.DoQ, r.QUICPorts[0], f)] = "NULL"
		}
	}
	for _, f := range doqFeatures {
		want[key(coredns.Prefix.Addr(), measure.DoQ, 8853, f)] = "NULL"
	}
	want[key(coredns.Prefix.Addr(), measure.DoH3, 443, campaign.Feature0RTT)] = "NULL"
	for _, r := range []*population.Record{coredns, dnsproxy} {
		a := r.Prefix.Addr()
		for _, p := range r.QUICPorts {
			want[key(a, measure.DoQ, p, campaign.FeatureNewToken)] = "true"
			want[key(a, measure.DoQ, p, campaign.FeatureRetry)] = "false"
			want[key(a, measure.DoQ, p, campaign.FeatureSessionTicket)] = "true"
			want[key(a, measure.DoQ, p, campaign.Feature0RTT)] = "true"
		}
		want[key(a, measure.DoT, r.DoT, campaign.FeatureSessionTicket)] = "true"
		want[key(a, measure.DoTCP, 53, campaign.FeatureTFO)] = "known"
		want[key(a, measure.DoTCP, 53, campaign.FeatureTCPKeepalive)] = "known"
	}
	want[key(dnsproxy.Prefix.Addr(), measure.DoH3, dnsproxy.DoH3, campaign.Feature0RTT)] = "known"
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			t.Errorf("%s: no row, want %s", k, w)
		case w == "known" && g.v == "NULL", w != "known" && g.v != w:
			t.Errorf("%s = %s (%s), want %s", k, g.v, g.detail, w)
		case (g.v == "NULL") != strings.HasPrefix(g.detail, "unknown: "):
			t.Errorf("%s = %s with detail %q: the detail does not say what was seen", k, g.v, g.detail)
		default:
			t.Logf("%s = %s: %s", k, g.v, g.detail)
		}
	}

	var falseFlags int
	if err := s.Pool.QueryRow(ctx, `SELECT count(*) FROM measurements WHERE campaign_id = $1 AND protocol IN ('doq', 'doh3')
		AND handshake_ns IS NULL AND (token_received = false OR retry_seen = false OR vn_seen = false)`, sum.CampaignID).Scan(&falseFlags); err != nil {
		t.Fatal(err)
	}
	if falseFlags != 0 {
		t.Errorf("%d QUIC measurements without a completed handshake say false for token_received, retry_seen or vn_seen", falseFlags)
	}
}
