// End-to-end tests of a scan that does not end cleanly, on the simulated internet: the
// zprobe process killed mid-scan, and PostgreSQL stopped mid-scan.

package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/home"
	"github.com/doqscan/doqscan/internal/probe"
	"github.com/doqscan/doqscan/internal/probe/probetest"
	"github.com/doqscan/doqscan/internal/store"
	"github.com/doqscan/doqscan/internal/store/storetest"
)

// waitRows polls the database until the scan has at least one reply on port (the scan
// is then demonstrably mid-port), or fails after a minute.
func waitRows(t *testing.T, s *store.Store, label string, port int) int64 {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(time.Minute)
	for {
		var n int64
		err := s.Pool.QueryRow(context.Background(), `SELECT count(*) FROM scan_replies r JOIN scans s USING (scan_id)
			WHERE s.label = $1 AND r.port = $2`, label, port).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return n
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("no reply on port %d reached the database within a minute", port)
		}
	}
}

// statuses returns the scan's status and its runs' statuses by port.
func statuses(t *testing.T, s *store.Store, week, vantage, label string) (string, map[int32]string) {
	t.Helper()
	ctx := context.Background()
	var id int64
	var status string
	if err := s.Pool.QueryRow(ctx, `SELECT scan_id, status FROM scans WHERE iso_week = $1 AND vantage_id = $2 AND label = $3`,
		week, vantage, label).Scan(&id, &status); err != nil {
		t.Fatalf("scan %s/%s/%s: %v", week, vantage, label, err)
	}
	return status, storetest.QueryMap[int32, string](t, s, "SELECT port, status FROM scan_runs WHERE scan_id = $1", id)
}

// replySet is the stored replies of a scan label as "port address kind" lines, sorted.
func replySet(t *testing.T, s *store.Store, label string) []string {
	t.Helper()
	rows, err := s.Pool.Query(context.Background(), `SELECT r.port, host(r.address), r.reply_kind FROM scan_replies r
		JOIN scans s USING (scan_id) WHERE s.label = $1`, label)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var port int
		var addr, kind string
		if err := rows.Scan(&port, &addr, &kind); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%d %s %s", port, addr, kind))
	}
	slices.Sort(out)
	return out
}

func compareSets(t *testing.T, what string, want, got []string) {
	t.Helper()
	var miss, extra []string
	for _, w := range want {
		if _, ok := slices.BinarySearch(got, w); !ok {
			miss = append(miss, w)
		}
	}
	for _, g := range got {
		if _, ok := slices.BinarySearch(want, g); !ok {
			extra = append(extra, g)
		}
	}
	if len(miss)+len(extra) > 0 {
		t.Errorf("%s: %d rows, want %d; %d missing %v; %d extra %v", what, len(got), len(want),
			len(miss), miss[:min(len(miss), 10)], len(extra), extra[:min(len(extra), 10)])
	} else {
		t.Logf("%s: %d rows, equal to the uninterrupted scan's", what, len(got))
	}
}

// helpRate is the default rate `zprobe scan --help` states (packets/s).
const helpRate = 10000

// TestScanKilled kills zprobe (and its zmap) with SIGKILL while port 53 is being
// scanned, after port 784 finished. Then: the raw file of 53 is on disk and holds every
// reply already in the database; `zprobe ingest` of it says what it found and settles
// the port as 'interrupted'; the next run of the same scan does not send 784 again,
// scans 53, and ends with every status 'ok'. zmap got an explicit --rate=10000 without
// --rate on the command line (its metadata shows the rate it used).
func TestScanKilled(t *testing.T) {
	e := requireTestbed(t)
	v := e.v
	bin := filepath.Join(commands.Dir(t), "zprobe")
	s, url := storetest.OpenURL(t)
	out := keepOnFailure(t)
	args := []string{"scan", "--vantage", "killed", "--week", "2026-W47", "--label", "killed", "--testbed", testbedPrefix.String(),
		"--quic-ports", "784", "--dns-ports", "53", "--cooldown", "3", "--out", out, "--blocklist-dir", filepath.Join(home.Dir(), "blocklist"),
		"--interface", v.Iface, "--gateway-mac", v.GatewayMAC, "--source-ip", v.Addr, "--seed", "7"}
	run := func(args ...string) *exec.Cmd {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "DATABASE_URL="+url)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		return cmd
	}
	var stderr bytes.Buffer
	first := run(args...)
	first.Stderr = &stderr
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	n := waitRows(t, s, "killed", 53)
	syscall.Kill(-first.Process.Pid, syscall.SIGKILL)
	first.Wait()
	t.Logf("killed zprobe and zmap with %d replies of port 53 in the database", n)
	dir := probe.RunDir(out, "2026-W47", "killed", "killed", 0)
	raw53 := filepath.Join(dir, "53.csv")
	onDisk := probetest.RawAddrs(t, raw53)
	if len(onDisk) == 0 {
		t.Fatalf("the raw file %s is empty after SIGKILL, with %d replies in the database\n%s", raw53, n, stderr.String())
	}
	rows, err := store.SelectTable[store.ScanReply](context.Background(), s, store.TableScanReplies, "port, address")
	if err != nil {
		t.Fatal(err)
	}
	var in53 int
	for _, r := range rows {
		if r.Port == 53 {
			in53++
			if !onDisk[r.Address] {
				t.Errorf("%s:53 is in the database but not in the raw file", r.Address)
			}
		}
	}
	t.Logf("after SIGKILL: %d replies of port 53 in the database, %d lines in its raw file", in53, len(onDisk))
	if st, runs := statuses(t, s, "2026-W47", "killed", "killed"); st != "running" || runs[784] != "ok" || runs[53] != "running" {
		t.Fatalf("after SIGKILL: scan %s, runs %v; want running, 784 ok, 53 running", st, runs)
	}

	// zprobe ingest of the cut raw file: what it found, and the port settled.
	var ingestOut bytes.Buffer
	ing := run("ingest", raw53)
	ing.Stdout = &ingestOut
	if err := ing.Run(); err != nil {
		t.Fatalf("zprobe ingest %s: %v\n%s", raw53, err, ingestOut.String())
	}
	t.Logf("zprobe ingest: %s", strings.TrimSpace(ingestOut.String()))
	if !strings.Contains(ingestOut.String(), "zmap did not finish this port") || !strings.Contains(ingestOut.String(), "port interrupted") {
		t.Errorf("ingest output does not say the port was cut: %q", ingestOut.String())
	}
	if st, runs := statuses(t, s, "2026-W47", "killed", "killed"); st != "interrupted" || runs[53] != "interrupted" || runs[784] != "ok" {
		t.Errorf("after ingest: scan %s, runs %v; want interrupted, 53 interrupted, 784 ok", st, runs)
	}
	var stored int
	s.Pool.QueryRow(context.Background(), "SELECT count(*) FROM scan_replies WHERE port = 53").Scan(&stored)
	// The last line may have been cut by the kill (RawAddrs skips it only if it does not parse).
	if stored < len(onDisk)-1 {
		t.Errorf("after ingest: %d replies of port 53 stored, the raw file has %d lines", stored, len(onDisk))
	}

	// The next run: 784 is not sent again, 53 is (into a new raw file: the cut one
	// stays as it was), and everything ends 'ok'.
	meta784, err := os.ReadFile(filepath.Join(dir, "784.meta.json"))
	if err != nil {
		t.Fatal(err)
	}
	cut53, err := os.ReadFile(raw53)
	if err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	again := run(append(args, "--json")...)
	again.Stdout, again.Stderr = &stdout, &stderr
	if err := again.Run(); err != nil {
		t.Fatalf("re-run: %v\n%s", err, stderr.String())
	}
	if st, runs := statuses(t, s, "2026-W47", "killed", "killed"); st != "ok" || runs[784] != "ok" || runs[53] != "ok" {
		t.Errorf("after the re-run: scan %s, runs %v; want everything ok", st, runs)
	}
	if m, _ := os.ReadFile(filepath.Join(dir, "784.meta.json")); !bytes.Equal(m, meta784) {
		t.Error("the re-run sent port 784 again (its zmap metadata changed)")
	}
	var summary string
	if err := s.Pool.QueryRow(context.Background(), "SELECT summary::text FROM scans WHERE label = 'killed'").Scan(&summary); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(summary, `"resumed": true`) {
		t.Errorf("the summary does not mark 784 as done by the earlier run:\n%s", summary)
	}
	// --json: one JSON object per reply the scan holds, nothing else on stdout.
	var replies int
	s.Pool.QueryRow(context.Background(), "SELECT count(*) FROM scan_replies").Scan(&replies)
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	for _, l := range lines {
		var r probe.ReplyRecord
		if err := json.Unmarshal([]byte(l), &r); err != nil || r.IP == "" || r.ReplyKind == "" {
			t.Fatalf("stdout line %q is no reply (%v)", l, err)
		}
	}
	if len(lines) != replies {
		t.Errorf("--json printed %d lines, the scan holds %d replies", len(lines), replies)
	}
	// The rate zmap was given and used, without --rate on the command line.
	var zargs []string
	if err := s.Pool.QueryRow(context.Background(), "SELECT zmap_args FROM scan_runs WHERE port = 53").Scan(&zargs); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(zargs, "--rate=10000") {
		t.Errorf("zmap args %v lack --rate=10000", zargs)
	}
	if b, err := os.ReadFile(raw53); err != nil || !bytes.Equal(b, cut53) {
		t.Errorf("the re-run changed the raw file of the killed run %s (%d bytes before, %d after, %v)", raw53, len(cut53), len(b), err)
	}
	if n := len(probetest.RawAddrs(t, filepath.Join(dir, "53.attempt2.csv"))); n == 0 {
		t.Errorf("the re-run of port 53 wrote no 53.attempt2.csv")
	}
	m, err := probe.ReadZmapMeta(filepath.Join(dir, "53.attempt2.meta.json"))
	if err != nil || m.Rate != helpRate {
		t.Errorf("zmap's metadata: %+v (%v), want rate %d", m, err, helpRate)
	}
}

// TestScanDBOutage stops PostgreSQL while a scan runs (784 then 53) and compares the
// stored replies with those of the same scan run without an outage: 0 lost, 0
// duplicated. First the database is away for 20 s and the scan waits for it (--db-wait
// 2 min) and ends 'ok'; then it stays away past a 5 s --db-wait: the scan stops with
// store.ErrUnavailable (exit 3), and the next run, with the database back, recovers
// port 784 from its raw file without sending it again and scans the rest.
func TestScanDBOutage(t *testing.T) {
	e := requireTestbed(t)
	v := e.v
	ctx := context.Background()
	seed := uint64(11)
	out := keepOnFailure(t)
	cfg := func(s *store.Store, label string, wait time.Duration) probe.ScanConfig {
		return probe.ScanConfig{Store: s, VantageID: "outage", Week: "2026-W47", Label: label, Seed: &seed,
			QUICPorts: []uint16{784}, DNSPorts: []uint16{53}, Testbed: &testbedPrefix, BlocklistDir: filepath.Join(home.Dir(), "blocklist"),
			OutDir: out, DBWait: wait, Zmap: probe.ZmapRun{Rate: e2eRate(), Interface: v.Iface, GatewayMAC: v.GatewayMAC,
				SourceIP: v.Addr, Cooldown: e2eCooldown, ProbesPerHost: e2eProbes()}}
	}
	ref := storetest.Open(t)
	if _, err := probe.Scan(ctx, cfg(ref, "ref", time.Minute)); err != nil {
		t.Fatal(err)
	}
	want := replySet(t, ref, "ref")

	cluster, url := storetest.NewCluster(t)
	s, err := store.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	// 1. Away for 20 s, back before --db-wait ends.
	type result struct {
		sum *probe.Summary
		err error
	}
	done := make(chan result, 1)
	// scanUntilStopped starts the scan labelled label and stops PostgreSQL once port 784
	// has stored rows.
	scanUntilStopped := func(label string, wait time.Duration) {
		t.Helper()
		go func() {
			sum, err := probe.Scan(ctx, cfg(s, label, wait))
			done <- result{sum, err}
		}()
		waitRows(t, s, label, 784)
		if err := cluster.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	scanUntilStopped("short", 2*time.Minute)
	stopped := time.Now()
	t.Log("PostgreSQL stopped during port 784")
	time.Sleep(20 * time.Second) // the outage itself, not a synchronisation
	if _, _, err := cluster.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("PostgreSQL back after %s", time.Since(stopped).Round(time.Second))
	r := <-done
	if r.err != nil || r.sum.Status != "ok" {
		t.Fatalf("scan with a 20 s outage: status %v, err %v", r.sum, r.err)
	}
	compareSets(t, "20 s outage", want, replySet(t, s, "short"))
	if st, runs := statuses(t, s, "2026-W47", "outage", "short"); st != "ok" || runs[784] != "ok" || runs[53] != "ok" {
		t.Errorf("20 s outage: scan %s, runs %v; want everything ok", st, runs)
	}

	// 2. Away for longer than --db-wait: exit 3, then the next run recovers.
	scanUntilStopped("long", 5*time.Second)
	r = <-done
	if !errors.Is(r.err, store.ErrUnavailable) || r.sum == nil || r.sum.Status != "interrupted" {
		t.Fatalf("scan with the database away past --db-wait: %v, err %v; want interrupted and store.ErrUnavailable", r.sum, r.err)
	}
	t.Logf("database away past --db-wait: %v", r.err)
	if _, _, err := cluster.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	meta784, err := os.ReadFile(filepath.Join(probe.RunDir(out, "2026-W47", "outage", "long", 0), "784.meta.json"))
	if err != nil {
		t.Fatalf("zmap finished port 784 during the outage, but its metadata is not in place: %v", err)
	}
	sum, err := probe.Scan(ctx, cfg(s, "long", time.Minute))
	if err != nil || sum.Status != "ok" {
		t.Fatalf("re-run: %v %v", sum, err)
	}
	if len(sum.Ports) != 2 || !sum.Ports[0].Resumed || sum.Ports[0].Status != "ok" || sum.Ports[1].Resumed {
		t.Errorf("re-run ports %+v: want 784 recovered from its raw file (not sent again) and 53 scanned", sum.Ports)
	}
	if m, _ := os.ReadFile(filepath.Join(probe.RunDir(out, "2026-W47", "outage", "long", 0), "784.meta.json")); !bytes.Equal(m, meta784) {
		t.Error("the re-run sent port 784 again")
	}
	compareSets(t, "outage past --db-wait, then a re-run", want, replySet(t, s, "long"))
	if st, runs := statuses(t, s, "2026-W47", "outage", "long"); st != "ok" || runs[784] != "ok" || runs[53] != "ok" {
		t.Errorf("after the re-run: scan %s, runs %v; want everything ok", st, runs)
	}
}
