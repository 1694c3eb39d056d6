package campaign_test

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/measure/campaign"
	"github.com/doqscan/doqscan/internal/measure/measuretest"
	"github.com/doqscan/doqscan/internal/store/storetest"
)

// closedPort returns a port of host where nothing listens (network "udp" or "tcp"): one
// the kernel gave a socket that is closed again.
func closedPort(t *testing.T, network, host string) uint16 {
	t.Helper()
	var addr net.Addr
	if network == "udp" {
		c, err := net.ListenPacket("udp", host+":0")
		if err != nil {
			t.Fatal(err)
		}
		addr = c.LocalAddr()
		c.Close()
	} else {
		l, err := net.Listen("tcp", host+":0")
		if err != nil {
			t.Fatal(err)
		}
		addr = l.Addr()
		l.Close()
	}
	return netip.MustParseAddrPort(addr.String()).Port()
}

// TestFeaturesAreUnknownWhereTheExchangeFailed: the support checks and the connection
// flags are stored true or false only from exchanges that got far enough to show them;
// elsewhere NULL, with a detail that says which exchange ended how. Three resolvers, the
// support checks on, modes fresh, resumed and 0rtt:
//   - one whose DoQ, DoT and DoTCP ports are closed (nothing listens);
//   - one whose every DoQ handshake fails (it speaks ALPN doq, the target offers doq-i02);
//   - one that supports everything checked (tickets, 0-RTT, NEW_TOKEN) and never sends a
//     Retry: its values are known, true and false, each with its own detail.
func TestFeaturesAreUnknownWhereTheExchangeFailed(t *testing.T) {
	s := storetest.OpenVantage(t, "test")
	ctx := context.Background()
	good := measuretest.Start(t, measuretest.Config{Host: "127.0.0.41", Allow0RTT: true})
	failing := measuretest.Start(t, measuretest.Config{Host: "127.0.0.43"})
	const closedHost = "127.0.0.42"
	targets := []campaign.Target{
		{Addr: netip.MustParseAddr("127.0.0.41"), Endpoints: []campaign.Endpoint{
			{Protocol: measure.DoQ, Port: good.DoQ.Port(), ALPN: "doq"},
			{Protocol: measure.DoT, Port: good.DoT.Port()},
		}},
		{Addr: netip.MustParseAddr(closedHost), Endpoints: []campaign.Endpoint{
			{Protocol: measure.DoQ, Port: closedPort(t, "udp", closedHost), ALPN: "doq"},
			{Protocol: measure.DoT, Port: closedPort(t, "tcp", closedHost)},
			{Protocol: measure.DoTCP, Port: closedPort(t, "tcp", closedHost)},
		}},
		{Addr: netip.MustParseAddr("127.0.0.43"), Endpoints: []campaign.Endpoint{
			{Protocol: measure.DoQ, Port: failing.DoQ.Port(), ALPN: "doq-i02"},
		}},
	}
	cfg := campaign.Config{VantageID: "test", Label: "features", Hour: hour, Timeout: time.Second, Concurrency: 3,
		Protocols: []measure.Protocol{measure.DoQ, measure.DoT, measure.DoTCP},
		Modes:     []measure.Mode{measure.ModeFresh, measure.ModeResumed, measure.Mode0RTT},
		Features:  true, RTTSamples: 1, RTTTimeout: 300 * time.Millisecond}
	sum, err := campaign.Run(ctx, s, cfg, targets, logger())
	if err != nil {
		t.Fatal(err)
	}

	type feature struct {
		supported *bool
		detail    string
	}
	got := map[string]feature{}
	rows, err := s.Pool.Query(ctx, `SELECT host(address) || '/' || protocol || '/' || feature, supported, detail
		FROM resolver_features WHERE campaign_id = $1`, sum.CampaignID)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		var f feature
		if err := rows.Scan(&k, &f.supported, &f.detail); err != nil {
			t.Fatal(err)
		}
		got[k] = f
	}
	rows.Close()
	show := func(b *bool) string {
		if b == nil {
			return "NULL"
		}
		if *b {
			return "true"
		}
		return "false"
	}
	want := map[string]string{
		"127.0.0.41/doq/new-token": "true", "127.0.0.41/doq/retry": "false", "127.0.0.41/doq/session-ticket": "true",
		"127.0.0.41/doq/0rtt": "true", "127.0.0.41/dot/session-ticket": "true",
	}
	for _, f := range []string{"new-token", "retry", "session-ticket", "0rtt"} {
		want["127.0.0.42/doq/"+f] = "NULL"
		want["127.0.0.43/doq/"+f] = "NULL"
	}
	want["127.0.0.42/dot/session-ticket"] = "NULL"
	want["127.0.0.42/dotcp/tfo"] = "NULL"
	want["127.0.0.42/dotcp/edns-tcp-keepalive"] = "NULL"
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			t.Errorf("%s: no row, want %s", k, w)
		case show(g.supported) != w:
			t.Errorf("%s = %s (%s), want %s", k, show(g.supported), g.detail, w)
		case (w == "NULL") != strings.HasPrefix(g.detail, "unknown: "):
			t.Errorf("%s = %s with detail %q: the detail does not say what was seen", k, w, g.detail)
		default:
			t.Logf("%s = %s: %s", k, w, g.detail)
		}
	}
	if got["127.0.0.41/doq/retry"].detail == got["127.0.0.41/doq/new-token"].detail {
		t.Errorf("a true and a false value with the same detail %q", got["127.0.0.41/doq/retry"].detail)
	}

	// The connection flags of the failed exchanges are unknown too, those of the answered
	// ones known.
	var unknownFlags, falseFlags, knownFlags int
	if err := s.Pool.QueryRow(ctx, `SELECT
		count(*) FILTER (WHERE status <> 'ok' AND token_received IS NULL AND retry_seen IS NULL AND vn_seen IS NULL),
		count(*) FILTER (WHERE status <> 'ok' AND (token_received = false OR retry_seen = false OR vn_seen = false)),
		count(*) FILTER (WHERE status = 'ok' AND retry_seen IS NOT NULL AND vn_seen IS NOT NULL AND token_received IS NOT NULL)
		FROM measurements WHERE campaign_id = $1 AND protocol = 'doq'`, sum.CampaignID).Scan(&unknownFlags, &falseFlags, &knownFlags); err != nil {
		t.Fatal(err)
	}
	t.Logf("DoQ measurements: %d failed with unknown flags, %d failed with a false flag, %d answered with known flags",
		unknownFlags, falseFlags, knownFlags)
	if falseFlags != 0 || unknownFlags == 0 || knownFlags == 0 {
		t.Errorf("DoQ measurements: %d failed ones with a false token_received/retry_seen/vn_seen (want 0), %d with NULL, %d answered with known flags",
			falseFlags, unknownFlags, knownFlags)
	}
}
