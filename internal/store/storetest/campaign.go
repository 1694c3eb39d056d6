package storetest

import (
	"context"
	"slices"
	"testing"

	"github.com/doqscan/doqscan/internal/store"
)

// CampaignTables are the tables of a measurement round's rows, in the order
// SameCampaignRows reports them.
var CampaignTables = []string{"measurements", "rtt_samples", "qlogs", "handshake_analyses", "resolver_features"}

// CampaignKeys returns, per table, the natural keys (without the campaign) of the rows of
// the campaign labelled label, sorted; a key stored twice appears twice. RTT samples of
// TCP and QUIC carry their status too (a probe cut short is a timeout under the same
// key); a UDP probe's answer depends on its random bytes (a DNS server ignores a
// "response"), so not its.
func CampaignKeys(t testing.TB, s *store.Store, label string) map[string][]string {
	t.Helper()
	const mkey = "m.address::text, m.protocol, m.port::text, m.variant, m.mode, m.key_share, m.phase, m.seq::text"
	out := map[string][]string{}
	for table, q := range map[string]string{
		"measurements": `SELECT concat_ws('|', ` + mkey + `) FROM measurements m JOIN campaigns c USING (campaign_id) WHERE c.label = $1`,
		"rtt_samples": `SELECT concat_ws('|', r.address::text, r.transport, r.port::text, r.seq::text,
			CASE WHEN r.transport <> 'udp' THEN r.status END) FROM rtt_samples r JOIN campaigns c USING (campaign_id) WHERE c.label = $1`,
		"qlogs": `SELECT concat_ws('|', ` + mkey + `) FROM qlogs q JOIN campaigns c USING (campaign_id)
			JOIN measurements m ON m.qlog_id = q.qlog_id AND m.seq = 0 WHERE c.label = $1`,
		"handshake_analyses": `SELECT concat_ws('|', ` + mkey + `) FROM handshake_analyses a JOIN measurements m USING (measurement_id)
			JOIN campaigns c ON c.campaign_id = m.campaign_id WHERE c.label = $1`,
		"resolver_features": `SELECT concat_ws('|', f.address::text, f.protocol, f.port::text, f.feature) FROM resolver_features f
			JOIN campaigns c USING (campaign_id) WHERE c.label = $1`,
	} {
		rows, err := s.Pool.Query(context.Background(), q, label)
		if err != nil {
			t.Fatalf("%s: %v", table, err)
		}
		var keys []string
		for rows.Next() {
			var k string
			if err := rows.Scan(&k); err != nil {
				t.Fatal(err)
			}
			keys = append(keys, k)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		slices.Sort(keys)
		out[table] = keys
	}
	// Every qlog must be reached by the join above (one measurement with seq 0 each).
	var qlogs int64
	if err := s.Pool.QueryRow(context.Background(), `SELECT count(*) FROM qlogs q JOIN campaigns c USING (campaign_id) WHERE c.label = $1`,
		label).Scan(&qlogs); err != nil {
		t.Fatal(err)
	}
	if int(qlogs) != len(out["qlogs"]) {
		t.Errorf("%s: %d qlogs, %d reached from their measurements", label, qlogs, len(out["qlogs"]))
	}
	return out
}

// SameCampaignRows compares the rows of the campaign labelled label with those of the
// reference campaign refLabel (CampaignKeys): equal keys, none twice, and the reference
// stored some of every table but resolver_features.
func SameCampaignRows(t testing.TB, s *store.Store, label, refLabel string) {
	t.Helper()
	got, want := CampaignKeys(t, s, label), CampaignKeys(t, s, refLabel)
	for _, table := range CampaignTables {
		g, w := got[table], want[table]
		dup := len(g) - len(slices.Compact(slices.Clone(g)))
		lost := 0
		for _, k := range w {
			if _, ok := slices.BinarySearch(g, k); !ok {
				lost++
			}
		}
		t.Logf("%s: %s %d rows, reference %d rows; %d lost, %d duplicated", table, label, len(g), len(w), lost, dup)
		if dup > 0 || lost > 0 || len(g) != len(w) {
			t.Errorf("%s: %d rows (%d lost, %d duplicated), the reference round %d", table, len(g), lost, dup, len(w))
			shown := 0
			for _, k := range w {
				if _, ok := slices.BinarySearch(g, k); !ok && shown < 10 {
					t.Logf("%s: lost %s", table, k)
					shown++
				}
			}
		}
		if len(w) == 0 && table != "resolver_features" {
			t.Errorf("%s: the reference round stored none", table)
		}
	}
}
