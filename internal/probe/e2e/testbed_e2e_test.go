// End-to-end tests on the simulated internet (internal/testbed). TestMain re-runs the
// package inside the vantage namespace of a testbed of its own (testbed.RunInVantage), so
// every test of this package runs there. Without root, ip or /dev/net/tun every test
// skips with the reason (testbed.Require); the unit tests live in internal/probe.
//
// Loss: the testbed runs with the population's delays and jitter but loss-free paths
// (lossFreeTable), so TestScanTestbed can demand an exact result: a miss is a bug in the
// pipeline (zmap, delay line, servers, ingest), not emulated loss (see e2eProbes for the
// probes per host). TestScanLossyPaths switches the delay line to the population's own lossy paths
// and checks that the hosts behind them are found with retries (zmap -P), with a
// number of probes derived from the population's loss rates.

package e2e_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/home"
	"github.com/doqscan/doqscan/internal/hostile"
	"github.com/doqscan/doqscan/internal/probe"
	"github.com/doqscan/doqscan/internal/provenance"
	"github.com/doqscan/doqscan/internal/store"
	"github.com/doqscan/doqscan/internal/store/storetest"
	"github.com/doqscan/doqscan/internal/testbed"
	"github.com/doqscan/doqscan/internal/testbed/delayline"
	"github.com/doqscan/doqscan/internal/testbed/netns"
	"github.com/doqscan/doqscan/internal/testbed/peers"
	"github.com/doqscan/doqscan/internal/testbed/population"
	"github.com/doqscan/doqscan/internal/testsupport"
)

func TestMain(m *testing.M) {
	o := testbed.Options{Servers: true}
	if pop, err := population.LoadDefault(); err == nil {
		o.Paths = lossFreeTable(pop)
	}
	code := testbed.RunInVantage(m, o)
	commands.Remove()
	os.Exit(code)
}

// commands is bin/zprobe for the tests that run it as a process, built once.
var commands = testsupport.NewShared("zprobe")

// lossFreeTable is the population's path table (delays, jitter) with every loss rate 0.
func lossFreeTable(p *population.Population) *delayline.Table {
	c := *p
	c.Paths = maps.Clone(p.Paths)
	for k, pa := range c.Paths {
		pa.Loss = 0
		c.Paths[k] = pa
	}
	return testbed.TableFromPopulation(&c)
}

var testbedPrefix = netip.MustParsePrefix("198.19.0.0/16")

// targetCapture counts, on the internet side, UDP datagrams to prefix (tcpdump in
// <inst>-inet): the target-side proof that blocklisted addresses get nothing.
type targetCapture struct {
	cmd    *exec.Cmd
	stderr *bufio.Scanner
	done   chan int
}

func startCapture(t *testing.T, inst string, prefixes []netip.Prefix) *targetCapture {
	t.Helper()
	if _, err := exec.LookPath("tcpdump"); err != nil {
		t.Skip("tcpdump not installed: cannot observe the target side")
	}
	var nets []string
	for _, p := range prefixes {
		nets = append(nets, "dst net "+p.String())
	}
	cmd := exec.Command("ip", "netns", "exec", inst+"-inet", "tcpdump", "-i", "any", "-n", "-p", "-w", "/dev/null",
		"udp and ("+strings.Join(nets, " or ")+")")
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
func expectedDNS(r *population.Record) (probe.Kind, bool) {
	switch r.Hostile {
	case hostile.Garbage, hostile.Truncated:
		return probe.KindDNSMalformed, true
	case hostile.Stall:
		return "", false // accepts and never answers
	}
	return probe.KindDNS, true
}

// e2eSetup is what every scan test of the testbed needs.
type e2eSetup struct {
	v   *testbed.Vantage
	pop *population.Population
	// skip are addresses the testbed cannot serve here (peers not installed), with why.
	skip map[netip.Addr]string
}

func requireTestbed(t *testing.T) *e2eSetup {
	v, _ := testbed.RequirePopulation(t)
	if _, err := os.Stat(filepath.Join(home.Dir(), "bin", "simserver")); err != nil {
		t.Fatalf("the testbed has no simulated servers: %v (./dev build)", err)
	}
	e := &e2eSetup{v: v, pop: v.Population, skip: map[netip.Addr]string{}}
	// The testbed starts the third-party peers (in <inst>-peers) that are installed
	// (peers.StartPopulation; an optional peer may be missing): a missing peer's
	// addresses stay silent, the others answer like any server.
	specs, err := peers.FromPopulation(v.Population, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	_, nsErr := os.Stat("/run/netns/" + v.Instance + "-peers")
	missing := 0
	for _, sp := range specs {
		why := peers.Installed(home.Dir(), sp.Kind)
		if why == nil && nsErr != nil {
			why = fmt.Errorf("the testbed runs no peers (%w)", nsErr)
		}
		if why != nil {
			e.skip[sp.Addr] = why.Error()
			missing++
			t.Logf("excluding third-party peer %s (%s) from the expectations: %v", sp.Addr, sp.Kind, why)
		}
	}
	if len(specs) > 0 {
		t.Logf("third-party peers: %d of %d addresses expected like any other", len(specs)-missing, len(specs))
	}
	return e
}

// expected lists, per QUIC port, the addresses that must answer with a valid probe.VN and
// those that must answer at all, and per DNS server the class it must get; addresses in
// any of the excluded prefixes (opted out, blocklisted) or skipped are left out.
func (e *e2eSetup) expected(qp []uint16, excluded []netip.Prefix) (vn, any map[uint16][]netip.Addr, dns map[netip.Addr]probe.Kind) {
	out := func(a netip.Addr) bool {
		if _, ok := e.skip[a]; ok {
			return true
		}
		return slices.ContainsFunc(excluded, func(p netip.Prefix) bool { return p.Contains(a) })
	}
	vn, any, dns = map[uint16][]netip.Addr{}, map[uint16][]netip.Addr{}, map[netip.Addr]probe.Kind{}
	for _, port := range qp {
		for _, a := range e.pop.QUICSpeakers(port) {
			if !out(a) {
				vn[port] = append(vn[port], a)
			}
		}
		for _, a := range e.pop.UDPResponders(port) {
			if !out(a) {
				any[port] = append(any[port], a)
			}
		}
	}
	for _, a := range e.pop.DNSServers("udp") {
		if k, ok := expectedDNS(e.pop.Lookup(a)); ok && !out(a) {
			dns[a] = k
		}
	}
	return vn, any, dns
}

// scanPorts are the ports of the end-to-end scan: all four, or $DOQSCAN_E2E_PORTS
// (diagnostics, e.g. "53" or "784,853").
func scanPorts() (qp, dp []uint16) {
	qp, dp = probe.DefaultQUICPorts, probe.DefaultDNSPorts
	if p := os.Getenv("DOQSCAN_E2E_PORTS"); p != "" {
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
	return qp, dp
}

// TestScanTestbed scans the whole /16 on all four ports with zmap over loss-free paths
// (e2eProbes per host), and compares every reply with the population: no misses, no
// false positives, hostile replies classified. A database opt-out /28 (among the 853
// speakers) and a blocklist-file /28 (among the DNS servers) receive no datagram at all,
// counted by tcpdump in the internet namespace.
func TestScanTestbed(t *testing.T) {
	e := requireTestbed(t)
	v, pop := e.v, e.pop
	ctx := context.Background()
	s := storetest.Open(t)
	speakers853, dnsServers := pop.QUICSpeakers(853), pop.DNSServers("udp")
	if len(speakers853) == 0 || len(dnsServers) == 0 {
		t.Fatal("population has no QUIC speaker on 853 or no DNS server")
	}
	optout := netip.PrefixFrom(speakers853[len(speakers853)/2], 28).Masked()
	if _, err := s.Pool.Exec(ctx, `INSERT INTO optout_requests (prefix, email, note) VALUES ($1, 'noc@example.net', 'e2e')`, optout); err != nil {
		t.Fatal(err)
	}
	blocked := netip.PrefixFrom(dnsServers[len(dnsServers)/3], 28).Masked()
	if blocked.Overlaps(optout) {
		t.Fatalf("test setup: %s overlaps %s", blocked, optout)
	}
	blDir := t.TempDir()
	confs, _ := filepath.Glob(home.Path("blocklist", "*.conf"))
	for _, f := range confs {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(blDir, filepath.Base(f)), b, 0o644)
	}
	os.WriteFile(filepath.Join(blDir, "e2e.conf"), []byte(blocked.String()+"  # e2e: asked not to be scanned\n"), 0o644)
	excluded := []netip.Prefix{optout, blocked}
	capture := startCapture(t, v.Instance, excluded)
	seed := uint64(20260101)
	qp, dp := scanPorts()
	inetBefore := udpCounters(t, v.Instance+"-inet")
	dlBefore := delayLineStats(t, v.Instance)
	outDir := keepOnFailure(t)
	sum, err := probe.Scan(ctx, probe.ScanConfig{Store: s, VantageID: "e2e", Week: "2026-W47", Seed: &seed, QUICPorts: qp, DNSPorts: dp,
		Testbed: &testbedPrefix, BlocklistDir: blDir, OutDir: outDir,
		VantageLocation: "testbed vantage namespace", VantageContact: "e2e@example.org",
		Zmap: probe.ZmapRun{Rate: e2eRate(), Interface: v.Iface, GatewayMAC: v.GatewayMAC, SourceIP: v.Addr,
			Cooldown: e2eCooldown, ProbesPerHost: e2eProbes()}})
	if err != nil {
		t.Fatal(err)
	}
	checkScanProvenance(t, s, sum.ScanID)
	// zmap's own accounting: every packet its capture passed is a success or a failure
	// (ICMP); one that is neither was discarded by zmap (validation).
	metas, _ := filepath.Glob(filepath.Join(outDir, "*", "*", "*", "*.meta.json"))
	for _, f := range metas {
		if m, err := probe.ReadZmapMeta(f); err == nil {
			t.Logf("zmap %s: pcap_recv %d = success %d + failure %d + discarded %d", filepath.Base(f),
				m.PcapRecv, m.SuccessTotal, m.FailureTotal, m.Discarded())
		}
	}
	if n := capture.stop(t); n != 0 {
		t.Errorf("the opted-out %s and blocklisted %s received %d datagrams", optout, blocked, n)
	} else {
		t.Logf("target side: 0 datagrams reached the opted-out %s and the blocklisted %s", optout, blocked)
	}
	logCounters(t, v.Instance, inetBefore, dlBefore, sum)
	if sum.Ports == nil {
		t.Fatal("no port scanned")
	}
	got := scanReplies(t, s, excluded)
	wantVN, wantAny, wantDNS := e.expected(qp, excluded)
	for _, port := range qp {
		var gotVN, gotAny []netip.Addr
		for a, r := range got[port] {
			if r.ReplyKind == string(probe.KindICMPUnreach) {
				continue
			}
			gotAny = append(gotAny, a)
			if r.ReplyKind == string(probe.KindQUICVN) {
				gotVN = append(gotVN, a)
				for _, v := range pop.AdvertisedVersions(a, port) {
					if !slices.Contains(r.QUICVersions, int64(v)) {
						t.Errorf("%s:%d: probe.VN %v lacks advertised %#x", a, port, r.QUICVersions, v)
					}
				}
			}
			switch want := pop.VNReply(a, port); {
			case want == population.VNMalformed && r.ReplyKind != string(probe.KindQUICVNInvalid):
				t.Errorf("%s:%d: malformed-probe.VN host classified %s", a, port, r.ReplyKind)
			case want == population.VNGarbage && r.ReplyKind != string(probe.KindNotQUIC) && r.ReplyKind != string(probe.KindQUICOther):
				t.Errorf("%s:%d: garbage host classified %s", a, port, r.ReplyKind)
			}
		}
		for _, a := range wantVN[port] {
			if r, ok := got[port][a]; ok && r.ReplyKind != string(probe.KindQUICVN) {
				t.Errorf("%s:%d: probe.VN speaker classified %s; payload %x", a, port, r.ReplyKind, r.Payload)
			}
		}
		diff(t, fmt.Sprintf("port %d quic-vn", port), wantVN[port], gotVN)
		diff(t, fmt.Sprintf("port %d any UDP reply", port), wantAny[port], gotAny)
	}
	if len(dp) > 0 {
		checkDNS(t, wantDNS, got[53], nil)
	}
}

// keepOnFailure returns a scratch directory for the scan's files (zmap's raw CSV and
// metadata) that is removed when the test passes and kept, with its path logged, when
// it fails: the raw output says whether zmap saw a missing reply.
func keepOnFailure(t *testing.T) string {
	dir, err := os.MkdirTemp("", "doqscan-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("scan files kept for diagnosis: %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	return dir
}

// checkDNS compares the replies on 53 with the DNS servers that must be found (only
// those in scope, when scope is set).
func checkDNS(t *testing.T, want map[netip.Addr]probe.Kind, got map[netip.Addr]store.ScanReply, scope func(netip.Addr) bool) {
	t.Helper()
	var miss, wrong, extra []string
	n := 0
	for a, k := range want {
		if scope != nil && !scope(a) {
			continue
		}
		n++
		r, ok := got[a]
		switch {
		case !ok:
			miss = append(miss, a.String())
		case r.ReplyKind != string(k):
			wrong = append(wrong, fmt.Sprintf("%s %s (want %s)", a, r.ReplyKind, k))
		}
	}
	for a, r := range got {
		if _, ok := want[a]; !ok && r.ReplyKind != string(probe.KindICMPUnreach) {
			extra = append(extra, fmt.Sprintf("%s %s", a, r.ReplyKind))
		}
	}
	slices.Sort(miss)
	if len(miss)+len(wrong)+len(extra) > 0 {
		t.Errorf("port 53 dns: %d expected; %d missed %v; %d misclassified %v; %d false positives %v",
			n, len(miss), miss[:min(len(miss), 10)], len(wrong), wrong[:min(len(wrong), 10)], len(extra), extra[:min(len(extra), 10)])
	} else {
		t.Logf("port 53 dns: all %d found and classified, no false positive", n)
	}
}

// scanReplies reads the stored replies by port and address; a reply from an excluded
// prefix is an error.
func scanReplies(t *testing.T, s *store.Store, excluded []netip.Prefix) map[uint16]map[netip.Addr]store.ScanReply {
	t.Helper()
	rows, err := store.SelectTable[store.ScanReply](context.Background(), s, store.TableScanReplies, "port, address")
	if err != nil {
		t.Fatal(err)
	}
	got := map[uint16]map[netip.Addr]store.ScanReply{}
	for _, r := range rows {
		if got[uint16(r.Port)] == nil {
			got[uint16(r.Port)] = map[netip.Addr]store.ScanReply{}
		}
		got[uint16(r.Port)][r.Address] = r
		for _, p := range excluded {
			if p.Contains(r.Address) {
				t.Errorf("reply from excluded %s:%d (%s)", r.Address, r.Port, p)
			}
		}
	}
	return got
}

// logCounters prints where datagrams could have been lost: the internet namespace's UDP
// counters (a full socket buffer counts RcvbufErrors), the delay line (emulated loss,
// overflow) and zmap's capture.
func logCounters(t *testing.T, inst string, inetBefore map[string]int64, dlBefore delayline.Stats, sum *probe.Summary) {
	t.Helper()
	in := netns.Instance{Name: inst, Vantages: 1}
	for _, ns := range []string{in.Vantage(0), in.Router(), in.Inet()} {
		t.Logf("%s links (since creation): %s", ns, linkDrops(ns))
	}
	inetAfter := udpCounters(t, inst+"-inet")
	var parts []string
	for _, k := range []string{"InDatagrams", "NoPorts", "InErrors", "RcvbufErrors", "InCsumErrors", "OutDatagrams", "SndbufErrors"} {
		parts = append(parts, fmt.Sprintf("%s=%d", k, inetAfter[k]-inetBefore[k]))
	}
	t.Logf("internet namespace UDP: %s", strings.Join(parts, " "))
	// Replies reach the vantage's kernel too (zmap reads them with pcap first): a reply
	// damaged on the way shows up as a checksum error here.
	van := udpCounters(t, in.Vantage(0))
	t.Logf("vantage namespace UDP (since creation): InDatagrams=%d NoPorts=%d InErrors=%d InCsumErrors=%d",
		van["InDatagrams"], van["NoPorts"], van["InErrors"], van["InCsumErrors"])
	for _, p := range sum.Ports {
		t.Logf("port %d: %d replies, %d bad CSV lines", p.Port, p.Replies, p.BadLines)
	}
	dl := delayLineStats(t, inst)
	t.Logf("delay line: received %d forwarded %d lost %d dropped %d (overflow %d) write errors %d; max held %d, late max %.1f ms",
		dl.Received-dlBefore.Received, dl.Forwarded-dlBefore.Forwarded, dl.Lost-dlBefore.Lost, dl.Dropped-dlBefore.Dropped,
		dl.Overflow-dlBefore.Overflow, dl.WriteErrs-dlBefore.WriteErrs, dl.MaxHeld, float64(dl.LateMaxNS)/1e6)
	for _, p := range sum.Ports {
		t.Logf("port %d: zmap pcap drops %d, sendto failures %d", p.Port, p.PcapDrop, p.SendFails)
	}
	var sb strings.Builder
	probe.PrintSummary(&sb, sum)
	t.Log("\n" + sb.String())
}

// lossyFailureBudget bounds the chance that TestScanLossyPaths fails by bad luck: the
// number of probes per host is chosen so that the expected number of hosts whose every
// probe or reply is lost stays below it.
const lossyFailureBudget = 1e-3

// probesForLoss returns the fewest probes per host (zmap -P, at most 16) for which the
// expected number of hosts missed stays within budget, and the expected misses with one
// probe. A host on a path losing each packet with probability l, in each direction,
// answers one probe with probability (1-l)^2 and is missed by P probes with
// probability (1-(1-l)^2)^P (losses are independent per packet in the delay line).
func probesForLoss(losses []float64, budget float64) (p int, oneProbe float64) {
	miss := func(p int) float64 {
		s := 0.0
		for _, l := range losses {
			s += math.Pow(1-(1-l)*(1-l), float64(p))
		}
		return s
	}
	for p = 1; p < 16 && miss(p) > budget; p++ {
	}
	return p, miss(1)
}

// setPaths makes the running delay line use table: it rewrites the instance's table
// file, sends SIGHUP, and waits until the delay line logs the reload.
func setPaths(t *testing.T, inst string, table *delayline.Table) {
	t.Helper()
	state := testbed.StateDir(home.Dir(), inst)
	logFile := filepath.Join(state, "delayline.log")
	reloads := func() int {
		b, _ := os.ReadFile(logFile)
		return strings.Count(string(b), "path table reloaded")
	}
	before := reloads()
	var buf strings.Builder
	if _, err := table.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(state, "paths.txt.e2e")
	if err := os.WriteFile(tmp, []byte(buf.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(state, "paths.txt")); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(state, "delayline.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
		t.Fatalf("signal the delay line (pid %d): %v", pid, err)
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for reloads() == before {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("the delay line did not log a table reload within 10 s (%s)", logFile)
		}
	}
}

// TestScanLossyPaths puts the population's lossy paths back into the delay line and
// scans the hosts behind them with as many probes per host as their loss rates need
// (probesForLoss): every one must be found and classified. It logs how many a single
// probe would be expected to miss, which is why TestScanTestbed runs loss-free.
func TestScanLossyPaths(t *testing.T) {
	e := requireTestbed(t)
	v, pop := e.v, e.pop
	ctx := context.Background()
	var targets []netip.Prefix
	lossOf := map[netip.Addr]float64{}
	for i := range pop.Records {
		r := &pop.Records[i]
		name := r.Path
		if name == "" {
			name = pop.DefaultPath
		}
		if l := pop.Paths[name].Loss; l > 0 {
			targets = append(targets, r.Prefix)
			for a := r.Prefix.Addr(); r.Prefix.Contains(a); a = a.Next() {
				lossOf[a] = l
			}
		}
	}
	if len(targets) == 0 {
		t.Skip("SKIP: the population has no lossy path")
	}
	wantVN, _, wantDNS := e.expected(probe.DefaultQUICPorts, nil)
	var qp, dp []uint16
	var losses []float64
	for _, port := range probe.DefaultQUICPorts {
		n := 0
		for _, a := range wantVN[port] {
			if l, ok := lossOf[a]; ok {
				losses = append(losses, l)
				n++
			}
		}
		if n > 0 {
			qp = append(qp, port)
		}
	}
	for a := range wantDNS {
		if l, ok := lossOf[a]; ok {
			losses = append(losses, l)
			dp = []uint16{53}
		}
	}
	if len(losses) == 0 {
		t.Skip("SKIP: no QUIC speaker or DNS server of the population is on a lossy path")
	}
	probes, oneProbe := probesForLoss(losses, lossyFailureBudget)
	t.Logf("%d (host, port) pairs on lossy paths in %d prefixes: one probe would miss %.2f of them on average; %d probes per host miss < %g",
		len(losses), len(targets), oneProbe, probes, lossyFailureBudget)

	setPaths(t, v.Instance, testbed.TableFromPopulation(pop))
	t.Cleanup(func() { setPaths(t, v.Instance, lossFreeTable(pop)) })
	s := storetest.Open(t)
	dlBefore := delayLineStats(t, v.Instance)
	inetBefore := udpCounters(t, v.Instance+"-inet")
	// A fixed seed fixes zmap's permutation of these few prefixes: Debian's zmap 2.1.1
	// aborts on some permutations of a small target set (docs/zprobe.md).
	lossySeed := uint64(20260102)
	sum, err := probe.Scan(ctx, probe.ScanConfig{Store: s, VantageID: "e2e", Week: "2026-W47", Label: "lossy", Targets: targets,
		Seed: &lossySeed, QUICPorts: qp, DNSPorts: dp, Testbed: &testbedPrefix, BlocklistDir: home.Path("blocklist"), OutDir: t.TempDir(),
		Zmap: probe.ZmapRun{Rate: e2eRate(), Interface: v.Iface, GatewayMAC: v.GatewayMAC, SourceIP: v.Addr,
			Cooldown: e2eCooldown, ProbesPerHost: probes}})
	if err != nil {
		t.Fatal(err)
	}
	logCounters(t, v.Instance, inetBefore, dlBefore, sum)
	if dl := delayLineStats(t, v.Instance); dl.Lost == dlBefore.Lost {
		t.Error("the delay line lost no packet: the lossy paths are not in effect")
	}
	got := scanReplies(t, s, nil)
	onLossy := func(a netip.Addr) bool { _, ok := lossOf[a]; return ok }
	for _, port := range qp {
		var want, found []netip.Addr
		for _, a := range wantVN[port] {
			if onLossy(a) {
				want = append(want, a)
			}
		}
		for a, r := range got[port] {
			if r.ReplyKind == string(probe.KindQUICVN) {
				found = append(found, a)
			}
		}
		diff(t, fmt.Sprintf("lossy paths, port %d quic-vn", port), want, found)
	}
	if len(dp) > 0 {
		checkDNS(t, wantDNS, got[53], onLossy)
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

// e2eCooldown is how long zmap waits for replies after its last probe (-c, seconds):
// the population's longest path is 300 ms plus jitter, and the delay line released
// packets up to ~130 ms late under load; 3 s leaves a wide margin.
const e2eCooldown = 3

// e2eProbes is the number of probes per host of TestScanTestbed ($DOQSCAN_E2E_PROBES,
// default 2). With one probe, 16 of 20 full runs were exact and 4 missed 1-2 replies of
// ~7,760 (about 1 in 40,000): replies that reached the vantage namespace's kernel (its
// UDP NoPorts counter has them) and zmap's capture (pcap_recv) but not its output, with
// no drop counter moving anywhere. zmap 2.x discards them to a race between its send
// and receive threads in validate_gen (zmap#519, fixed in 3.0.0; docs/zprobe.md), so
// with Debian's 2.1.1 the test sends two probes per host (zmap -P 2, a standard scan
// setting); DOQSCAN_E2E_PROBES=1 reproduces the single-probe check.
func e2eProbes() int {
	if n, err := strconv.Atoi(os.Getenv("DOQSCAN_E2E_PROBES")); err == nil && n > 0 {
		return n
	}
	return 2
}

// e2eRate is the scan rate of the end-to-end tests ($DOQSCAN_E2E_RATE, default
// 10,000 p/s). The simulated internet runs in user space (delay line, simserver) on the
// same 2 cores as zmap; on loss-free paths one probe per host found every host at 5,000,
// 10,000 and 20,000 p/s asked (4,500, 8,200 and 14,800 achieved, load average ~10) with
// no drop anywhere (target-side UDP counters, delay line, zmap's capture). 10,000 keeps
// a factor of 2 below the highest rate seen exact, and the four ports take ~50 s.
func e2eRate() int {
	if n, err := strconv.Atoi(os.Getenv("DOQSCAN_E2E_RATE")); err == nil && n > 0 {
		return n
	}
	return 10000
}

// BenchmarkZprobeVsZmap sends the same payload over the whole /16 on one port with raw
// zmap (-r 0 = as fast as it can, output discarded) and with zprobe's driver (same
// zmap, plus blocklist, streaming parser and store), and prints both rates and their
// ratio (goal >= 0.95). The ingest's own rate is internal/probe's BenchmarkIngestCSV.
func BenchmarkZprobeVsZmap(b *testing.B) {
	v := testbed.Require(b)
	s := storetest.Open(b)
	ctx := context.Background()
	dir := b.TempDir()
	pkt, _ := probe.DefaultQUICProbe().Build()
	probeFile := filepath.Join(dir, "quic.pkt")
	os.WriteFile(probeFile, pkt, 0o644)
	safety, err := probe.BuildSafety(nil, &testbedPrefix, false, nil, nil)
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
		raw := exec.CommandContext(ctx, probe.DefaultZmap, "-M", "udp", "-p", "853", "--probe-args=file:"+probeFile,
			"-b", filepath.Join(dir, "bl.conf"), "-w", filepath.Join(dir, "al.conf"), "-i", v.Iface, "-G", v.GatewayMAC,
			"-S", v.Addr, "-r", "0", "-c", "1", "-o", "/dev/null", "--disable-syslog")
		out, err := raw.CombinedOutput()
		if err != nil {
			b.Fatalf("raw zmap: %v\n%s", err, out)
		}
		var last probe.ZmapStatus
		for _, l := range strings.Split(string(out), "\n") {
			if st, ok := probe.ParseZmapStatus(l); ok {
				last = st
			}
		}
		r, ok := probe.ParseRate(last.SendRate)
		if !ok {
			b.Fatalf("no rate in raw zmap's status lines:\n%s", out)
		}
		sum, err := probe.Scan(ctx, probe.ScanConfig{Store: s, VantageID: "bench", Week: "2026-W47", Label: fmt.Sprintf("b%d-%d", b.N, i),
			QUICPorts: []uint16{853}, DNSPorts: []uint16{}, Testbed: &testbedPrefix, OutDir: dir,
			Zmap: probe.ZmapRun{Rate: probe.RateUnlimited, Interface: v.Iface, GatewayMAC: v.GatewayMAC, SourceIP: v.Addr, Cooldown: 1}})
		if err != nil {
			b.Fatal(err)
		}
		// Both rates are zmap's own average send rate (its last status line).
		rawRate += r
		zRate += sum.Ports[0].RatePPS
	}
	b.StopTimer()
	b.ReportMetric(rawRate/float64(b.N), "raw_zmap_pps")
	b.ReportMetric(zRate/float64(b.N), "zprobe_pps")
	b.ReportMetric(zRate/rawRate, "ratio")
	b.Logf("load average: %s", testsupport.LoadAverage())
}

// udpCounters reads the kernel's UDP counters (/proc/net/snmp) of a namespace: where
// the target side drops datagrams (a full socket receive buffer counts RcvbufErrors).
func udpCounters(t testing.TB, ns string) map[string]int64 {
	t.Helper()
	res, err := testsupport.NetnsSNMP(ns, "Udp")
	if err != nil {
		t.Logf("reading UDP counters of %s: %v", ns, err)
		return nil
	}
	return res
}

// linkDrops sums the rx/tx drop counters of a namespace's links (veth, tun).
func linkDrops(ns string) string {
	out, err := exec.Command("ip", "-n", ns, "-s", "-j", "link").Output()
	if err != nil {
		return err.Error()
	}
	var links []struct {
		Name  string `json:"ifname"`
		Stats struct {
			RX struct{ Packets, Dropped, Errors uint64 } `json:"rx"`
			TX struct{ Packets, Dropped, Errors uint64 } `json:"tx"`
		} `json:"stats64"`
	}
	if err := json.Unmarshal(out, &links); err != nil {
		return err.Error()
	}
	var parts []string
	for _, l := range links {
		st := l.Stats
		parts = append(parts, fmt.Sprintf("%s rx %d (dropped %d, errors %d) tx %d (dropped %d, errors %d)", l.Name,
			st.RX.Packets, st.RX.Dropped, st.RX.Errors, st.TX.Packets, st.TX.Dropped, st.TX.Errors))
	}
	return strings.Join(parts, "; ")
}

// delayLineStats reads the counters the testbed's delay line writes every second.
func delayLineStats(t testing.TB, inst string) delayline.Stats {
	var st delayline.Stats
	b, err := os.ReadFile(filepath.Join(testbed.StateDir(home.Dir(), inst), "delayline.stats.json"))
	if err == nil {
		err = json.Unmarshal(b, &st)
	}
	if err != nil {
		t.Logf("delay line counters: %v", err)
	}
	return st
}

// checkScanProvenance: the scan row names this build, the vantage point with its
// location and contact, the zmap that ran (its --version) and the SHA-256 of every probe
// as scan_runs recorded it per port.
func checkScanProvenance(t *testing.T, s *store.Store, scanID int64) {
	t.Helper()
	ctx := context.Background()
	var raw []byte
	var loc, contact string
	if err := s.Pool.QueryRow(ctx, `SELECT sc.provenance, v.location, v.contact FROM scans sc
		JOIN vantage_points v USING (vantage_id) WHERE scan_id = $1`, scanID).Scan(&raw, &loc, &contact); err != nil {
		t.Fatal(err)
	}
	var recs []provenance.Record
	if err := json.Unmarshal(raw, &recs); err != nil || len(recs) != 1 {
		t.Fatalf("scan provenance %s (%v): want one record", raw, err)
	}
	r := recs[0]
	zv, err := probe.DetectZmap(ctx, probe.DefaultZmap)
	if err != nil {
		t.Fatal(err)
	}
	if r.Tool != "zprobe" || r.Build != provenance.ReadBuild() || r.Zmap == nil || r.Zmap.Version != zv.Raw || r.Zmap.Path == "" ||
		r.Vantage != (provenance.Vantage{ID: "e2e", Location: loc, Contact: contact}) || loc != "testbed vantage namespace" {
		t.Fatalf("scan provenance %+v (zmap %+v), vantage %q/%q", r, r.Zmap, loc, contact)
	}
	rows, err := s.Pool.Query(ctx, `SELECT port, probe_kind, encode(probe_sha256, 'hex') FROM scan_runs WHERE scan_id = $1`, scanID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var port int
		var kind, sha string
		if err := rows.Scan(&port, &kind, &sha); err != nil {
			t.Fatal(err)
		}
		found := false
		for _, p := range r.Probes {
			found = found || (p.Kind == kind && p.SHA256 == sha && slices.Contains(p.Ports, port))
		}
		if !found {
			t.Errorf("port %d (%s, probe %s) is not in the provenance's probes %+v", port, kind, sha, r.Probes)
		}
		n++
	}
	if n == 0 {
		t.Error("no scan_runs rows")
	}
	t.Logf("scan %d provenance: %s", scanID, raw)
}
