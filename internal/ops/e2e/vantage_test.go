package e2e

import (
	"context"
	"fmt"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/testbed/netns"
)

// TestShardedScanTwoVantages: one zmap scan of a /22 split over two scanner machines
// (the two vantage namespaces) with the same seed, --shards 2 and --shard 0|1, stored
// with their own vantage ids in one database. On the target side, the two shards probe
// disjoint sets whose union is every address of the /22; in the database, the replies
// of both together are exactly the population's QUIC speakers there.
func TestShardedScanTwoVantages(t *testing.T) {
	e := setup(t)
	const port = 853
	p22, speakers := quietSlash22(t, e.pop, port)
	t.Logf("scanning %s (%d QUIC speakers on %d) in two shards", p22, len(speakers), port)
	cap := startCapture(t, e.v, fmt.Sprintf("udp and dst port %d and dst net %s", port, p22))
	out := t.TempDir()
	for shard := 0; shard < 2; shard++ {
		o := e.run(t, shard, "zprobe", "scan", "--vantage", fmt.Sprintf("vp%d", shard), "--label", "sharded",
			"--week", "2026-W47", "--testbed", "198.19.0.0/16", "--targets", p22.String(),
			"--quic-ports", fmt.Sprint(port), "--dns-ports", "", "--seed", "20261122", "--shards", "2",
			"--shard", fmt.Sprint(shard), "--rate", "3000", "--cooldown", "2", "--out", out)
		if testing.Verbose() {
			t.Logf("shard %d:\n%s", shard, tail(o, 15))
		}
	}
	flows := cap.stop()

	probed := map[netip.Addr]int{} // target -> shard that probed it
	sent := [2]int{}
	for _, f := range flows {
		shard := -1
		for i := 0; i < 2; i++ {
			if f.src == netns.VantageAddr(i) {
				shard = i
			}
		}
		if shard < 0 {
			t.Errorf("datagram from unexpected source %s", f.src)
			continue
		}
		sent[shard]++
		if prev, ok := probed[f.dst]; ok && prev != shard {
			t.Errorf("%s probed by both shards (overlap)", f.dst)
		}
		probed[f.dst] = shard
	}
	var gaps []netip.Addr
	for a := p22.Addr(); p22.Contains(a); a = a.Next() {
		if _, ok := probed[a]; !ok {
			gaps = append(gaps, a)
		}
	}
	if len(gaps) > 0 {
		t.Errorf("%d addresses of %s probed by no shard (gap), e.g. %v", len(gaps), p22, gaps[:min(5, len(gaps))])
	}
	if len(probed) != 1<<(32-22) {
		t.Errorf("%d distinct targets probed, want %d", len(probed), 1<<(32-22))
	}
	t.Logf("target side: shard 0 (198.18.0.2) %d datagrams, shard 1 (198.18.1.2) %d, %d distinct targets", sent[0], sent[1], len(probed))
	if sent[0] == 0 || sent[1] == 0 {
		t.Errorf("a shard sent nothing: %v", sent)
	}

	// The database: two scans of one week and label, one per vantage and shard.
	if n := e.count(t, `SELECT count(DISTINCT (vantage_id, shard)) FROM scans WHERE iso_week = '2026-W47' AND label = 'sharded'`); n != 2 {
		t.Errorf("%d (vantage, shard) scans, want 2", n)
	}
	rows, err := e.s.Pool.Query(context.Background(), `SELECT s.vantage_id, s.shard, r.address FROM scan_replies r
		JOIN scans s USING (scan_id) WHERE r.reply_kind = 'quic-vn' AND r.port = $1`, port)
	if err != nil {
		t.Fatal(err)
	}
	var got []netip.Addr
	for rows.Next() {
		var vid string
		var shard int
		var a netip.Addr
		if err := rows.Scan(&vid, &shard, &a); err != nil {
			t.Fatal(err)
		}
		if vid != fmt.Sprintf("vp%d", shard) {
			t.Errorf("shard %d stored under vantage %s", shard, vid)
		}
		if probed[a] != shard {
			t.Errorf("%s answered shard %d but was probed by shard %d", a, shard, probed[a])
		}
		got = append(got, a)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(got, netip.Addr.Compare)
	want := slices.Clone(speakers)
	slices.SortFunc(want, netip.Addr.Compare)
	if !slices.Equal(got, want) {
		t.Errorf("the shards' VN replies together (%d) differ from the population's speakers in %s (%d)", len(got), p22, len(want))
	}
}

// TestMeasureFromTwoVantages: one measurement round, same hour, the same resolvers,
// from both vantage namespaces into one database; vantage 1's round trips exceed
// vantage 0's by the configured extra distance.
func TestMeasureFromTwoVantages(t *testing.T) {
	e := setup(t)
	// A few well-behaved DNS servers on loss- and jitter-free paths.
	var resolvers []netip.Addr
	for _, a := range e.pop.DNSServers("udp") {
		r := e.pop.Lookup(a)
		p := e.pop.PathOf(a)
		if r.Hostile == "" && r.Peer == "" && (r.RCode == "" || r.RCode == "NOERROR") && r.HasDNS("tcp") && p.Loss == 0 && p.Jitter == 0 {
			resolvers = append(resolvers, a)
		}
	}
	slices.SortFunc(resolvers, netip.Addr.Compare)
	if len(resolvers) < 3 {
		t.Fatalf("population has %d well-behaved DNS servers on quiet paths, want 3", len(resolvers))
	}
	resolvers = resolvers[:3]
	var lines []string
	for _, a := range resolvers {
		lines = append(lines, a.String())
	}
	file := filepath.Join(t.TempDir(), "resolvers.txt")
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const hour = "2026-11-22T04"
	for vp := 0; vp < 2; vp++ {
		o := e.run(t, vp, "measure", "--vantage", fmt.Sprintf("vp%d", vp), "--hour", hour, "--targets", file,
			"--protocols", "doudp,dotcp", "--rtt-samples", "3", "--concurrency", "3", "--timeout", "3s")
		if testing.Verbose() {
			t.Logf("vp%d:\n%s", vp, tail(o, 15))
		}
	}
	if n := e.count(t, `SELECT count(*) FROM campaigns WHERE round_hour = '2026-11-22T04:00:00Z' AND vantage_id IN ('vp0', 'vp1')`); n != 2 {
		t.Fatalf("%d campaigns for the hour, want one per vantage (2)", n)
	}
	for _, a := range resolvers {
		var rtt [2]float64
		for vp := 0; vp < 2; vp++ {
			var ms *float64
			err := e.s.Pool.QueryRow(context.Background(), `SELECT min(r.rtt_ns)/1e6 FROM rtt_samples r JOIN campaigns c USING (campaign_id)
				WHERE c.vantage_id = $1 AND r.address = $2 AND r.status = 'ok'`, fmt.Sprintf("vp%d", vp), a).Scan(&ms)
			if err != nil {
				t.Fatal(err)
			}
			if ms == nil {
				t.Fatalf("%s: no successful RTT sample from vp%d", a, vp)
			}
			rtt[vp] = *ms
			if n := e.count(t, `SELECT count(*) FROM measurements m JOIN campaigns c USING (campaign_id)
				WHERE c.vantage_id = $1 AND m.address = $2 AND m.status = 'ok'`, fmt.Sprintf("vp%d", vp), a); n == 0 {
				t.Errorf("%s: no successful measurement from vp%d", a, vp)
			}
		}
		path := e.pop.PathOf(a).RTT
		diff := time.Duration((rtt[1] - rtt[0]) * float64(time.Millisecond))
		t.Logf("%s (path %v): min RTT vp0 %.2f ms, vp1 %.2f ms, difference %v (configured %v)", a, path, rtt[0], rtt[1], diff.Round(10*time.Microsecond), vantage1RTT)
		if math.Abs(float64(diff-vantage1RTT)) > float64(3*time.Millisecond) {
			t.Errorf("%s: vp1 - vp0 = %v, want %v ± 3ms", a, diff, vantage1RTT)
		}
		if got := time.Duration(rtt[0] * float64(time.Millisecond)); got < path-time.Millisecond || got > path+5*time.Millisecond {
			t.Errorf("%s: vp0 RTT %v, path %v", a, got, path)
		}
	}
}
