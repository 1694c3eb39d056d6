package verify

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/doqscan/doqscan/internal/geo/geotest"
	"github.com/doqscan/doqscan/internal/listfile"
	"github.com/doqscan/doqscan/internal/store"
	"github.com/doqscan/doqscan/internal/store/storetest"
	"github.com/doqscan/doqscan/internal/testsupport"
)

func count(t *testing.T, s *store.Store, q string, args ...any) int {
	t.Helper()
	var n int
	if err := s.Pool.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// TestRunWritesAndRerunAddsNothing: a run over a scan's QUIC replies writes one result
// per target, the certificates, the resolvers and their locations; running it again
// verifies nothing and adds no row.
func TestRunWritesAndRerunAddsNothing(t *testing.T) {
	s := storetest.Open(t)
	ctx := context.Background()
	pki := newPKI(t)
	var bs []behaviour
	for _, b := range behaviours() {
		switch b.name {
		case "rfc9250", "draft-i00-raw", "refused", "servfail", "h3-only", "sni-listed", "closed-port", "draft-only", "stall":
			bs = append(bs, b)
		}
	}
	var servers []*testServer
	ports := map[int32]bool{}
	for _, b := range bs {
		sv := startServer(t, pki, b)
		servers = append(servers, sv)
		ports[int32(sv.addr.Port())] = true
	}
	var portList []int32
	for p := range ports {
		portList = append(portList, p)
	}

	if err := s.EnsureVantage(ctx, store.Vantage{ID: "scanner"}); err != nil {
		t.Fatal(err)
	}
	scanID, _, err := s.StartScan(ctx, store.Scan{ISOWeek: "2026-W47", VantageID: "scanner", Ports: portList})
	if err != nil {
		t.Fatal(err)
	}
	advertised := []int64{1, 0x6b3343cf, 0x1a2a3a4a}
	var replies []store.ScanReply
	for _, sv := range servers {
		replies = append(replies, store.ScanReply{ScanID: scanID, Port: int32(sv.addr.Port()), Address: sv.addr.Addr(),
			ReplyKind: "quic-vn", QUICVersions: advertised, ReceivedAt: time.Now(), ISOWeek: "2026-W47"})
	}
	// Not QUIC-capable: must not become a target.
	replies = append(replies, store.ScanReply{ScanID: scanID, Port: portList[0], Address: netip.MustParseAddr("127.0.99.1"),
		ReplyKind: "not-quic", ReceivedAt: time.Now(), ISOWeek: "2026-W47"})
	if _, err := store.Insert(ctx, s, store.TableScanReplies, replies); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	build := time.Date(2026, 11, 16, 0, 0, 0, 0, time.UTC)
	cityPath, asnPath := geotest.Write(t, dir, build, []geotest.Entry{
		{Prefix: "127.0.0.0/8", ASN: 64512, ASOrg: "Loopback Networks", Country: "DE", Continent: "EU", City: "Kiel", Lat: 54.3, Lon: 10.1},
	})

	// The verifier takes another vantage point's scan only when told to.
	cfg := RunConfig{Verify: testConfig(pki), Vantage: "verifier", Label: "weekly", Ports: portList,
		Scan: ScanSelection{Vantage: "scanner"}, Concurrency: 4, CityDB: cityPath, ASNDB: asnPath, BatchSize: 3,
		RetryTimeouts: true}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	sum, err := Run(ctx, s, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Week != "2026-W47" || sum.Targets != len(servers) || sum.Verified != len(servers) || sum.Status != "ok" {
		t.Fatalf("summary %+v", sum)
	}
	wantOutcomes := map[Outcome]int{}
	wantResolvers := 0
	for _, b := range bs {
		wantOutcomes[b.want]++
		if strings.HasPrefix(string(b.want), "doq-") {
			wantResolvers++
		}
	}
	for o, n := range wantOutcomes {
		if sum.Outcomes[o] != n {
			t.Errorf("outcome %s: %d, want %d (%v)", o, sum.Outcomes[o], n, sum.Outcomes)
		}
	}
	if got := count(t, s, `SELECT count(*) FROM verification_results WHERE run_id = $1 AND scan_versions = $2`, sum.RunID, advertised); got != len(servers) {
		t.Errorf("%d results with the scan's versions, want %d", got, len(servers))
	}
	// Every DoQ result names its chain; every chain fingerprint is a certificates row.
	if got := count(t, s, `SELECT count(*) FROM verification_results WHERE run_id = $1 AND outcome LIKE 'doq-%'
		AND cardinality(cert_chain) = 2 AND alpn IS NOT NULL AND quic_version IS NOT NULL AND handshake_ns > 0
		AND tls_version = 772 AND cert_valid_for_sni`, sum.RunID); got != wantResolvers {
		t.Errorf("%d complete DoQ rows, want %d", got, wantResolvers)
	}
	if got := count(t, s, `SELECT count(*) FROM (SELECT unnest(cert_chain) h FROM verification_results) c
		WHERE NOT EXISTS (SELECT 1 FROM certificates WHERE sha256 = c.h)`); got != 0 {
		t.Errorf("%d chain entries without a certificates row", got)
	}
	// One intermediate shared by all servers: stored once.
	if got := count(t, s, `SELECT count(*) FROM certificates WHERE is_ca`); got != 1 {
		t.Errorf("%d CA certificates, want 1 (deduplicated)", got)
	}
	if got := count(t, s, `SELECT count(*) FROM verification_results WHERE sni_source = 'list' AND sni = 'resolver.doq.test'`); got != 1 {
		t.Errorf("%d SNI-by-list rows", got)
	}
	// The stalling host timed out twice: once in the first pass, once in the second.
	if got := count(t, s, `SELECT count(*) FROM verification_results WHERE outcome = 'timeout'
		AND attempts = 2 AND detail LIKE 'second pass: %'`); got != wantOutcomes[OutcomeTimeout] {
		t.Errorf("%d timeouts from the second pass, want %d", got, wantOutcomes[OutcomeTimeout])
	}
	if got := count(t, s, `SELECT count(*) FROM resolvers`); got != wantResolvers {
		t.Errorf("%d resolvers, want %d", got, wantResolvers)
	}
	if got := count(t, s, `SELECT count(*) FROM resolver_geo g JOIN datasets c ON c.dataset_id = g.city_dataset
		WHERE g.asn = 64512 AND g.country = 'DE' AND g.continent = 'EU' AND g.city = 'Kiel' AND c.build_time = $1`, build); got != wantResolvers {
		t.Errorf("%d resolver_geo rows, want %d", got, wantResolvers)
	}
	if got := count(t, s, `SELECT count(*) FROM verification_runs WHERE run_id = $1 AND city_dataset IS NOT NULL
		AND asn_dataset IS NOT NULL AND status = 'ok' AND scan_id = $2 AND (summary->'outcomes') IS NOT NULL`, sum.RunID, scanID); got != 1 {
		t.Error("run row incomplete")
	}

	tables := []string{"verification_results", "certificates", "resolvers", "resolver_geo", "datasets", "verification_runs"}
	before := map[string]int{}
	for _, tb := range tables {
		before[tb] = count(t, s, "SELECT count(*) FROM "+tb)
	}
	again, err := Run(ctx, s, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	if again.RunID != sum.RunID || again.Verified != 0 || again.Skipped != len(servers) {
		t.Fatalf("re-run: %+v", again)
	}
	for _, tb := range tables {
		if n := count(t, s, "SELECT count(*) FROM "+tb); n != before[tb] {
			t.Errorf("re-run changed %s: %d -> %d", tb, before[tb], n)
		}
	}
	for o, n := range wantOutcomes {
		if again.Outcomes[o] != n {
			t.Errorf("re-run summary %s: %d, want %d", o, again.Outcomes[o], n)
		}
	}
}

func TestRunFromTargetsFile(t *testing.T) {
	s := storetest.Open(t)
	pki := newPKI(t)
	a := startServer(t, pki, behaviour{name: "rfc9250"})
	b := startServer(t, pki, behaviour{name: "refused", rcode: dns.RcodeRefused})
	p := filepath.Join(t.TempDir(), "targets.txt")
	content := "# test targets\n" + a.addr.String() + "\n\n" + b.addr.String() + "  # refused\n" + a.addr.String() + "\n"
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	sum, err := Run(context.Background(), s, RunConfig{Verify: testConfig(pki), Vantage: "verifier", Label: "adhoc",
		TargetsFile: p, Week: "2026-W47"}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if sum.Targets != 2 || sum.Outcomes[OutcomeVerified] != 1 || sum.Outcomes[OutcomeRefused] != 1 || sum.Source != "file" {
		t.Fatalf("%+v", sum)
	}
	if len(sum.Versions) != 1 || sum.Versions[0].ALPN != "doq" || sum.Versions[0].QUICVersion != "v1" || sum.Versions[0].Count != 2 {
		t.Fatalf("versions %+v", sum.Versions)
	}
	var sb strings.Builder
	sum.WriteText(&sb)
	if !strings.Contains(sb.String(), "doq-refused") {
		t.Fatal(sb.String())
	}
}

func TestNoScanIsAnError(t *testing.T) {
	s := storetest.Open(t)
	pki := newPKI(t)
	_, err := Run(context.Background(), s, RunConfig{Verify: testConfig(pki), Vantage: "verifier"}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil || !strings.Contains(err.Error(), ErrNoScan.Error()) {
		t.Fatalf("got %v", err)
	}
}

func TestReadTargets(t *testing.T) {
	ts, err := ReadTargets(strings.NewReader("198.19.0.1\n198.19.0.2:784\n[2001:db8::1]:8853\n2001:db8::2\n[::ffff:198.19.0.3]:853\n# x\n"), "targets.txt")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"198.19.0.1:853", "198.19.0.2:784", "[2001:db8::1]:8853", "[2001:db8::2]:853", "198.19.0.3:853"}
	if len(ts) != len(want) {
		t.Fatalf("%v", ts)
	}
	for i, w := range want {
		if ts[i].Addr.String() != w {
			t.Errorf("%d: %s, want %s", i, ts[i].Addr, w)
		}
	}
	for _, bad := range []string{"nonsense", "198.19.0.1:0", "198.19.0.1:99999", "fe80::1%eth0"} {
		if _, err := ReadTargets(strings.NewReader(bad), "targets.txt"); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func FuzzReadTargets(f *testing.F) {
	f.Add("198.19.0.1:853\n[::1]:784\n")
	f.Fuzz(func(t *testing.T, s string) {
		ts, err := ReadTargets(strings.NewReader(s), "targets.txt")
		if err != nil {
			return
		}
		for _, tg := range ts {
			if !tg.Addr.IsValid() || tg.Addr.Port() == 0 || tg.Addr.Addr().Is4In6() {
				t.Fatalf("bad target %v from %q", tg.Addr, s)
			}
		}
	})
}

// TestReadTargetsMergesDuplicatesAndNamesBadLines: a target listed on several lines (in
// any spelling of the same address and port) is verified once; a bad or 200 KB line is
// an error naming the file and the line.
func TestReadTargetsMergesDuplicatesAndNamesBadLines(t *testing.T) {
	ts, err := ReadTargets(strings.NewReader("198.19.0.1\n198.19.0.1:853\n[::ffff:198.19.0.1]:853\n198.19.0.1:784\n198.19.0.1\n"), "t.txt")
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 2 || ts[0].Addr.String() != "198.19.0.1:853" || ts[1].Addr.String() != "198.19.0.1:784" {
		t.Fatalf("got %v, want 198.19.0.1:853 and :784 once each", ts)
	}
	for _, c := range []struct{ content, want string }{
		{"198.19.0.1\n\nnonsense\n", "t.txt:3: "},
		{"198.19.0.1\n" + strings.Repeat("1", 200<<10) + "\n", "t.txt:2: line longer than"},
	} {
		_, err := ReadTargets(strings.NewReader(c.content), "t.txt")
		var le *listfile.LineError
		if !errors.As(err, &le) || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("got %v, want a line error starting %q", err, c.want)
		}
	}
}

// TestPanickingTargetRecordedAsError: a check that panics on one target gives that
// target the outcome error, with the stack in the log; the other targets are verified
// and stored, and the run goes on.
func TestPanickingTargetRecordedAsError(t *testing.T) {
	s := storetest.OpenVantage(t, "v")
	ctx := context.Background()
	runID, _, err := s.StartVerificationRun(ctx, store.VerificationRun{ISOWeek: "2026-W47", VantageID: "v", Label: "panic",
		Source: "file", Config: []byte("{}")})
	if err != nil {
		t.Fatal(err)
	}
	var targets []Target
	for i := range 20 {
		targets = append(targets, Target{Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 19, 0, byte(i + 1)}), 853)})
	}
	bad := targets[7].Addr
	// A fake check (no packet is sent): a runtime panic (nil map write) on one target.
	check := func(_ context.Context, tg Target) Result {
		if tg.Addr == bad {
			var m map[string]int
			m["boom"]++ //nolint:staticcheck // SA5000: the nil-map write is the panic under test
		}
		return Result{Target: tg, Outcome: OutcomeQUICNotDoQ, Detail: "fake", SNISource: SNINone, Attempts: 1, At: time.Now()}
	}
	var logs testsupport.SyncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	n, err := verifyAll(ctx, check, &writer{s: s, runID: runID}, nil, targets, RunConfig{Concurrency: 4, BatchSize: 5, Progress: time.Hour}, log)
	if err != nil || n != len(targets) {
		t.Fatalf("verifyAll = %d, %v; want %d results and no error", n, err, len(targets))
	}
	if got := count(t, s, `SELECT count(*) FROM verification_results WHERE run_id = $1 AND outcome = 'error'
		AND address = $2 AND detail LIKE 'panic: %'`, runID, bad.Addr()); got != 1 {
		t.Errorf("%d error rows for the panicking target, want 1", got)
	}
	if got := count(t, s, `SELECT count(*) FROM verification_results WHERE run_id = $1 AND outcome = 'quic-not-doq'`, runID); got != len(targets)-1 {
		t.Errorf("%d other targets stored, want %d", got, len(targets)-1)
	}
	if l := logs.String(); !strings.Contains(l, "panicked") || !strings.Contains(l, "assignment to entry in nil map") || !strings.Contains(l, "goroutine") {
		t.Errorf("log lacks the panic and its stack:\n%s", l)
	}
}

// TestRunUnderAnotherRunsLockDoesNothing: while another process holds the lock of a
// verification run (week, vantage, label), Run of the same run ends with a
// *store.LockedError (exit 75) before it contacts any target or writes a run row; once
// the lock is free, the same Run verifies.
func TestRunUnderAnotherRunsLockDoesNothing(t *testing.T) {
	s, url := storetest.OpenURL(t)
	ctx := context.Background()
	pki := newPKI(t)
	sv := startServer(t, pki, behaviour{name: "rfc9250"})
	p := filepath.Join(t.TempDir(), "targets.txt")
	if err := os.WriteFile(p, []byte(sv.addr.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	other, err := store.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	held, err := other.TryLock(ctx, LockKey("2026-W47", "verifier", "adhoc"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := RunConfig{Verify: testConfig(pki), Vantage: "verifier", Label: "adhoc", TargetsFile: p, Week: "2026-W47"}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	_, err = Run(ctx, s, cfg, log)
	if !errors.Is(err, store.ErrLocked) {
		t.Fatalf("Run under another run's lock: %v, want ErrLocked", err)
	}
	if n := count(t, s, `SELECT count(*) FROM verification_runs`); n != 0 || sv.hits.Load() != 0 {
		t.Errorf("Run under another run's lock wrote %d run rows and contacted the target %d times", n, sv.hits.Load())
	}
	held.Release()
	sum, err := Run(ctx, s, cfg, log)
	if err != nil || sum.Outcomes[OutcomeVerified] != 1 {
		t.Fatalf("Run after the lock was released: %+v %v", sum, err)
	}
}

// TestRunAgainSaysWhatItSkips: a run started again on the same targets verifies nothing,
// warns, and says (log and summary) how to verify again; --rerun verifies every target
// again as a new attempt, a run of its own (label adhoc-r2), the first one untouched.
func TestRunAgainSaysWhatItSkips(t *testing.T) {
	s := storetest.Open(t)
	pki := newPKI(t)
	a := startServer(t, pki, behaviour{name: "rfc9250"})
	p := filepath.Join(t.TempDir(), "targets.txt")
	if err := os.WriteFile(p, []byte(a.addr.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(rerun bool) (*Summary, string, string) {
		var logs, text strings.Builder
		sum, err := Run(context.Background(), s, RunConfig{Verify: testConfig(pki), Vantage: "verifier", Label: "adhoc",
			TargetsFile: p, Week: "2026-W47", Rerun: rerun}, slog.New(slog.NewTextHandler(&logs, nil)))
		if err != nil {
			t.Fatal(err)
		}
		sum.WriteText(&text)
		return sum, logs.String(), text.String()
	}
	first, _, _ := run(false)
	again, logs, text := run(false)
	if again.RunID != first.RunID || again.Skipped != 1 || again.Verified != 0 {
		t.Errorf("again: %+v; want the same run, 1 skipped, 0 verified", again)
	}
	if !strings.Contains(logs, "level=WARN") || !strings.Contains(logs, "--rerun") || !strings.Contains(text, "--rerun") {
		t.Errorf("a run that verifies nothing must warn and say how to verify again:\nlog:\n%s\nsummary:\n%s", logs, text)
	}
	re, _, _ := run(true)
	if re.RunID == first.RunID || re.Label != "adhoc-r2" || re.Verified != 1 || re.Outcomes[OutcomeVerified] != 1 {
		t.Errorf("--rerun: %+v; want a new run labelled adhoc-r2 that verified the target", re)
	}
	if n := count(t, s, `SELECT count(*) FROM verification_results WHERE run_id = $1`, first.RunID); n != 1 {
		t.Errorf("first attempt has %d results after --rerun, want 1", n)
	}
}
