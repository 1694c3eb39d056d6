package e2e_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/measure/campaign"
	"github.com/doqscan/doqscan/internal/store/storetest"
	"github.com/doqscan/doqscan/internal/testbed"
	"github.com/doqscan/doqscan/internal/testbed/population"
)

// dnsproxyRecords: the population's AdGuard dnsproxy addresses (skips when there are
// none or the peers are not installed).
func dnsproxyRecords(t *testing.T, pop *population.Population) []*population.Record {
	t.Helper()
	var out []*population.Record
	for i := range pop.Records {
		if r := &pop.Records[i]; r.Peer == population.PeerDNSProxy {
			testbed.RequirePeer(t, pop, r)
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		t.Skip("SKIP: the population has no dnsproxy address")
	}
	return out
}

func isTrue(b *bool) bool { return b != nil && *b }

// TestDNSProxyRetryFirstContact: dnsproxy (retry=first) sends Retry to the first DoQ
// connection from an address it has not seen and none to the next one from the same
// address, on each DoQ port separately, and issues NEW_TOKEN on both. From the vantage
// only first contacts use, on every DoQ port the ratio test has not first-contacted.
func TestDNSProxyRetryFirstContact(t *testing.T) {
	v, _ := testbed.RequirePopulation(t)
	m, _ := measure.For(measure.DoQ)
	n := 0
	for _, r := range dnsproxyRecords(t, v.Population) {
		for _, port := range r.QUICPorts {
			ap := netip.AddrPortFrom(r.Prefix.Addr(), port)
			if firstContacted[ap] {
				continue
			}
			firstContacted[ap] = true
			n++
			t.Run(fmt.Sprintf("%s/%v", r.Class, ap), func(t *testing.T) {
				for i, wantRetry := range []bool{true, false} {
					req := measure.Request{Addr: ap, ALPN: []string{"doq"}, KeyShare: measure.KeyShareX25519,
						Peer: measure.NewPeer(), Timeout: 5 * time.Second}
					res := measureFrom(t, v, firstContactVantage, m, &req)
					if res.Status != measure.StatusOK {
						t.Fatalf("connection %d: %s: %v", i+1, res.Status, res.Err)
					}
					t.Logf("connection %d: handshake %v, Retry %v, NEW_TOKEN %v (path %v)", i+1, res.Handshake,
						isTrue(res.RetrySeen), isTrue(res.TokenReceived), v.Population.PathOf(ap.Addr()).RTT)
					if isTrue(res.RetrySeen) != wantRetry {
						t.Errorf("connection %d without a token: Retry %v, want %v", i+1, isTrue(res.RetrySeen), wantRetry)
					}
					if !isTrue(res.TokenReceived) {
						t.Errorf("connection %d: no NEW_TOKEN", i+1)
					}
				}
			})
		}
	}
	if n == 0 {
		t.Log("every dnsproxy DoQ port was first-contacted by TestHandshakeToRTTRatio already (it asserts the Retry there)")
	}
}

// TestDNSProxyModesAndFeatures: a campaign round over the dnsproxy addresses in the
// fresh, resumed and 0rtt modes with the support checks, over their delayed paths
// (20 and 80 ms). The stored rows say what dnsproxy does: the resumed connection resumes
// the warm-up's ticket and presents its token, the 0rtt one has its early data
// accepted, NEW_TOKEN is issued (on every connection but the 0-RTT one, which has its
// answer before the server's NEW_TOKEN arrives), and no Retry is seen (the address was seen before: the
// test primes it, as any earlier exchange of a round does); the support checks agree.
func TestDNSProxyModesAndFeatures(t *testing.T) {
	_, pop := testbed.RequirePopulation(t)
	recs := dnsproxyRecords(t, pop)
	s := storetest.OpenVantage(t, "testbed")
	ctx := context.Background()
	var targets []campaign.Target
	for _, r := range recs {
		a := r.Prefix.Addr()
		primeRetryFirst(t, r, a, r.QUICPorts...)
		tg := campaign.Target{Addr: a}
		tg.Endpoints = append(tg.Endpoints, campaign.Endpoint{Protocol: measure.DoT, Port: r.DoT})
		for _, p := range r.QUICPorts {
			tg.Endpoints = append(tg.Endpoints, campaign.Endpoint{Protocol: measure.DoQ, Port: p, ALPN: "doq"})
		}
		targets = append(targets, tg)
	}
	cfg := campaign.Config{VantageID: "testbed", Label: "dnsproxy", Hour: time.Now().UTC().Truncate(time.Hour),
		Concurrency: 1, Features: true,
		Protocols: []measure.Protocol{measure.DoT, measure.DoQ},
		Modes:     []measure.Mode{measure.ModeFresh, measure.ModeResumed, measure.Mode0RTT}}
	sum, err := campaign.Run(ctx, s, cfg, targets, nil)
	if err != nil {
		t.Fatal(err)
	}
	type key struct {
		addr  netip.Addr
		port  int32
		proto string
		mode  string
		phase string
	}
	type row struct {
		status                                      string
		tokenReceived, tokenUsed, retry, res, early *bool
	}
	got := map[key]row{}
	rows, err := s.Pool.Query(ctx, `SELECT address, port, protocol, mode, phase, status, token_received, token_used,
		retry_seen, resumed, used_0rtt FROM measurements WHERE campaign_id = $1`, sum.CampaignID)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k key
		var r row
		if err := rows.Scan(&k.addr, &k.port, &k.proto, &k.mode, &k.phase, &r.status, &r.tokenReceived, &r.tokenUsed,
			&r.retry, &r.res, &r.early); err != nil {
			t.Fatal(err)
		}
		got[k] = r
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	b := func(p *bool) string {
		if p == nil {
			return "NULL"
		}
		return fmt.Sprint(*p)
	}
	for _, r := range recs {
		a := r.Prefix.Addr()
		for _, ep := range []struct {
			proto string
			port  uint16
		}{{"dot", r.DoT}, {"doq", r.QUICPorts[0]}, {"doq", r.QUICPorts[len(r.QUICPorts)-1]}} {
			for _, mode := range []string{"fresh", "resumed", "0rtt"} {
				if ep.proto == "dot" && mode == "0rtt" {
					continue
				}
				for _, phase := range []string{"warmup", "measured"} {
					k := key{a, int32(ep.port), ep.proto, mode, phase}
					g, ok := got[k]
					if !ok {
						t.Errorf("%v: no row", k)
						continue
					}
					t.Logf("%s %v:%d %s/%s: %s token_received=%s token_used=%s retry=%s resumed=%s 0rtt=%s", r.Class, a, ep.port,
						mode, phase, g.status, b(g.tokenReceived), b(g.tokenUsed), b(g.retry), b(g.res), b(g.early))
					if g.status != string(measure.StatusOK) {
						t.Errorf("%v: status %s", k, g.status)
						continue
					}
					if ep.proto != "doq" {
						if mode == "resumed" && phase == "measured" && !isTrue(g.res) {
							t.Errorf("%v: DoT session not resumed", k)
						}
						continue
					}
					if isTrue(g.retry) {
						t.Errorf("%v: Retry to an address the server has seen", k)
					}
					// dnsproxy sends NEW_TOKEN after the handshake completes; a 0-RTT
					// exchange has its answer (and closes) before that arrives.
					if !isTrue(g.tokenReceived) && (mode != "0rtt" || phase != "measured") {
						t.Errorf("%v: no NEW_TOKEN", k)
					}
					if phase == "measured" && !isTrue(g.tokenUsed) {
						t.Errorf("%v: the measured connection did not present the warm-up's token", k)
					}
					if phase == "measured" && mode != "fresh" && !isTrue(g.res) {
						t.Errorf("%v: session not resumed", k)
					}
					if phase == "measured" && mode == "0rtt" && !isTrue(g.early) {
						t.Errorf("%v: 0-RTT not accepted", k)
					}
					if mode == "fresh" && isTrue(g.res) {
						t.Errorf("%v: a fresh session resumed", k)
					}
				}
			}
		}
	}
	feats := map[string]string{}
	frows, err := s.Pool.Query(ctx, `SELECT address, protocol, port, feature, supported FROM resolver_features
		WHERE campaign_id = $1`, sum.CampaignID)
	if err != nil {
		t.Fatal(err)
	}
	for frows.Next() {
		var (
			a           netip.Addr
			proto, name string
			port        int32
			sup         *bool
		)
		if err := frows.Scan(&a, &proto, &port, &name, &sup); err != nil {
			t.Fatal(err)
		}
		feats[fmt.Sprintf("%v/%s/%d/%s", a, proto, port, name)] = b(sup)
	}
	frows.Close()
	for _, r := range recs {
		a := r.Prefix.Addr()
		want := map[string]string{fmt.Sprintf("%v/dot/%d/session-ticket", a, r.DoT): "true"}
		for _, p := range r.QUICPorts {
			for name, w := range map[string]string{"session-ticket": "true", "0rtt": "true", "new-token": "true", "retry": "false"} {
				want[fmt.Sprintf("%v/doq/%d/%s", a, p, name)] = w
			}
		}
		for k, w := range want {
			if feats[k] != w {
				t.Errorf("feature %s = %q, want %s", k, feats[k], w)
			} else {
				t.Logf("feature %s = %s", k, w)
			}
		}
	}
}
