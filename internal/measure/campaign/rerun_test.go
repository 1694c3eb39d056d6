package campaign_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/cli/clitest"
	"github.com/doqscan/doqscan/internal/measure/campaign"
	"github.com/doqscan/doqscan/internal/measure/measuretest"
	"github.com/doqscan/doqscan/internal/store"
	"github.com/doqscan/doqscan/internal/store/storetest"
)

// roundOf runs one round (vantage vp1 at hour, label rerun) of the resolvers of file
// with protocols and the other options given, through Rounds as the command does; it
// returns the log and what was printed.
func roundOf(t *testing.T, s *store.Store, file, protocols string, rerun bool) (string, string) {
	t.Helper()
	o := campaign.DefaultOptions()
	o.TargetsFile, o.Protocols, o.Variants, o.Rerun, o.Label = file, protocols, "GET", rerun, "rerun"
	o.VantageID, o.Hour, o.RTTSamples, o.Concurrency, o.Timeout = "vp1", hour, 2, 4, 2*time.Second
	var logs, out bytes.Buffer
	o.Out = &out
	if err := o.Parse(); err != nil {
		t.Fatal(err)
	}
	if err := campaign.Rounds(context.Background(), s, o, slog.New(slog.NewTextHandler(&logs, nil))); err != nil {
		t.Fatalf("round: %v\n%s", err, logs.String())
	}
	return logs.String(), out.String()
}

// TestRerunMeasuresWhatIsMissing: a round run again with more protocols measures the new
// protocols of each resolver, not the ones it holds (no second exchange, no second RTT
// probe, no row twice); run again with nothing new it measures nothing and says so and
// how to measure again; --rerun measures everything again as a new attempt under a label
// of its own, the first attempt's rows untouched.
func TestRerunMeasuresWhatIsMissing(t *testing.T) {
	s := storetest.OpenVantage(t, "vp1")
	srv := measuretest.Start(t, measuretest.Config{Host: "127.0.0.41"})
	file := filepath.Join(t.TempDir(), "targets.txt")
	line := fmt.Sprintf("%s doudp=%d dotcp=%d\n", srv.UDP.Addr(), srv.UDP.Port(), srv.TCP.Port())
	if err := os.WriteFile(file, []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	rows := func(label string) []int {
		return scanInts(t, s,
			`SELECT count(*) FROM measurements m JOIN campaigns c USING (campaign_id) WHERE c.label = '`+label+`' AND m.protocol = 'doudp'`,
			`SELECT count(*) FROM measurements m JOIN campaigns c USING (campaign_id) WHERE c.label = '`+label+`' AND m.protocol = 'dotcp'`,
			`SELECT count(*) FROM rtt_samples r JOIN campaigns c USING (campaign_id) WHERE c.label = '`+label+`' AND r.transport = 'udp'`,
			`SELECT count(*) FROM rtt_samples r JOIN campaigns c USING (campaign_id) WHERE c.label = '`+label+`' AND r.transport = 'tcp'`)
	}

	roundOf(t, s, file, "doudp", false)
	first, q1 := rows("rerun"), srv.Queries()
	if first[0] == 0 || first[1] != 0 || first[2] != 2 {
		t.Fatalf("first round (doudp): rows doudp/dotcp/udp rtt/tcp rtt %v", first)
	}

	logs, _ := roundOf(t, s, file, "doudp,dotcp", false)
	second, q2 := rows("rerun"), srv.Queries()
	if second[0] != first[0] || second[1] == 0 || second[2] != first[2] || second[3] != 2 {
		t.Errorf("round again with dotcp added: rows doudp/dotcp/udp rtt/tcp rtt %v, want doudp and its RTT as before (%v), dotcp and its RTT new", second, first)
	}
	// DoTCP: a warm-up and a measured query; DoUDP not asked again.
	if q2-q1 != 2 {
		t.Errorf("round again with dotcp added: %d queries to the server, want 2 (DoTCP's warm-up and measured query only)", q2-q1)
	}
	if !strings.Contains(logs, "partly_stored=1") {
		t.Errorf("log does not say the resolver was held in part:\n%s", logs)
	}

	logs, out := roundOf(t, s, file, "doudp,dotcp", false)
	if got := rows("rerun"); fmt.Sprint(got) != fmt.Sprint(second) || srv.Queries() != q2 {
		t.Errorf("round again, nothing new: rows %v (were %v), %d queries (were %d); want nothing measured", got, second, srv.Queries(), q2)
	}
	if !strings.Contains(logs, "level=WARN") || !strings.Contains(logs, "--rerun") || !strings.Contains(out, "--rerun") {
		t.Errorf("a round that measures nothing must warn and say how to measure again:\nlog:\n%s\nstdout:\n%s", logs, out)
	}

	roundOf(t, s, file, "doudp,dotcp", true)
	if got, again := rows("rerun"), rows("rerun-r2"); fmt.Sprint(got) != fmt.Sprint(second) || fmt.Sprint(again) != fmt.Sprint(second) {
		t.Errorf("--rerun: first attempt %v (was %v), new attempt rerun-r2 %v; want the first untouched and the second whole", got, second, again)
	}
	roundOf(t, s, file, "doudp", true)
	if got := rows("rerun-r3"); got[0] != first[0] {
		t.Errorf("second --rerun: attempt rerun-r3 has %v", got)
	}
}

// TestNoStoreResolversOnStdout: measure --no-store runs with no database at all (the URL
// names no server) and prints every resolver: --json one JSON object per resolver with
// its measured exchanges and RTTs, nothing else on stdout; without --json a table with a
// row per measured exchange, then the summary.
func TestNoStoreResolversOnStdout(t *testing.T) {
	clitest.NoDatabase(t)
	a := measuretest.Start(t, measuretest.Config{Host: "127.0.0.42"})
	b := measuretest.Start(t, measuretest.Config{Host: "127.0.0.43"})
	dir := t.TempDir()
	file := filepath.Join(dir, "targets.txt")
	content := fmt.Sprintf("%s doudp=%d dotcp=%d\n%s doudp=%d dotcp=%d\n%s doudp=%d dotcp=%d  # again\n", a.UDP.Addr(), a.UDP.Port(), a.TCP.Port(),
		b.UDP.Addr(), b.UDP.Port(), b.TCP.Port(), a.UDP.Addr(), a.UDP.Port(), a.TCP.Port())
	if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(extra ...string) (int, string, string) {
		o := campaign.DefaultOptions()
		var out, logs bytes.Buffer
		o.Out = &out
		o.TargetsFile, o.Protocols, o.BlocklistDir, o.Output.NoStore = file, "doudp,dotcp", dir, true
		o.RTTSamples, o.Timeout = 1, 2*time.Second
		o.Output.JSON = len(extra) > 0
		o.Vantage.ID = "local"
		err := campaign.Command(context.Background(), slog.New(slog.NewTextHandler(&logs, nil)), o, nil)
		return cli.ExitCode(err), out.String(), logs.String()
	}
	code, out, logs := run("--json")
	if code != cli.ExitOK {
		t.Fatalf("exit %d\n%s", code, logs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want one per resolver (2):\n%s", len(lines), out)
	}
	for _, l := range lines {
		var r campaign.Record
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("not a JSON object: %q: %v", l, err)
		}
		protos := map[string]bool{}
		for _, e := range r.Measurements {
			protos[e.Protocol] = protos[e.Protocol] || (e.Status == "ok" && e.ResolveMS != nil)
		}
		if (r.IP != "127.0.0.42" && r.IP != "127.0.0.43") || r.CampaignID != 0 || !protos["doudp"] || !protos["dotcp"] || len(r.RTT) == 0 {
			t.Errorf("record %s: want an ok DoUDP and DoTCP exchange with resolve times and RTT samples", l)
		}
	}
	if !strings.Contains(logs, "status.doudp.ok=2") {
		t.Errorf("summary log lacks the statuses as fields:\n%s", logs)
	}
	code, out, _ = run()
	if code != cli.ExitOK || !strings.HasPrefix(out, "RESOLVER") || strings.Count(out, "127.0.0.4") < 4 || !strings.Contains(out, "round without a database") {
		t.Errorf("table: exit %d\n%s", code, out)
	}
}
