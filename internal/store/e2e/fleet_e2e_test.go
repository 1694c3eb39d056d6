// Package e2e holds the store's end-to-end tests on the simulated internet: a fleet of
// vantage points writing one central database over the delay line. As root they run in
// `./dev test`; without root, ip or /dev/net/tun they skip with the reason.
package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/runkey"
	"github.com/doqscan/doqscan/internal/store"
	"github.com/doqscan/doqscan/internal/store/fleet"
	"github.com/doqscan/doqscan/internal/testbed"
	"github.com/doqscan/doqscan/internal/testbed/netns"
	"github.com/doqscan/doqscan/internal/testsupport"
)

// fleetTargets are the resolvers the fleet scans, verifies and measures: 16 well-behaved
// DoQ resolvers on 5 ms paths (testbed/population.txt), a small subset so the test stays
// short.
const fleetTargets = "198.19.32.32/28"

// fleetVantages is how many vantage points write the central database.
const fleetVantages = 3

// cutFor is how long the path between vantage point 1 and the database is cut during its
// round: DOQSCAN_FLEET_CUT (a duration), default 15 s. The figures in docs/fleet.md were
// taken with 10m.
func cutFor(t *testing.T) time.Duration {
	if v := os.Getenv("DOQSCAN_FLEET_CUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("DOQSCAN_FLEET_CUT=%q: want a positive duration", v)
		}
		return d
	}
	return 15 * time.Second
}

// fleetBed brings up a testbed with fleetVantages vantage namespaces and the central
// database behind an 80 ms path with 1 % loss each way, and returns it with each vantage
// point's DATABASE_URL (its role and client certificate) and the admin's store.
func fleetBed(t testing.TB, servers bool) (*testbed.Testbed, []string, *store.Store) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIP: the fleet test needs root (network namespaces)")
	}
	tb := testbed.ForTest(t, testbed.Options{Vantages: fleetVantages, DB: true, Servers: servers, NoPeers: true,
		Population: map[bool]string{true: "", false: testbed.NoPopulation}[servers]})
	ctx := context.Background()
	if _, err := testbed.SetPath(ctx, tb.Opts.Home, tb.Name, netns.DBAddr.String(), "rtt=80ms", "loss=0.01"); err != nil {
		t.Fatalf("path to the database: %v", err)
	}
	adminURL, err := tb.DBAdminURL()
	if err != nil {
		t.Fatal(err)
	}
	admin, err := store.Open(ctx, adminURL)
	if err != nil {
		t.Fatalf("admin: %v", err)
	}
	t.Cleanup(admin.Close)
	urls := make([]string, fleetVantages)
	for i := range urls {
		id := fmt.Sprintf("fleet%d", i)
		role, err := admin.AddVantageRole(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		c, err := fleet.IssueClient(tb.FleetDir(), id, role)
		if err != nil {
			t.Fatal(err)
		}
		urls[i] = c.URL(netns.DBAddr.String(), 5432, "doqscan")
	}
	return tb, urls, admin
}

// fleetBedB is fleetBed for a benchmark: no servers, no population.
func fleetBedB(b *testing.B) (*testbed.Testbed, []string, *store.Store) { return fleetBed(b, false) }

// TestFleetWritesOneDatabase: three vantage points scan one shard each, verify their own
// scans and measure their own runs into one central database over an 80 ms path with
// 1 % loss; the path of vantage point 1 is cut during its round (cutFor) and restored.
// Every vantage point's round stores every row it measured once (the stored count is the
// round's own count, no natural key twice), the shards partition the targets, each
// stage took its own vantage point's input, and a vantage role over TLS is refused
// another vantage point's rows and the opt-out requesters' emails.
func TestFleetWritesOneDatabase(t *testing.T) {
	tb, urls, admin := fleetBed(t, true)
	if tb.Population == nil {
		t.Skip("SKIP: no testbed/population.txt")
	}
	if _, err := os.Stat(filepath.Join(tb.Opts.Home, "bin", "simserver")); err != nil {
		t.Skipf("SKIP: bin/simserver is not built (./dev build): %v", err)
	}
	bins := testsupport.Commands(t, "zprobe", "verify", "measure")
	ctx := context.Background()
	blocklistDir := filepath.Join(testsupport.Root(), "blocklist")
	week := runkey.Week(time.Now())
	hour := time.Now().UTC().Truncate(time.Hour)
	cut := cutFor(t)
	if _, err := admin.Pool.Exec(ctx, `INSERT INTO optout_requests (prefix, email) VALUES ('198.19.250.0/24', 'noc@example.net')`); err != nil {
		t.Fatal(err)
	}

	homes := make([]string, fleetVantages) // each vantage point's var/spill, apart from the tree's
	for i := range homes {
		homes[i] = t.TempDir()
	}
	run := func(i int, stderr io.Writer, argv ...string) error {
		cmd := tb.Command(ctx, i, append([]string{filepath.Join(bins, argv[0])}, argv[1:]...)...)
		cmd.Env = append(os.Environ(), "DATABASE_URL="+urls[i], netns.EnvInstance+"="+tb.Name, "DOQSCAN_HOME="+homes[i])
		cmd.Stdout, cmd.Stderr = io.Discard, stderr
		return cmd.Run()
	}
	var wg sync.WaitGroup
	errs := make([]error, fleetVantages)
	logs := make([]*strings.Builder, fleetVantages)
	var cutSeen, waited time.Duration
	for i := 0; i < fleetVantages; i++ {
		logs[i] = &strings.Builder{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := fmt.Sprintf("fleet%d", i)
			log := logs[i]
			steps := [][]string{
				{"zprobe", "scan", "--vantage", v, "--label", "fleet", "--week", week, "--testbed", "198.19.0.0/16",
					"--targets", fleetTargets, "--shards", strconv.Itoa(fleetVantages), "--shard", strconv.Itoa(i),
					"--seed", "7", "--rate", "2000", "--cooldown", "2", "--blocklist-dir", blocklistDir, "--out", t.TempDir()},
				{"verify", "--vantage", v, "--label", "fleet", "--scan-label", "fleet", "--blocklist-dir", blocklistDir},
			}
			for _, s := range steps {
				if err := run(i, log, s...); err != nil {
					errs[i] = fmt.Errorf("%s: %w", s[0], err)
					return
				}
			}
			measure := []string{"measure", "--vantage", v, "--label", "fleet", "--run-label", "fleet",
				"--hour", hour.Format("2006-01-02T15"), "--blocklist-dir", blocklistDir, "--log-format", "json"}
			if i != 1 {
				if err := run(i, log, measure...); err != nil {
					errs[i] = fmt.Errorf("measure: %w", err)
				}
				return
			}
			// Vantage point 1: cut its path to the database once its round has started,
			// until its writes have waited for the database and the cut has lasted `cut`.
			pr, pw := io.Pipe()
			done := make(chan error, 1)
			go func() { done <- run(i, io.MultiWriter(log, pw), measure...); pw.Close() }()
			var r netns.Runner
			var cutAt, waitedAt time.Time
			waitedCh, restored := make(chan struct{}), make(chan struct{})
			sc := bufio.NewScanner(pr)
			for sc.Scan() {
				line := sc.Text()
				switch {
				case cutAt.IsZero() && strings.Contains(line, `"msg":"campaign round"`):
					if err := r.CutDB(ctx, tb.Instance, 1, true); err != nil {
						errs[i] = err
					}
					cutAt = time.Now()
					go func() {
						// The cut lasts `cut`, and at least until a write has met it.
						defer close(restored)
						<-time.After(cut)
						<-waitedCh
						_ = r.CutDB(ctx, tb.Instance, 1, false)
					}()
				case !cutAt.IsZero() && waitedAt.IsZero() && strings.Contains(line, "waiting for database"):
					waitedAt = time.Now()
					close(waitedCh)
				}
			}
			io.Copy(io.Discard, pr) // drains the pipe
			err := <-done
			if !cutAt.IsZero() {
				if waitedAt.IsZero() {
					close(waitedCh) // restore the path; the check below fails the test
				}
				<-restored
			}
			if err != nil {
				errs[i] = fmt.Errorf("measure: %w", err)
			}
			if cutAt.IsZero() || waitedAt.IsZero() {
				errs[i] = fmt.Errorf("the round never waited for the database during the cut (cut at %v)", cutAt)
			}
			cutSeen, waited = cut, waitedAt.Sub(cutAt)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("vantage %d: %v\n%s", i, err, logs[i].String())
		}
	}
	t.Logf("vantage point 1 cut off for at least %v; its first write waited %v into the cut", cutSeen, waited.Round(time.Millisecond))

	// Every round stored what it measured, once.
	rows, err := admin.Pool.Query(ctx, `SELECT c.vantage_id, c.status, c.planned, c.summary,
		(SELECT count(*) FROM measurements m WHERE m.campaign_id = c.campaign_id),
		(SELECT count(DISTINCT (m.address, m.protocol, m.port, m.variant, m.mode, m.key_share, m.phase, m.seq))
		   FROM measurements m WHERE m.campaign_id = c.campaign_id),
		(SELECT count(*) FROM rtt_samples r WHERE r.campaign_id = c.campaign_id),
		(SELECT count(*) FROM handshake_analyses a JOIN measurements m USING (measurement_id, round_hour)
		  WHERE m.campaign_id = c.campaign_id),
		(SELECT r.vantage_id FROM verification_runs r WHERE r.run_id = c.run_id)
		FROM campaigns c WHERE c.label = 'fleet' ORDER BY c.vantage_id`)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for rows.Next() {
		var vantage, status, runVantage string
		var planned int
		var summary map[string]any
		var meas, distinct, rtts, analyses int64
		if err := rows.Scan(&vantage, &status, &planned, &summary, &meas, &distinct, &rtts, &analyses, &runVantage); err != nil {
			t.Fatal(err)
		}
		seen++
		num := func(k string) int64 { f, _ := summary[k].(float64); return int64(f) }
		switch {
		case status != "ok" || planned == 0 || num("resolvers_measured") != int64(planned):
			t.Errorf("%s: round %s, %d of %d resolvers measured", vantage, status, num("resolvers_measured"), planned)
		case meas != num("measurement_rows") || rtts != num("rtt_samples") || analyses != num("handshake_analyses"):
			t.Errorf("%s: stored %d measurements, %d RTT samples, %d analyses; the round wrote %d, %d, %d",
				vantage, meas, rtts, analyses, num("measurement_rows"), num("rtt_samples"), num("handshake_analyses"))
		case distinct != meas:
			t.Errorf("%s: %d measurements but %d natural keys", vantage, meas, distinct)
		case runVantage != vantage:
			t.Errorf("%s measured the verification run of %s", vantage, runVantage)
		}
	}
	rows.Close()
	if seen != fleetVantages {
		t.Fatalf("%d rounds stored, want %d", seen, fleetVantages)
	}
	// The shards partition the targets: each answering address under one vantage point.
	var addrs, dup int
	if err := admin.Pool.QueryRow(ctx, `SELECT count(DISTINCT r.address), count(*) - count(DISTINCT (r.address, r.port))
		FROM scan_replies r JOIN scans s USING (scan_id, iso_week) WHERE s.label = 'fleet' AND r.reply_kind = 'quic-vn'`).
		Scan(&addrs, &dup); err != nil {
		t.Fatal(err)
	}
	if addrs != 16 || dup != 0 {
		t.Errorf("QUIC replies from %d addresses (want the 16 targets), %d in two shards", addrs, dup)
	}

	// Over TLS, as vantage point 0: another vantage point's rows and the requesters'
	// emails are refused.
	var other int64
	if err := admin.Pool.QueryRow(ctx, `SELECT campaign_id FROM campaigns WHERE vantage_id = 'fleet2' AND label = 'fleet'`).Scan(&other); err != nil {
		t.Fatal(err)
	}
	for q, want := range map[string]string{
		`SELECT email FROM optout_requests`: "permission denied",
		fmt.Sprintf(`INSERT INTO rtt_samples (campaign_id, address, transport, port, seq, sent_at, status, round_hour)
			VALUES (%d, '198.19.32.33', 'udp', 53, 99, now(), 'ok', '%s')`, other, hour.Format(time.RFC3339)): "missing parent",
		`INSERT INTO campaigns (vantage_id, label, round_hour) VALUES ('fleet2', 'forged', now())`: "row-level security",
	} {
		var out strings.Builder
		cmd := tb.Command(ctx, 0, "psql", urls[0], "-v", "ON_ERROR_STOP=1", "-c", q)
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err == nil || !strings.Contains(out.String(), want) {
			t.Errorf("vantage role: %s: %v %q, want a refusal saying %q", q, err, out.String(), want)
		}
	}
}
