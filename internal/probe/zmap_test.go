package probe

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/doqscan/doqscan/blocklist"
	"github.com/doqscan/doqscan/internal/store"
	"github.com/doqscan/doqscan/internal/store/storetest"
)

func TestZmapArgsSafety(t *testing.T) {
	seed := uint64(7)
	base := ZmapRun{Port: 853, ProbeFile: "/p/quic.pkt", BlocklistFile: "/p/bl.conf", AllowlistFile: "/p/al.conf", Rate: 1000}
	a, err := base.Args()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--blacklist-file=/p/bl.conf", "--whitelist-file=/p/al.conf", "--probe-module=udp",
		"--target-port=853", "--probe-args=file:/p/quic.pkt", "--rate=1000", "--output-module=csv", "--output-filter=repeat = 0"} {
		if !slices.Contains(a, want) {
			t.Errorf("args %v lack %q", a, want)
		}
	}
	for _, x := range a {
		if !strings.HasPrefix(x, "--") {
			t.Errorf("positional argument %q (would be a target subnet)", x)
		}
	}
	cases := []struct {
		name string
		edit func(*ZmapRun)
		want error
	}{
		{"no blocklist", func(z *ZmapRun) { z.BlocklistFile = "" }, ErrNoBlocklist},
		{"no blocklist even internet-wide", func(z *ZmapRun) { z.BlocklistFile = ""; z.InternetWide = true }, ErrNoBlocklist},
		{"no targets", func(z *ZmapRun) { z.AllowlistFile = "" }, ErrNoTargets},
		{"shards without seed", func(z *ZmapRun) { z.Shards = 4; z.Shard = 1 }, ErrSeedShards},
		{"shard outside shards", func(z *ZmapRun) { z.Shards, z.Shard, z.Seed = 2, 5, &seed }, ErrBadShard},
		{"negative shard", func(z *ZmapRun) { z.Shard = -1 }, ErrBadShard},
		{"no rate, no bandwidth (zmap's unstated default)", func(z *ZmapRun) { z.Rate = 0 }, ErrBadRate},
		{"rate and bandwidth", func(z *ZmapRun) { z.Bandwidth = "1G" }, ErrBadRate},
		{"negative rate", func(z *ZmapRun) { z.Rate = -7 }, ErrBadRate},
		{"rate zmap's int would wrap to 0", func(z *ZmapRun) { z.Rate = 1 << 32 }, ErrBadRate},
		{"rate above MaxRate", func(z *ZmapRun) { z.Rate = MaxRate + 1 }, ErrBadRate},
	}
	for _, c := range cases {
		z := base
		c.edit(&z)
		if _, err := z.Args(); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	z := base
	z.AllowlistFile, z.InternetWide = "", true
	a, err = z.Args()
	if err != nil || slices.ContainsFunc(a, func(s string) bool { return strings.HasPrefix(s, "--whitelist") }) || !slices.Contains(a, "--blacklist-file=/p/bl.conf") {
		t.Errorf("internet-wide: %v %v", a, err)
	}
	z = base
	z.Shards, z.Shard, z.Seed = 4, 3, &seed
	a, _ = z.Args()
	if !slices.Contains(a, "--seed=7") || !slices.Contains(a, "--shards=4") || !slices.Contains(a, "--shard=3") {
		t.Errorf("shard args %v", a)
	}
	z.Shard = 4
	if _, err := z.Args(); err == nil {
		t.Error("shard 4 of 4 accepted")
	}
	z = base
	z.Bandwidth = "1G; rm -rf"
	if _, err := z.Args(); err == nil {
		t.Error("bad bandwidth accepted")
	}
}

func TestBuildSafety(t *testing.T) {
	tb := netip.MustParsePrefix("198.19.0.0/16")
	opt := []blocklist.Entry{{Prefix: netip.MustParsePrefix("198.19.5.0/24"), Source: blocklist.SourceOptOut}}
	s, err := BuildSafety(nil, &tb, false, nil, opt)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Targets) != 1 || s.Targets[0] != tb {
		t.Errorf("targets %v", s.Targets)
	}
	for addr, want := range map[string]bool{"198.19.0.1": true, "198.19.5.1": false, "198.18.0.2": false, "8.8.8.8": false, "10.0.0.1": false} {
		if ok, why := s.Allowed(netip.MustParseAddr(addr)); ok != want {
			t.Errorf("%s: allowed=%v (%s)", addr, ok, why)
		}
	}
	var buf bytes.Buffer
	s.List.WriteZmap(&buf)
	if !strings.Contains(buf.String(), "198.19.5.0/24") || strings.Contains(buf.String(), "198.18.0.0/15 ") {
		t.Errorf("zmap blocklist:\n%s", buf.String())
	}
	if _, err := BuildSafety(nil, nil, false, nil, nil); !errors.Is(err, ErrNoTargets) {
		t.Errorf("no targets: %v", err)
	}
	if _, err := BuildSafety([]netip.Prefix{netip.MustParsePrefix("8.8.8.0/24")}, &tb, false, nil, nil); err == nil {
		t.Error("target outside the testbed accepted")
	}
	bad := netip.MustParsePrefix("10.0.0.0/8")
	if _, err := BuildSafety(nil, &bad, false, nil, nil); err == nil {
		t.Error("testbed prefix outside the lab ranges accepted")
	}
	if _, err := BuildSafety(nil, &tb, true, nil, nil); err == nil {
		t.Error("--testbed with --internet-wide accepted")
	}
	// Internet-wide still blocks the reserved ranges and opt-outs.
	s, err = BuildSafety(nil, nil, true, nil, []blocklist.Entry{{Prefix: netip.MustParsePrefix("1.2.3.0/24"), Source: blocklist.SourceOptOut}})
	if err != nil {
		t.Fatal(err)
	}
	for addr, want := range map[string]bool{"1.1.1.1": true, "1.2.3.4": false, "198.19.0.1": false} {
		if ok, _ := s.Allowed(netip.MustParseAddr(addr)); ok != want {
			t.Errorf("internet-wide %s: %v", addr, ok)
		}
	}
}

func TestZmapStatus(t *testing.T) {
	b, err := os.ReadFile("testdata/zmap/quic-784.stderr")
	if err != nil {
		t.Fatal(err)
	}
	var got []ZmapStatus
	for _, l := range strings.Split(string(b), "\n") {
		if st, ok := ParseZmapStatus(l); ok {
			got = append(got, st)
		}
	}
	if len(got) == 0 || !got[len(got)-1].Done || got[len(got)-1].Sent != 256 {
		t.Fatalf("status lines %+v", got)
	}
	if r, ok := ParseRate(got[len(got)-1].SendRate); !ok || r != 239 {
		t.Errorf("rate %q -> %v", got[len(got)-1].SendRate, r)
	}
	for in, want := range map[string]float64{"1.45 Kp/s": 1450, "2 Mp/s": 2e6, "0 p/s": 0} {
		if r, ok := ParseRate(in); !ok || r != want {
			t.Errorf("ParseRate(%q) = %v", in, r)
		}
	}
	if _, ok := ParseRate("fast"); ok {
		t.Error("ParseRate(fast) ok")
	}
	m, err := ReadZmapMeta("testdata/zmap/quic-784.meta.json")
	if err != nil || m.TotalSent != 256 {
		t.Fatalf("meta %+v %v", m, err)
	}
}

// countCSV counts data lines per classification in a recorded zmap CSV.
func countCSV(t *testing.T, path string) (lines int) {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return len(strings.Split(strings.TrimSpace(string(b)), "\n")) - 1
}

// TestRecordedZmapCSV parses real zmap 2.1.1 output (recorded on a namespace pair with
// quic-go on 784, miekg/dns on 53 and nothing on 9999).
func TestRecordedZmapCSV(t *testing.T) {
	c, err := NewClassifier(DefaultQUICProbe(), recordedDNSProbe, map[uint16]ProbeKind{53: ProbeDNS})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		file string
		port uint16
		kind Kind
	}{
		{"quic-784.csv", 784, KindQUICVN}, {"dns-53.csv", 53, KindDNS}, {"icmp-9999.csv", 9999, KindICMPUnreach},
	} {
		f, err := os.Open(filepath.Join("testdata/zmap", tc.file))
		if err != nil {
			t.Fatal(err)
		}
		in := NewIngest(nil, 0, c, nil)
		if err := IngestCSV(context.Background(), f, tc.port, in); err != nil {
			t.Fatal(err)
		}
		f.Close()
		n := countCSV(t, filepath.Join("testdata/zmap", tc.file))
		if in.Bad != 0 || in.Replies != int64(n) || in.Counts[tc.port][tc.kind] != int64(n) {
			t.Errorf("%s: %d lines, replies %d, bad %d, counts %v", tc.file, n, in.Replies, in.Bad, in.Counts)
		}
	}
}

// copyRunDir is a scan directory with the recorded zmap output of ports 784, 53 and 9999.
func copyRunDir(t *testing.T) string {
	return scanDir(t, `"784":"quic-vn","53":"dns","9999":"quic-vn"`, "198.19.0.0/24",
		map[string]string{"quic-784.csv": "784.csv", "dns-53.csv": "53.csv", "icmp-9999.csv": "9999.csv"})
}

// recordedDNSProbe is the DNS probe the recordings under testdata/zmap answer (the
// default name was example.com then).
var recordedDNSProbe = DNSProbe{ID: DefaultDNSID, QName: "example.com."}

// scanDir is a scan directory (2026-W47, vantage test, weekly shard 0) with the probes
// of the recordings, a manifest of ports (the JSON object's members) and target, and the recorded
// zmap outputs copies names (testdata/zmap file -> name in the directory).
func scanDir(t *testing.T, ports, target string, copies map[string]string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "2026-W47", "test", "weekly-shard0")
	os.MkdirAll(dir, 0o755)
	q, _ := DefaultQUICProbe().Build()
	d, _ := recordedDNSProbe.Build()
	os.WriteFile(filepath.Join(dir, "quic.pkt"), q, 0o644)
	os.WriteFile(filepath.Join(dir, "dns.pkt"), d, 0o644)
	for src, dst := range copies {
		b, _ := os.ReadFile(filepath.Join("testdata/zmap", src))
		os.WriteFile(filepath.Join(dir, dst), b, 0o644)
	}
	os.WriteFile(filepath.Join(dir, "manifest.json"), []byte(`{"iso_week":"2026-W47","vantage_id":"test","label":"weekly",
		"shard":0,"shards":1,"ports":{`+ports+`},"quic_probe":"quic.pkt","dns_probe":"dns.pkt",
		"targets":["`+target+`"]}`), 0o644)
	return dir
}

// TestReplayTwice ingests recorded zmap CSV files into a real database twice: the second
// replay adds nothing.
func TestReplayTwice(t *testing.T) {
	s := storetest.Open(t)
	ctx := context.Background()
	dir := copyRunDir(t)
	total := 0
	for _, port := range []string{"784", "53", "9999"} {
		path := filepath.Join(dir, port+".csv")
		n := countCSV(t, path)
		total += n
		r1, err := Replay(ctx, s, path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if r1.Inserted != int64(n) || r1.Replies != int64(n) {
			t.Errorf("%s first replay: %+v, want %d rows", port, r1, n)
		}
		r2, err := Replay(ctx, s, path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if r2.Inserted != 0 || r2.ScanID != r1.ScanID {
			t.Errorf("%s second replay inserted %d (scan %d vs %d)", port, r2.Inserted, r2.ScanID, r1.ScanID)
		}
	}
	rows, err := store.SelectTable[store.ScanReply](ctx, s, store.TableScanReplies, "port, address")
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != total {
		t.Fatalf("%d rows, want %d", len(rows), total)
	}
	for _, r := range rows {
		switch r.Port {
		case 784:
			if r.ReplyKind != "quic-vn" || len(r.QUICVersions) < 2 || r.GreaseCount == nil || *r.GreaseCount != 1 || r.VNCIDMatch == nil || !*r.VNCIDMatch {
				t.Fatalf("784 row %+v", r)
			}
		case 53:
			if r.ReplyKind != "dns" || *r.DNSRcode != 0 || *r.DNSAnswers != 1 || !*r.DNSRA {
				t.Fatalf("53 row %+v", r)
			}
		case 9999:
			if r.ReplyKind != "icmp-unreach" || *r.ICMPType != 3 || *r.ICMPCode != 3 || r.Sport != nil {
				t.Fatalf("9999 row %+v", r)
			}
		}
		if r.ReceivedAt.Year() < 2026 {
			t.Fatalf("received_at %v", r.ReceivedAt)
		}
	}
	// A CSV without a manifest is refused with a clear error.
	lone := filepath.Join(t.TempDir(), "853.csv")
	os.WriteFile(lone, []byte("saddr\n"), 0o644)
	if _, err := Replay(ctx, s, lone, nil); err == nil || !strings.Contains(err.Error(), "manifest") {
		t.Errorf("no manifest: %v", err)
	}
}

func TestParseProbeFiles(t *testing.T) {
	q := DefaultQUICProbe()
	b, _ := q.Build()
	got, err := ParseQUICProbe(b)
	if err != nil || got.Version != q.Version || !bytes.Equal(got.DCID, q.DCID) || !bytes.Equal(got.SCID, q.SCID) || got.Size != q.Size {
		t.Errorf("quic %+v %v", got, err)
	}
	d := DNSProbe{ID: 9, QName: "doq.example.net."}
	b, _ = d.Build()
	gd, err := ParseDNSProbe(b)
	if err != nil || gd != d {
		t.Errorf("dns %+v %v", gd, err)
	}
}

// TestStreamCSVDeferred checks the raw copy is complete and every line is either
// ingested or deferred when the queue to the classifier overflows.
func TestStreamCSVDeferred(t *testing.T) {
	data := syntheticCSV(t, 5000)
	old := StreamQueue
	StreamQueue = 4
	defer func() { StreamQueue = old }()
	in := NewIngest(nil, 0, testClassifier(t), nil)
	var raw bytes.Buffer
	pr, pw := io.Pipe()
	go func() {
		// Write in small pieces, as zmap does.
		for b := data; len(b) > 0; {
			n := min(len(b), 4096)
			pw.Write(b[:n])
			b = b[n:]
		}
		pw.Close()
	}()
	if err := StreamCSV(context.Background(), pr, &raw, 784, in, time.Second); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(raw.Bytes(), data) {
		t.Fatal("raw copy differs from zmap's output")
	}
	if in.Replies+in.Deferred != 5000 || in.Bad != 0 {
		t.Fatalf("replies %d + deferred %d != 5000 (bad %d)", in.Replies, in.Deferred, in.Bad)
	}
	t.Logf("replies %d, deferred %d", in.Replies, in.Deferred)
}

// TestDetectZmap: the installed zmap names its version and gets its dialect; a binary
// that is not there is ErrNoZmap (exit code 5 in zprobe).
func TestDetectZmap(t *testing.T) {
	if _, err := exec.LookPath(DefaultZmap); err != nil {
		t.Skipf("zmap is not installed at %s (apt-get install zmap)", DefaultZmap)
	}
	v, err := DetectZmap(context.Background(), DefaultZmap)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^zmap [0-9]+\.[0-9]+\.[0-9]+`).MatchString(v.Raw) || v.Dialect == nil || v.Binary == "" {
		t.Fatalf("DetectZmap = %+v, want \"zmap X.Y.Z...\" with a dialect", v)
	}
	t.Logf("zmap --version: %q (%s)", v.Raw, v.Dialect.Name)
	if _, err := DetectZmap(context.Background(), filepath.Join(t.TempDir(), "zmap")); !errors.Is(err, ErrNoZmap) {
		t.Fatalf("missing binary: %v, want ErrNoZmap", err)
	}
}

// TestZmapLineLevel: zmap's own tagged lines keep their level (info and debug at
// debug); an untagged line, such as the C library's message before an abort, is a
// warning, and no line of a real run's stderr is.
func TestZmapLineLevel(t *testing.T) {
	for _, c := range []struct {
		line string
		want slog.Level
	}{
		{"Nov 22 04:30:11.679 [INFO] zmap: output module: csv", slog.LevelDebug},
		{"Nov 22 04:30:11.679 [DEBUG] send: thread 0 finished", slog.LevelDebug},
		{"Nov 22 04:30:11.679 [WARN] zmap: too few targets", slog.LevelWarn},
		{"Nov 22 04:30:11.679 [FATAL] recv: could not open device", slog.LevelError},
		{"Nov 22 04:30:11.679 [ERROR] send: sendto failed", slog.LevelError},
		{"double free or corruption (out)", slog.LevelWarn},
		{"zmap: src/send.c:120: send_run: Assertion `x' failed.", slog.LevelWarn},
	} {
		if got := zmapLineLevel(c.line); got != c.want {
			t.Errorf("%q: level %v, want %v", c.line, got, c.want)
		}
	}
	b, err := os.ReadFile("testdata/zmap/quic-784.stderr")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l == "" {
			continue
		}
		if _, ok := ParseZmapStatus(l); ok {
			continue
		}
		if lv := zmapLineLevel(l); lv != slog.LevelDebug {
			t.Errorf("a real run's line %q at %v, want debug", l, lv)
		}
	}
}

// TestWriteReplies: zprobe --json prints one JSON object per reply the scan holds,
// nothing else, with the reply's class and what it showed.
func TestWriteReplies(t *testing.T) {
	s := storetest.Open(t)
	ctx := context.Background()
	dir := copyRunDir(t)
	var scanID int64
	total := 0
	for _, port := range []string{"784", "53", "9999"} {
		r, err := Replay(ctx, s, filepath.Join(dir, port+".csv"), nil)
		if err != nil {
			t.Fatal(err)
		}
		scanID, total = r.ScanID, total+int(r.Inserted)
	}
	var out bytes.Buffer
	n, err := WriteReplies(ctx, s, scanID, &out)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if err != nil || n != total || len(lines) != total {
		t.Fatalf("WriteReplies: %d, %v, %d lines; want %d", n, err, len(lines), total)
	}
	kinds := map[string]int{}
	for _, l := range lines {
		var r ReplyRecord
		if err := json.Unmarshal([]byte(l), &r); err != nil || r.IP == "" || r.Port == 0 {
			t.Fatalf("line %q: %+v %v", l, r, err)
		}
		kinds[fmt.Sprintf("%d/%s", r.Port, r.ReplyKind)]++
		if r.ReplyKind == "quic-vn" && (len(r.QUICVersions) < 2 || r.VNCIDMatch == nil || !*r.VNCIDMatch) {
			t.Errorf("VN reply without its versions: %s", l)
		}
	}
	if kinds["784/quic-vn"] == 0 || kinds["53/dns"] == 0 || kinds["9999/icmp-unreach"] == 0 {
		t.Errorf("replies by port and kind %v", kinds)
	}
}
