//go:build testbed

// End-to-end tests on the simulated internet. They need packages that live on the
// testbed branch (internal/testbed, internal/testbed/population), so they are behind the
// build tag `testbed`: at merge, drop the tag (or run `go test -tags testbed
// ./internal/probe/`). Written against the testbed API as of its commit 919800e:
// testbed.RunInVantage(m, Options), testbed.Require(t) -> *Vantage{Instance, Iface,
// GatewayMAC, Addr, Population}, population.QUICSpeakers/UDPResponders/DNSServers/Lookup.

package probe

import (
	"bufio"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/doqscan/doqscan/internal/store"
	"github.com/doqscan/doqscan/internal/store/storetest"
	"github.com/doqscan/doqscan/internal/testbed"
	"github.com/doqscan/doqscan/internal/testbed/population"
)

func TestMain(m *testing.M) {
	os.Exit(testbed.RunInVantage(m, testbed.Options{Servers: true}))
}

var testbedPrefix = netip.MustParsePrefix("198.19.0.0/16")

// targetCapture counts, on the internet side, UDP datagrams to prefix (tcpdump in
// <inst>-inet): the target-side proof that blocklisted addresses get nothing.
type targetCapture struct {
	cmd    *exec.Cmd
	stderr *bufio.Scanner
	done   chan int
}

func startCapture(t *testing.T, inst string, prefix netip.Prefix) *targetCapture {
	t.Helper()
	if _, err := exec.LookPath("tcpdump"); err != nil {
		t.Skip("tcpdump not installed: cannot observe the target side")
	}
	cmd := exec.Command("ip", "netns", "exec", inst+"-inet", "tcpdump", "-i", "any", "-n", "-p", "-w", "/dev/null",
		"udp and dst net "+prefix.String())
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &targetCapture{cmd: cmd, stderr: bufio.NewScanner(pipe), done: make(chan int, 1)}
	// Wait until tcpdump listens (its "listening on" line), then count in the background.
	for c.stderr.Scan() {
		if strings.Contains(c.stderr.Text(), "listening on") {
			break
		}
	}
	go func() {
		re := regexp.MustCompile(`^(\d+) packets? received by filter`)
		n := -1
		for c.stderr.Scan() {
			if m := re.FindStringSubmatch(c.stderr.Text()); m != nil {
				n, _ = strconv.Atoi(m[1])
			}
		}
		c.done <- n
	}()
	return c
}

func (c *targetCapture) stop(t *testing.T) int {
	c.cmd.Process.Signal(os.Interrupt)
	n := <-c.done
	c.cmd.Wait()
	if n < 0 {
		t.Fatal("tcpdump printed no packet count")
	}
	return n
}

// expectedDNS says what the scan must classify a UDP/53 server as, from its behaviour.
func expectedDNS(r *population.Record) (Kind, bool) {
	switch r.Hostile {
	case population.HostileGarbage, population.HostileTruncated:
		return KindDNSMalformed, true
	case population.HostileStall:
		return "", false // accepts and never answers
	}
	return KindDNS, true
}

// TestScanTestbed scans the whole /16 on all four ports with zmap and compares every
// reply with the population: no misses, no false positives, hostile replies classified;
// an opted-out /28 (chosen among QUIC speakers) receives no packet at all.
func TestScanTestbed(t *testing.T) {
	v := testbed.Require(t)
	pop := v.Population
	if pop == nil {
		t.Skip("the testbed runs without a population file")
	}
	ctx := context.Background()
	s := storetest.Open(t)
	speakers853 := pop.QUICSpeakers(853)
	if len(speakers853) == 0 {
		t.Fatal("population has no QUIC speaker on 853")
	}
	optout := netip.PrefixFrom(speakers853[len(speakers853)/2], 28).Masked()
	if _, err := s.Pool.Exec(ctx, `INSERT INTO optout_requests (prefix, email, note) VALUES ($1, 'noc@example.net', 'e2e')`, optout); err != nil {
		t.Fatal(err)
	}
	capture := startCapture(t, v.Instance, optout)
	out := t.TempDir()
	seed := uint64(20260101)
	qp, dp := DefaultQUICPorts, DefaultDNSPorts
	if p := os.Getenv("DOQSCAN_E2E_PORTS"); p != "" { // diagnostics: e.g. "53" or "784,853"
		qp, dp = []uint16{}, []uint16{}
		for _, f := range strings.Split(p, ",") {
			n, _ := strconv.Atoi(f)
			if n == 53 {
				dp = append(dp, 53)
			} else {
				qp = append(qp, uint16(n))
			}
		}
	}
	sum, err := Scan(ctx, ScanConfig{Store: s, VantageID: "e2e", Week: "2026-W47", Seed: &seed, QUICPorts: qp, DNSPorts: dp,
		Testbed: &testbedPrefix, BlocklistDir: filepath.Join("..", "..", "blocklist"), OutDir: out,
		Zmap: ZmapRun{Rate: e2eRate(), Interface: v.Iface, GatewayMAC: v.GatewayMAC, SourceIP: v.Addr, Cooldown: 5, ProbesPerHost: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if n := capture.stop(t); n != 0 {
		t.Errorf("the opted-out %s received %d datagrams", optout, n)
	}
	var sb strings.Builder
	PrintSummary(&sb, sum)
	t.Log("\n" + sb.String())
	rows, err := store.SelectTable[store.ScanReply](ctx, s, store.TableScanReplies, "port, address")
	if err != nil {
		t.Fatal(err)
	}
	got := map[uint16]map[netip.Addr]store.ScanReply{}
	for _, r := range rows {
		if got[uint16(r.Port)] == nil {
			got[uint16(r.Port)] = map[netip.Addr]store.ScanReply{}
		}
		got[uint16(r.Port)][r.Address] = r
		if optout.Contains(r.Address) {
			t.Errorf("reply from opted-out %s:%d", r.Address, r.Port)
		}
	}
	for _, port := range qp {
		var wantVN, wantAny []netip.Addr
		for _, a := range pop.QUICSpeakers(port) {
			if !optout.Contains(a) {
				wantVN = append(wantVN, a)
			}
		}
		for _, a := range pop.UDPResponders(port) {
			if !optout.Contains(a) {
				wantAny = append(wantAny, a)
			}
		}
		var gotVN, gotAny []netip.Addr
		for a, r := range got[port] {
			if r.ReplyKind == string(KindICMPUnreach) {
				continue
			}
			gotAny = append(gotAny, a)
			if r.ReplyKind == string(KindQUICVN) {
				gotVN = append(gotVN, a)
				adv := pop.AdvertisedVersions(a, port)
				for _, v := range adv {
					if !slices.Contains(r.QUICVersions, int64(v)) {
						t.Errorf("%s:%d: VN %v lacks advertised %#x", a, port, r.QUICVersions, v)
					}
				}
			}
			if rec := pop.Lookup(a); rec != nil && rec.Hostile == population.HostileBadVN && r.ReplyKind != string(KindQUICVNInvalid) {
				t.Errorf("%s:%d bad-vn host classified %s", a, port, r.ReplyKind)
			}
		}
		diff(t, fmt.Sprintf("port %d quic-vn", port), wantVN, gotVN)
		diff(t, fmt.Sprintf("port %d any UDP reply", port), wantAny, gotAny)
	}
	want := map[netip.Addr]Kind{}
	if len(dp) == 0 {
		return
	}
	for _, a := range pop.DNSServers("udp") {
		if k, ok := expectedDNS(pop.Lookup(a)); ok && !optout.Contains(a) {
			want[a] = k
		}
	}
	for a, k := range want {
		r, ok := got[53][a]
		switch {
		case !ok:
			t.Errorf("DNS server %s not found", a)
		case r.ReplyKind != string(k):
			t.Errorf("DNS server %s: %s, want %s", a, r.ReplyKind, k)
		}
	}
	for a, r := range got[53] {
		if _, ok := want[a]; !ok && r.ReplyKind != string(KindICMPUnreach) {
			t.Errorf("false positive on 53: %s %s", a, r.ReplyKind)
		}
	}
}

func diff(t *testing.T, what string, want, got []netip.Addr) {
	t.Helper()
	slices.SortFunc(want, netip.Addr.Compare)
	slices.SortFunc(got, netip.Addr.Compare)
	var miss, extra []netip.Addr
	for _, a := range want {
		if _, ok := slices.BinarySearchFunc(got, a, netip.Addr.Compare); !ok {
			miss = append(miss, a)
		}
	}
	for _, a := range got {
		if _, ok := slices.BinarySearchFunc(want, a, netip.Addr.Compare); !ok {
			extra = append(extra, a)
		}
	}
	if len(miss)+len(extra) > 0 {
		t.Errorf("%s: %d expected, %d found; misses %v; false positives %v", what, len(want), len(got), head(miss), head(extra))
	} else {
		t.Logf("%s: all %d found, no false positive", what, len(want))
	}
}

func head(a []netip.Addr) []netip.Addr { return a[:min(len(a), 10)] }

// e2eRate is the scan rate of the end-to-end test ($DOQSCAN_E2E_RATE, default 5000 p/s):
// the simulated internet runs in user space (delay line, simserver) on the same cores.
func e2eRate() int {
	if n, err := strconv.Atoi(os.Getenv("DOQSCAN_E2E_RATE")); err == nil && n > 0 {
		return n
	}
	return 5000
}

// BenchmarkZprobeVsZmap sends the same payload over the whole /16 on one port with raw
// zmap (-r 0 = as fast as it can, output discarded) and with zprobe's driver (same
// zmap, plus blocklist, streaming parser and store), and prints both rates and their
// ratio (goal >= 0.95).
func BenchmarkZprobeVsZmap(b *testing.B) {
	v := testbed.Require(b)
	s := storetest.Open(b)
	ctx := context.Background()
	dir := b.TempDir()
	pkt, _ := DefaultQUICProbe().Build()
	probeFile := filepath.Join(dir, "quic.pkt")
	os.WriteFile(probeFile, pkt, 0o644)
	safety, err := BuildSafety(nil, &testbedPrefix, false, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	var bl, al strings.Builder
	safety.List.WriteZmap(&bl)
	safety.WriteAllowlist(&al)
	os.WriteFile(filepath.Join(dir, "bl.conf"), []byte(bl.String()), 0o644)
	os.WriteFile(filepath.Join(dir, "al.conf"), []byte(al.String()), 0o644)
	var rawRate, zRate float64
	for i := 0; i < b.N; i++ {
		raw := exec.CommandContext(ctx, DefaultZmap, "-M", "udp", "-p", "853", "--probe-args=file:"+probeFile,
			"-b", filepath.Join(dir, "bl.conf"), "-w", filepath.Join(dir, "al.conf"), "-i", v.Iface, "-G", v.GatewayMAC,
			"-S", v.Addr, "-r", "0", "-c", "1", "-o", "/dev/null", "--disable-syslog")
		out, err := raw.CombinedOutput()
		if err != nil {
			b.Fatalf("raw zmap: %v\n%s", err, out)
		}
		var last ZmapStatus
		for _, l := range strings.Split(string(out), "\n") {
			if st, ok := ParseZmapStatus(l); ok {
				last = st
			}
		}
		r, ok := ParseRate(last.SendRate)
		if !ok {
			b.Fatalf("no rate in raw zmap's status lines:\n%s", out)
		}
		sum, err := Scan(ctx, ScanConfig{Store: s, VantageID: "bench", Week: "2026-W47", Label: fmt.Sprintf("b%d-%d", b.N, i),
			QUICPorts: []uint16{853}, DNSPorts: []uint16{}, Testbed: &testbedPrefix, OutDir: dir,
			Zmap: ZmapRun{Rate: 0, Interface: v.Iface, GatewayMAC: v.GatewayMAC, SourceIP: v.Addr, Cooldown: 1}})
		if err != nil {
			b.Fatal(err)
		}
		// Both rates are zmap's own average send rate (its last status line).
		rawRate += r
		zRate += sum.Ports[0].RatePPS
	}
	b.ReportMetric(rawRate/float64(b.N), "raw_zmap_pps")
	b.ReportMetric(zRate/float64(b.N), "zprobe_pps")
	b.ReportMetric(zRate/rawRate, "ratio")
}
