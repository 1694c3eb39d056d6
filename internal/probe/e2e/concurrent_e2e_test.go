package e2e_test

import (
	"bytes"
	"context"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/doqscan/doqscan/internal/cli/clitest"
	"github.com/doqscan/doqscan/internal/home"
	"github.com/doqscan/doqscan/internal/probe"
	"github.com/doqscan/doqscan/internal/store/storetest"
	"github.com/doqscan/doqscan/internal/testbed/wirecap"
)

// TestConcurrentScansRunZmapOnce starts `zprobe scan` and, once it holds the scan's lock
// (seen in pg_locks), the same scan (week, vantage, label, shard) again. The second exits
// 75 naming the first (its pid) while the first still runs, and sends nothing: a capture
// on the vantage's link sees each target address get exactly one probe per port (zmap
// -P 1), i.e. one zmap per port; the scan directory holds one raw file per port and the
// scan ends ok.
func TestConcurrentScansRunZmapOnce(t *testing.T) {
	e := requireTestbed(t)
	v := e.v
	bin := filepath.Join(commands.Dir(t), "zprobe")
	s, url := storetest.OpenURL(t)
	out := keepOnFailure(t)
	const week, vantage, label = "2026-W47", "pair", "pair"
	targets := netip.MustParsePrefix("198.19.0.0/20")
	args := []string{"scan", "--vantage", vantage, "--week", week, "--label", label, "--testbed", testbedPrefix.String(),
		"--targets", targets.String(), "--quic-ports", "784", "--dns-ports", "53", "--cooldown", "3", "--probes-per-host", "1",
		"--out", out, "--blocklist-dir", filepath.Join(home.Dir(), "blocklist"),
		"--interface", v.Iface, "--gateway-mac", v.GatewayMAC, "--source-ip", v.Addr, "--seed", "7"}
	command := func() (*exec.Cmd, *bytes.Buffer) {
		var stderr bytes.Buffer
		c := exec.Command(bin, args...)
		c.Env = append(os.Environ(), "DATABASE_URL="+url)
		c.Stderr = &stderr
		return c, &stderr
	}
	ctx := context.Background()
	capture, err := wirecap.ForVantage(ctx, v.Instance, v.Index)
	if err != nil {
		t.Fatalf("packet capture: %v", err)
	}
	first, firstErr := command()
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	firstDone := make(chan error, 1)
	go func() { firstDone <- first.Wait() }()
	second, secondErr := command()
	clitest.LockedOut(t, s, probe.ScanLockKey(week, vantage, label, 0), first, firstDone, second, secondErr)
	if err := <-firstDone; err != nil {
		t.Fatalf("first scan: %v\n%s", err, firstErr.String())
	}
	pkts, st, err := capture.Stop()
	if err != nil {
		t.Fatalf("packet capture: %v", err)
	}
	if st.Dropped() > 0 || !st.Flushed {
		t.Fatalf("packet capture: %d of %d packets dropped (flushed: %v)", st.Dropped(), st.Captured, st.Flushed)
	}
	src := netip.MustParseAddr(v.Addr)
	for _, port := range []uint16{784, 53} {
		probes, addrs := 0, map[netip.Addr]bool{}
		for _, p := range pkts {
			if p.Proto == wirecap.ProtoUDP && p.Src.Addr() == src && p.Dst.Port() == port && targets.Contains(p.Dst.Addr()) {
				probes++
				addrs[p.Dst.Addr()] = true
			}
		}
		t.Logf("port %d: %d probes on the wire to %d addresses of %v", port, probes, len(addrs), targets)
		if len(addrs) == 0 || probes != len(addrs) {
			t.Errorf("port %d: %d probes to %d addresses: want one each (one zmap)", port, probes, len(addrs))
		}
	}
	raws, _ := filepath.Glob(filepath.Join(probe.RunDir(out, week, vantage, label, 0), "*.csv"))
	if len(raws) != 2 {
		t.Errorf("raw files %v, want 784.csv and 53.csv (one zmap per port)", raws)
	}
	if st, runs := statuses(t, s, week, vantage, label); st != "ok" || len(runs) != 2 || runs[784] != "ok" || runs[53] != "ok" {
		t.Errorf("scan %s, runs %v; want ok, 784 and 53 ok", st, runs)
	}
}
