package campaign_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/measure/campaign"
	"github.com/doqscan/doqscan/internal/measure/measuretest"
	"github.com/doqscan/doqscan/internal/store"
	"github.com/doqscan/doqscan/internal/store/storetest"
)

var hour = time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC)

// endpoints are one endpoint of every protocol: the UDP and TCP ones of servers, the QUIC
// ones (DoQ, DoH3) of quic.
func endpoints(servers, quic *measuretest.Servers) []campaign.Endpoint {
	return []campaign.Endpoint{
		{Protocol: measure.DoUDP, Port: servers.UDP.Port()},
		{Protocol: measure.DoTCP, Port: servers.TCP.Port()},
		{Protocol: measure.DoT, Port: servers.DoT.Port()},
		{Protocol: measure.DoH, Port: servers.DoH.Port()},
		{Protocol: measure.DoQ, Port: quic.DoQ.Port(), ALPN: "doq"},
		{Protocol: measure.DoH3, Port: quic.DoH3.Port()},
	}
}

// targetsFor starts one set of servers per address and returns them as targets.
func targetsFor(t *testing.T, hosts []string, cfg measuretest.Config) []campaign.Target {
	var out []campaign.Target
	for _, h := range hosts {
		c := cfg
		c.Host = h
		s := measuretest.Start(t, c)
		out = append(out, campaign.Target{Addr: netip.MustParseAddr(h), Endpoints: endpoints(s, s)})
	}
	return out
}

func counts(t *testing.T, s *store.Store, cid int64) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, q := range []struct{ name, sql string }{
		{"measurements", "SELECT count(*) FROM measurements WHERE campaign_id = $1"},
		{"qlogs", "SELECT count(*) FROM qlogs WHERE campaign_id = $1"},
		{"rtt_samples", "SELECT count(*) FROM rtt_samples WHERE campaign_id = $1"},
		{"handshake_analyses", "SELECT count(*) FROM handshake_analyses a JOIN measurements m USING (measurement_id) WHERE m.campaign_id = $1"},
		{"resolver_features", "SELECT count(*) FROM resolver_features WHERE campaign_id = $1"},
	} {
		var n int64
		if err := s.Pool.QueryRow(context.Background(), q.sql, cid).Scan(&n); err != nil {
			t.Fatal(err)
		}
		out[q.name] = n
	}
	return out
}

func logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func TestRoundWritesEverythingOnceAndResumes(t *testing.T) {
	s := storetest.OpenVantage(t, "test")
	ctx := context.Background()
	hosts := []string{"127.0.0.10", "127.0.0.11", "127.0.0.12", "127.0.0.13"}
	targets := targetsFor(t, hosts, measuretest.Config{})
	cfg := campaign.Config{
		VantageID: "test", Hour: hour, Timeout: 2 * time.Second, Concurrency: 1, BatchSize: 1,
		Modes:    []measure.Mode{measure.ModeFresh, measure.ModePersistent},
		Features: true, RTTSamples: 2, RTTTimeout: 300 * time.Millisecond, Persistent: 3,
	}

	// Reference: one uninterrupted round.
	ref := cfg
	ref.Label = "reference"
	sum, err := campaign.Run(ctx, s, ref, targets, logger())
	if err != nil {
		t.Fatal(err)
	}
	want := counts(t, s, sum.CampaignID)
	t.Logf("reference round: %+v rows %v", sum, want)
	for name, n := range want {
		if n == 0 {
			t.Errorf("reference round wrote no %s", name)
		}
	}
	for p, st := range sum.Status {
		for status, n := range st {
			if status != string(measure.StatusOK) {
				t.Errorf("%s: %d measured exchanges with status %s", p, n, status)
			}
		}
	}
	// Every measurement of every protocol: warm-up + measured, persistent adds queries.
	var dohRows int64
	_ = s.Pool.QueryRow(ctx, `SELECT count(*) FROM measurements WHERE campaign_id=$1 AND protocol='doh' AND phase='measured' AND mode='fresh'`, sum.CampaignID).Scan(&dohRows)
	if dohRows != int64(2*len(hosts)) {
		t.Errorf("DoH fresh measured rows %d, want GET+POST for %d resolvers", dohRows, len(hosts))
	}

	// Rerun of the same round: nothing is added.
	again, err := campaign.Run(ctx, s, ref, targets, logger())
	if err != nil {
		t.Fatal(err)
	}
	if again.CampaignID != sum.CampaignID || again.Skipped != len(hosts) || again.Rows != 0 {
		t.Errorf("rerun: %+v", again)
	}
	if got := counts(t, s, sum.CampaignID); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("rerun changed the rows: %v, want %v", got, want)
	}

	// Interrupted after the first resolver is stored, then restarted: same rows. The
	// measuring runs ahead of the writer, so every other resolver's results wait until
	// the interrupt: without that, all four could be measured before the first batch is
	// stored and the cancel arrives.
	cctx, cancel := context.WithCancel(ctx)
	cut := cfg
	cut.OnFlush = func(stored int) {
		if stored >= 1 {
			cancel()
		}
	}
	var firstMu sync.Mutex
	var first netip.Addr
	cut.OnResult = func(tg campaign.Target, _ campaign.Endpoint, _ string, _ *measure.Result) {
		firstMu.Lock()
		if !first.IsValid() {
			first = tg.Addr
		}
		other := tg.Addr != first
		firstMu.Unlock()
		if other {
			<-cctx.Done()
		}
	}
	part, err := campaign.Run(cctx, s, cut, targets, logger())
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted round returned %v", err)
	}
	if part.Measured == 0 || part.Measured >= len(hosts) {
		t.Fatalf("interrupted round stored %d of %d resolvers", part.Measured, len(hosts))
	}
	var status string
	_ = s.Pool.QueryRow(ctx, `SELECT status FROM campaigns WHERE campaign_id=$1`, part.CampaignID).Scan(&status)
	if status != "interrupted" {
		t.Errorf("campaign status %q after interrupt", status)
	}
	rest, err := campaign.Run(ctx, s, cfg, targets, logger())
	if err != nil {
		t.Fatal(err)
	}
	if rest.CampaignID != part.CampaignID || rest.Skipped != part.Measured || rest.Measured != len(hosts)-part.Measured {
		t.Errorf("restart: %+v after %+v", rest, part)
	}
	if got := counts(t, s, part.CampaignID); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("interrupted+restarted round has %v, an uninterrupted one %v", got, want)
	}
}

// With several vantage points writing one database, a round measures the newest run of
// its own vantage point and label, not the newest of all.
func TestLatestRunIsTheVantagePointsOwn(t *testing.T) {
	s := storetest.OpenVantage(t, "vp-a")
	ctx := context.Background()
	for _, v := range []string{"vp-b", "vp-c"} {
		if err := s.EnsureVantage(ctx, store.Vantage{ID: v}); err != nil {
			t.Fatal(err)
		}
	}
	ids := map[string]int64{}
	// In start order: vp-a's weekly, vp-a's "extra", then vp-b's weekly, the newest of all.
	for i, r := range []struct{ vantage, label string }{{"vp-a", "weekly"}, {"vp-a", "extra"}, {"vp-b", "weekly"}} {
		id, _, err := s.StartVerificationRun(ctx, store.VerificationRun{ISOWeek: "2026-W47", VantageID: r.vantage, Label: r.label})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Pool.Exec(ctx, `UPDATE verification_runs SET started_at = $2 WHERE run_id = $1`,
			id, hour.Add(time.Duration(i)*time.Minute)); err != nil {
			t.Fatal(err)
		}
		if _, err := store.Insert(ctx, s, store.TableVerificationResults, []store.VerificationResult{{RunID: id,
			Address: netip.MustParseAddr("198.19.0.1"), Port: 853, Outcome: "doq-verified", VerifiedAt: hour}}); err != nil {
			t.Fatal(err)
		}
		ids[r.vantage+"/"+r.label] = id
	}
	for _, tc := range []struct {
		sel  campaign.RunSelection
		want string
	}{
		{campaign.RunSelection{Vantage: "vp-a"}, "vp-a/weekly"},
		{campaign.RunSelection{Vantage: "vp-a", Label: "extra"}, "vp-a/extra"},
		{campaign.RunSelection{Vantage: "vp-b"}, "vp-b/weekly"},
	} {
		got, err := campaign.LatestRun(ctx, s, tc.sel)
		if err != nil || got.RunID != ids[tc.want] {
			t.Errorf("LatestRun(%+v) = %+v, %v; want run %d (%s)", tc.sel, got, err, ids[tc.want], tc.want)
		}
	}
	if got, err := campaign.LatestRun(ctx, s, campaign.RunSelection{Vantage: "vp-c"}); err == nil {
		t.Errorf("vantage point without a run got run %+v", got)
	}
}

func TestTargetsFromVerification(t *testing.T) {
	s := storetest.OpenVantage(t, "test")
	ctx := context.Background()
	runID, _, err := s.StartVerificationRun(ctx, store.VerificationRun{ISOWeek: "2026-W47", VantageID: "test"})
	if err != nil {
		t.Fatal(err)
	}
	alpn := "doq-i02"
	in := []store.VerificationResult{
		{RunID: runID, Address: netip.MustParseAddr("198.19.0.1"), Port: 853, Outcome: "doq-verified", VerifiedAt: hour},
		{RunID: runID, Address: netip.MustParseAddr("198.19.0.1"), Port: 784, Outcome: "doq-verified", ALPN: &alpn, VerifiedAt: hour},
		{RunID: runID, Address: netip.MustParseAddr("198.19.0.2"), Port: 853, Outcome: "quic-not-doq", VerifiedAt: hour},
	}
	if _, err := store.Insert(ctx, s, store.TableVerificationResults, in); err != nil {
		t.Fatal(err)
	}
	latest, err := campaign.LatestRun(ctx, s, campaign.RunSelection{Vantage: "test"})
	if err != nil || latest.RunID != runID {
		t.Fatalf("latest run %+v %v, want %d", latest, err, runID)
	}
	got, err := campaign.LoadTargets(ctx, s, runID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Addr != in[0].Address {
		t.Fatalf("targets %+v", got)
	}
	var doq []string
	for _, e := range got[0].Endpoints {
		if e.Protocol == measure.DoQ {
			doq = append(doq, fmt.Sprintf("%d/%s", e.Port, e.ALPN))
		}
	}
	if strings.Join(doq, ",") != "784/doq-i02,853/doq" {
		t.Errorf("DoQ endpoints %v", doq)
	}
	if len(got[0].Endpoints) != 2+len(measure.Protocols)-1 {
		t.Errorf("endpoints %+v", got[0].Endpoints)
	}
}

func TestParseTargets(t *testing.T) {
	ts, err := campaign.ParseTargets(strings.NewReader("# comment\n198.19.0.7 doq=784/doq-i02 sni=dns.test\n\n198.19.0.8\n"), "targets.txt")
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 2 || ts[0].ServerName != "dns.test" || len(ts[1].Endpoints) != len(measure.Protocols) {
		t.Fatalf("%+v", ts)
	}
	for _, bad := range []string{"nope", "198.19.0.1 doq=x", "198.19.0.1 doq=853/h2", "198.19.0.1 smtp=25", "198.19.0.1 doq"} {
		if _, err := campaign.ParseTargets(strings.NewReader(bad), "targets.txt"); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// stepClock is a campaign.Clock that moves only when told: WaitUntil jumps to the slot
// at once, Advance adds what an exchange costs. A spread round's schedule then depends
// on the order of events, not on how fast the machine runs them.
type stepClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) WaitUntil(ctx context.Context, t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.After(c.now) {
		c.now = t
	}
	return ctx.Err()
}

func (c *stepClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestSpreadRoundReportsLateStarts: a spread round whose resolvers take longer than their
// slots with one worker falls behind its schedule, and says so (Summary.LateStarts,
// MaxStartLagSecs); with a worker per resolver, the same round keeps its schedule. The
// schedule runs on a stepClock: each exchange costs exchangeCost of it (OnResult), and
// nothing else moves it, so neither the machine's load nor the database's set-up time
// changes the counts.
func TestSpreadRoundReportsLateStarts(t *testing.T) {
	s := storetest.OpenVantage(t, "test")
	ctx := context.Background()
	hosts := []string{"127.0.0.20", "127.0.0.21", "127.0.0.22", "127.0.0.23", "127.0.0.24"}
	var targets []campaign.Target
	for _, tg := range targetsFor(t, hosts, measuretest.Config{}) {
		tg.Endpoints = tg.Endpoints[:1] // DoUDP only
		targets = append(targets, tg)
	}
	// Each resolver: DoUDP warm-up + measured, each costing 40 ms of the clock: 80 ms.
	const exchangeCost = 40 * time.Millisecond
	run := func(label string, conc int, spread time.Duration, costs bool) *campaign.Summary {
		clock := &stepClock{now: hour}
		cfg := campaign.Config{VantageID: "test", Label: label, Hour: hour,
			Timeout: 2 * time.Second, Concurrency: conc, RTTSamples: 1, RTTTimeout: 300 * time.Millisecond,
			Protocols: []measure.Protocol{measure.DoUDP}, Spread: spread, Clock: clock}
		if costs {
			cfg.OnResult = func(campaign.Target, campaign.Endpoint, string, *measure.Result) { clock.Advance(exchangeCost) }
		}
		sum, err := campaign.Run(ctx, s, cfg, targets, logger())
		if err != nil {
			t.Fatal(err)
		}
		return sum
	}
	// One worker, 20 ms slots, 80 ms per resolver: the worker takes resolver i (i >= 1)
	// once resolvers 0..i-1 are done, at >= i x 80 ms; its slot ends by (i+1) x 20 ms,
	// so it starts more than a slot late, the last one >= 4 x 80 - 5 x 20 = 220 ms.
	// Resolver 0 is taken in its slot.
	step := 20 * time.Millisecond
	behind := run("behind", 1, time.Duration(len(hosts))*step, true)
	if want := int64(len(hosts) - 1); behind.LateStarts != want || behind.MaxStartLagSecs < 0.220 {
		t.Errorf("one worker: %d late starts, max lag %.3f s; want %d and >= 0.220 s", behind.LateStarts,
			behind.MaxStartLagSecs, want)
	}
	// A worker per resolver, 300 ms slots: every resolver finds a free worker in its slot
	// (the clock stands still between a slot's wait and the worker taking the resolver).
	step = 300 * time.Millisecond
	onTime := run("on-time", len(hosts), time.Duration(len(hosts))*step, false)
	if onTime.LateStarts != 0 {
		t.Errorf("a worker per resolver: %d late starts (max lag %.3f s), want 0", onTime.LateStarts, onTime.MaxStartLagSecs)
	}
	if behind.Measured != len(hosts) || onTime.Measured != len(hosts) {
		t.Errorf("measured %d and %d of %d", behind.Measured, onTime.Measured, len(hosts))
	}
	var js string
	if err := s.Pool.QueryRow(ctx, `SELECT summary::text FROM campaigns WHERE campaign_id = $1`, behind.CampaignID).Scan(&js); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(js, `"late_starts"`) {
		t.Errorf("stored summary lacks late_starts: %s", js)
	}
}

// TestQlogRowsCarryTheODCID: every stored qlog has the original destination connection
// ID of its dial (the first trace's, which quic-go also writes as the trace's group_id).
func TestQlogRowsCarryTheODCID(t *testing.T) {
	s := storetest.OpenVantage(t, "test")
	ctx := context.Background()
	targets := targetsFor(t, []string{"127.0.0.14"}, measuretest.Config{})
	cfg := campaign.Config{VantageID: "test", Label: "odcid", Hour: hour, Timeout: 2 * time.Second, Concurrency: 1,
		Protocols: []measure.Protocol{measure.DoQ, measure.DoH3}, RTTSamples: 1, RTTTimeout: 300 * time.Millisecond}
	sum, err := campaign.Run(ctx, s, cfg, targets, logger())
	if err != nil {
		t.Fatal(err)
	}
	rows, err := s.Pool.Query(ctx, `SELECT odcid, data FROM qlogs WHERE campaign_id = $1`, sum.CampaignID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var odcid, data []byte
		if err := rows.Scan(&odcid, &data); err != nil {
			t.Fatal(err)
		}
		n++
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		raw, err := io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		var hdr struct {
			Trace struct {
				CommonFields struct {
					GroupID string `json:"group_id"`
				} `json:"common_fields"`
			} `json:"trace"`
		}
		first := bytes.Split(raw, []byte{0x1e})[1]
		if err := json.Unmarshal(first, &hdr); err != nil {
			t.Fatalf("qlog header %q: %v", first, err)
		}
		if len(odcid) < 8 || hex.EncodeToString(odcid) != hdr.Trace.CommonFields.GroupID {
			t.Errorf("qlogs.odcid %x, the qlog's group_id %s", odcid, hdr.Trace.CommonFields.GroupID)
		}
	}
	if n < 4 { // DoQ and DoH3, warm-up and measured
		t.Errorf("%d qlog rows, want 4", n)
	}
}
