package probe

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/store"
	"github.com/doqscan/doqscan/internal/store/storetest"
)

// buildFakeZmap builds testdata/fakezmap (a zmap 4.x that replays testdata/zmap4 and
// checks its command line) and points it at the recordings; it returns the binary and
// the file each run's argv is appended to.
func buildFakeZmap(t *testing.T) (bin, argvLog string) {
	t.Helper()
	dir := t.TempDir()
	bin = filepath.Join(dir, "zmap")
	out, err := exec.Command("go", "build", "-o", bin, "./testdata/fakezmap").CombinedOutput()
	if err != nil {
		t.Fatalf("build fake zmap: %v\n%s", err, out)
	}
	rec, err := filepath.Abs("testdata/zmap4")
	if err != nil {
		t.Fatal(err)
	}
	argvLog = filepath.Join(dir, "argv.log")
	t.Setenv("FAKEZMAP_DIR", rec)
	t.Setenv("FAKEZMAP_LOG", argvLog)
	return bin, argvLog
}

// zmapRuns returns the command lines the fake zmap was run with.
func zmapRuns(t *testing.T, argvLog string) []string {
	t.Helper()
	b, err := os.ReadFile(argvLog)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

func TestParseZmapVersion(t *testing.T) {
	for out, want := range map[string]string{
		"zmap 2.1.1\n":               "2.1",
		"zmap v3.0.0\n":              "3",
		"zmap v4.3.4\n":              "4",
		"zmap 4.1.0+1\nextra line\n": "4",
	} {
		v, err := ParseZmapVersion([]byte(out))
		if err != nil || v.Dialect.Name != want {
			t.Errorf("%q: %+v %v; want dialect %s", out, v, err, want)
		}
	}
	for _, out := range []string{"zmap Development Build. Commit 8de8833 - Mon Oct 6\n", "zmap 5.0.0\n", "zmap 1.2.1\n",
		"zmap 2.0.0\n", "", "nmap 7.93\n"} {
		if v, err := ParseZmapVersion([]byte(out)); !errors.Is(err, ErrZmapVersion) {
			t.Errorf("%q: %+v %v; want ErrZmapVersion", out, v, err)
		}
	}
}

// TestZmapArgsDialects: the same run in each dialect's words.
func TestZmapArgsDialects(t *testing.T) {
	base := ZmapRun{Port: 853, ProbeFile: "/p/quic.pkt", BlocklistFile: "/p/bl.conf", AllowlistFile: "/p/al.conf", Rate: 1000}
	for _, tc := range []struct {
		d    *ZmapDialect
		want []string
		not  []string
	}{
		{Zmap21, []string{"--target-port=853", "--blacklist-file=/p/bl.conf", "--whitelist-file=/p/al.conf", "timestamp-ts,timestamp-us"},
			[]string{"--blocklist-file", "--target-ports"}},
		{zmapDialects[3], []string{"--target-port=853", "--blocklist-file=/p/bl.conf", "--allowlist-file=/p/al.conf", "timestamp_ts,timestamp_us"},
			[]string{"--blacklist-file", "--whitelist-file", "--target-ports"}},
		{zmapDialects[4], []string{"--target-ports=853", "--blocklist-file=/p/bl.conf", "--allowlist-file=/p/al.conf", "timestamp_ts,timestamp_us",
			"--output-filter=repeat = 0"}, []string{"--blacklist-file", "--target-port=", "--no-header-row"}},
	} {
		z := base
		z.Dialect = tc.d
		a, err := z.Args()
		if err != nil {
			t.Fatal(err)
		}
		line := strings.Join(a, " ")
		for _, w := range tc.want {
			if !strings.Contains(line, w) {
				t.Errorf("zmap %s: %q lacks %q", tc.d.Name, line, w)
			}
		}
		for _, n := range tc.not {
			if strings.Contains(line, n) {
				t.Errorf("zmap %s: %q has %q", tc.d.Name, line, n)
			}
		}
	}
	z := base
	z.Ports = []uint16{784, 853, 8853}
	if _, err := z.Args(); err == nil {
		t.Error("zmap 2.1 accepted several ports in one run")
	}
	z.Dialect = zmapDialects[4]
	a, err := z.Args()
	if err != nil || !strings.Contains(strings.Join(a, " "), "--target-ports=784,853,8853") {
		t.Errorf("zmap 4 several ports: %v %v", a, err)
	}
}

// TestRecordedZmap4Meta reads the 4.x metadata (keys renamed in 3.0).
func TestRecordedZmap4Meta(t *testing.T) {
	m, err := ReadZmapMeta("testdata/zmap4/784_853_8853.meta.json")
	if err != nil {
		t.Fatal(err)
	}
	if m.TotalSent != 768 || m.Allowed != 256 || len(m.TargetPorts) != 3 || len(m.BlacklistedNets) != 3 || m.BlacklistedNets[0] != "0.0.0.0/8" {
		t.Errorf("4.x metadata read as %+v", m)
	}
	m, err = ReadZmapMeta("testdata/zmap/quic-784.meta.json")
	if err != nil || m.TotalSent != 256 || m.Allowed != 256 || len(m.TargetPorts) != 1 || m.TargetPorts[0] != 784 {
		t.Errorf("2.1.1 metadata read as %+v %v", m, err)
	}
}

func fakeScanConfig(t *testing.T, s *store.Store, bin, out string) ScanConfig {
	t.Helper()
	targets := []netip.Prefix{netip.MustParsePrefix("198.19.0.0/24")}
	tb := netip.MustParsePrefix("198.18.0.0/15")
	safety, err := BuildSafety(targets, &tb, false, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return ScanConfig{Store: s, VantageID: "fake4", Week: "2026-W47", Targets: targets, Testbed: &tb, Safety: safety, DNS: recordedDNSProbe,
		OutDir: out, Zmap: ZmapRun{Binary: bin, Rate: 500, Cooldown: 1}, FlushEvery: 10 * time.Millisecond, DBWait: time.Second}
}

func countReplies(t *testing.T, s *store.Store, scanID int64) map[int32]int64 {
	t.Helper()
	return storetest.QueryMap[int32, int64](t, s, "SELECT port, count(*) FROM scan_replies WHERE scan_id = $1 GROUP BY port", scanID)
}

// TestZmap4EndToEnd drives the zmap 4.x dialect through a fake zmap 4.3.4 that checks
// its command line and replays recorded output: one several-port run for the QUIC
// ports and one for DNS; replies stored per port; a second scan of the week sends
// nothing and keeps the raw files; --rescan sends again into new attempt files, which
// `zprobe ingest` (Replay) reads.
func TestZmap4EndToEnd(t *testing.T) {
	bin, argvLog := buildFakeZmap(t)
	s := storetest.Open(t)
	ctx := context.Background()
	out := t.TempDir()
	c := fakeScanConfig(t, s, bin, out)
	var est ScanEstimate
	c.OnEstimate = func(e ScanEstimate) { est = e }
	sum, err := Scan(ctx, c)
	if err != nil {
		t.Fatalf("scan: %v (zmap runs %v)", err, zmapRuns(t, argvLog))
	}
	runs := zmapRuns(t, argvLog)
	if len(runs) != 2 || !strings.Contains(runs[0], "--target-ports=784,853,8853") || !strings.Contains(runs[1], "--target-ports=53") {
		t.Fatalf("zmap runs %q; want one for 784,853,8853 and one for 53", runs)
	}
	if est.Runs != 2 || est.Ports != 4 || est.Addresses != 256 || est.Probes != 1024 || est.RatePPS != 500 {
		t.Errorf("estimate %+v; want 2 runs, 4 ports, 256 addresses, 1024 probes at 500/s", est)
	}
	if sum.Zmap != "zmap v4.3.4" || sum.Status != "ok" {
		t.Errorf("summary: zmap %q, status %s", sum.Zmap, sum.Status)
	}
	byPort := map[uint16]PortSummary{}
	for _, p := range sum.Ports {
		byPort[p.Port] = p
	}
	for _, p := range []uint16{784, 853, 8853} {
		ps := byPort[p]
		if ps.Status != "ok" || ps.ByKind[KindQUICVN] != 98 || ps.Replies != 98 || ps.ProbesSent != 256 || ps.BadLines != 0 {
			t.Errorf("port %d: %+v; want ok, 98 quic-vn replies, 256 probes", p, ps)
		}
	}
	if byPort[784].NoPort != 6 {
		t.Errorf("ICMP replies without a port: %d, want 6", byPort[784].NoPort)
	}
	if ps := byPort[53]; ps.Status != "ok" || ps.ByKind[KindDNS] != 256 || ps.ProbesSent != 256 {
		t.Errorf("port 53: %+v", ps)
	}
	if n := countReplies(t, s, sum.ScanID); n[784] != 98 || n[853] != 98 || n[8853] != 98 || n[53] != 256 || len(n) != 4 {
		t.Errorf("rows per port %v", n)
	}
	dir := RunDir(out, "2026-W47", "fake4", "weekly", 0)
	rawQ, raw53 := filepath.Join(dir, "784_853_8853.csv"), filepath.Join(dir, "53.csv")
	for raw, rec := range map[string]string{rawQ: "testdata/zmap4/784_853_8853.csv", raw53: "testdata/zmap4/53.csv"} {
		got, err1 := os.ReadFile(raw)
		want, err2 := os.ReadFile(rec)
		if err1 != nil || err2 != nil || !bytes.Equal(got, want) {
			t.Errorf("raw file %s differs from zmap's output %s (%v %v)", raw, rec, err1, err2)
		}
		if _, err := os.Stat(metaFor(raw)); err != nil {
			t.Errorf("metadata of %s: %v", raw, err)
		}
	}
	st0 := map[string]os.FileInfo{}
	for _, f := range []string{rawQ, raw53} {
		st0[f], _ = os.Stat(f)
	}

	// The same week again (a restarted timer): nothing is sent, the raw files stay.
	sum2, err := Scan(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if runs := zmapRuns(t, argvLog); len(runs) != 2 {
		t.Fatalf("the second scan of the week ran zmap again: %q", runs[2:])
	}
	for _, p := range sum2.Ports {
		if !p.Resumed || p.Status != "ok" {
			t.Errorf("second scan, port %d: %+v; want resumed ok", p.Port, p)
		}
	}
	for f, st := range st0 {
		now, err := os.Stat(f)
		if err != nil || now.Size() != st.Size() || !now.ModTime().Equal(st.ModTime()) {
			t.Errorf("raw file %s changed by the second scan", f)
		}
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*attempt*")); len(m) > 0 {
		t.Errorf("the second scan made attempt files %v", m)
	}

	// --rescan: sent again into new files; the first ones stay; rows stay unique.
	c.Rescan = true
	sum3, err := Scan(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if runs := zmapRuns(t, argvLog); len(runs) != 4 {
		t.Fatalf("--rescan: zmap runs %q; want 2 more", runs)
	}
	for _, p := range sum3.Ports {
		if p.Resumed || !strings.Contains(p.RawOutput, ".attempt2.csv") {
			t.Errorf("--rescan port %d: %+v; want sent into an attempt2 file", p.Port, p)
		}
	}
	for f, st := range st0 {
		now, err := os.Stat(f)
		if err != nil || now.Size() != st.Size() || !now.ModTime().Equal(st.ModTime()) {
			t.Errorf("raw file %s changed by --rescan", f)
		}
	}
	if n := countReplies(t, s, sum.ScanID); n[784] != 98 || n[53] != 256 {
		t.Errorf("rows per port after --rescan %v", n)
	}

	// zprobe ingest of an attempt file and of the first file.
	for _, f := range []string{filepath.Join(dir, "784_853_8853.attempt2.csv"), rawQ, raw53} {
		r, err := Replay(ctx, s, f, nil)
		if err != nil {
			t.Fatalf("ingest %s: %v", f, err)
		}
		if r.Status != "ok" || !r.Complete || r.Inserted != 0 || r.Bad != 0 {
			t.Errorf("ingest %s: %+v; want ok, complete, nothing new", f, r)
		}
	}
	st, _, err := s.FindScan(ctx, "2026-W47", "fake4", "weekly", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []int32{784, 853, 8853, 53} {
		if r := st.Runs[p]; r.Status != "ok" || r.ProbesSent == nil || *r.ProbesSent != 256 {
			t.Errorf("scan_runs port %d after ingest: %+v", p, r)
		}
	}
}

// TestZmapUnknownVersion: a zmap zprobe has no dialect for stops the scan before
// anything is sent or stored.
func TestZmapUnknownVersion(t *testing.T) {
	bin, argvLog := buildFakeZmap(t)
	t.Setenv("FAKEZMAP_VERSION", "zmap Development Build. Commit 8de8833 - Mon Oct 6")
	c := fakeScanConfig(t, nil, bin, t.TempDir())
	if _, err := Scan(context.Background(), c); !errors.Is(err, ErrZmapVersion) {
		t.Fatalf("scan with a development build: %v; want ErrZmapVersion", err)
	}
	t.Setenv("FAKEZMAP_VERSION", "zmap v5.0.0")
	if _, err := DetectZmap(context.Background(), bin); !errors.Is(err, ErrZmapVersion) {
		t.Fatalf("zmap 5: %v; want ErrZmapVersion", err)
	}
	if runs := zmapRuns(t, argvLog); len(runs) != 0 {
		t.Fatalf("zmap ran: %q", runs)
	}
}

// TestInternetWideNeedsConfirmation: four ports of the whole internet at zmap's default
// rate take weeks; without Confirmed nothing is sent.
func TestInternetWideNeedsConfirmation(t *testing.T) {
	bin, argvLog := buildFakeZmap(t)
	safety, err := BuildSafety(nil, nil, true, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := ScanConfig{VantageID: "wide", Week: "2026-W47", InternetWide: true, Safety: safety, OutDir: t.TempDir(),
		Zmap: ZmapRun{Binary: bin, Rate: DefaultRate, Cooldown: 8}}
	var est ScanEstimate
	c.OnEstimate = func(e ScanEstimate) { est = e }
	_, err = Scan(context.Background(), c)
	if !errors.Is(err, ErrNeedsConfirmation) {
		t.Fatalf("internet-wide scan without confirmation: %v", err)
	}
	t.Logf("estimate: %s", est)
	// The reserved blocklist leaves about 3.7e9 addresses: 4 ports at 10,000/s is ~17 days.
	if est.Ports != 4 || est.Addresses < 3_000_000_000 || est.Addresses >= 1<<32 ||
		est.Duration < 15*24*time.Hour || est.Duration > 20*24*time.Hour {
		t.Errorf("estimate %+v", est)
	}
	if runs := zmapRuns(t, argvLog); len(runs) != 0 {
		t.Fatalf("zmap ran: %q", runs)
	}
}

// TestZmapFullDisk: a scan whose --out is on a full file system (a small tmpfs, filled)
// fails with the disk's error, which is neither "database unavailable" (it was: exit
// code 3) nor lost: the scan and its ports are recorded as failed, not interrupted.
func TestZmapFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs to fill needs root")
	}
	out := t.TempDir()
	if err := exec.Command("mount", "-t", "tmpfs", "-o", "size=256k", "doqscan-fulldisk", out).Run(); err != nil {
		t.Skipf("mount tmpfs: %v (needed to simulate a full disk)", err)
	}
	t.Cleanup(func() { _ = exec.Command("umount", out).Run() })
	filler, err := os.Create(filepath.Join(out, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	for err == nil {
		_, err = filler.Write(make([]byte, 4096))
	}
	filler.Close()
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling the tmpfs: %v", err)
	}
	bin, _ := buildFakeZmap(t)
	s := storetest.Open(t)
	sum, err := Scan(context.Background(), fakeScanConfig(t, s, bin, out))
	if err == nil || !errors.Is(err, syscall.ENOSPC) || store.IsUnavailable(err) || errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("scan onto a full disk: %v; want ENOSPC, not the database's unavailability", err)
	}
	if sum != nil && sum.Status != store.RunFailed {
		t.Errorf("scan status %s, want %s", sum.Status, store.RunFailed)
	}
	t.Log(err)
}
