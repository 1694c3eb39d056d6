package e2e

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/doqscan/doqscan/internal/testbed"
)

// QUIC long-header probe that forces Version Negotiation (RFC 9000 §6, §17.2; RFC 8999
// §6): a reserved version 0x?a?a?a?a (RFC 9000 §15) in a datagram of at least 1200 bytes
// (RFC 9000 §14.1) with an 8-byte DCID, so every stack answers (FIELD-NOTES).
const (
	vnProbeVersion = 0x1a2a3a4a
	vnProbeSize    = 1200
	doqPort        = 784 // RFC 9250 §4.1.1 (experimental port used by early deployments)
)

func vnProbe() []byte {
	b := make([]byte, vnProbeSize)
	b[0] = 0xc0 // long header, fixed bit
	binary.BigEndian.PutUint32(b[1:], vnProbeVersion)
	b[5] = 8
	copy(b[6:], "SCANNING")
	b[14] = 0 // SCID length
	return b
}

// TestZmapFindsPopulationQUIC brings up an instance with the population and bin/simserver,
// scans 198.19.0.0/16 on UDP/784 with zmap from the vantage namespace, and compares the
// addresses that answered with the population's ground truth (UDPResponders: any UDP
// answer, what stock zmap counts). Third-party peers are not started here (their
// addresses are excluded and logged). Addresses on lossy paths may be missed (one probe
// each); everything else must match exactly, and no address outside the truth may answer.
func TestZmapFindsPopulationQUIC(t *testing.T) {
	if err := testbed.Preflight(); err != nil {
		t.Skipf("SKIP: %v", err)
	}
	o := testbed.Options{Name: fmt.Sprintf("tz%d", os.Getpid()%100000), Servers: true, NoPeers: true}
	if err := o.Fill(); err != nil {
		t.Fatal(err)
	}
	if o.Population == "" {
		t.Skip("SKIP: no testbed/population.txt")
	}
	if _, err := os.Stat(filepath.Join(o.Home, "bin", "simserver")); err != nil {
		t.Skip("SKIP: bin/simserver not built (./dev build)")
	}
	tb := testbed.ForTest(t, o)
	pop := tb.Population
	want := map[string]bool{}
	lossy := map[string]bool{}
	peersSkipped := 0
	for _, a := range pop.UDPResponders(doqPort) {
		r := pop.Lookup(a)
		if r.Peer != "" {
			peersSkipped++
			continue
		}
		want[a.String()] = true
		if pop.PathOf(a).Loss > 0 {
			lossy[a.String()] = true
		}
	}
	if len(want) == 0 {
		t.Fatal("population has no UDP/784 responders outside peers")
	}
	probe := filepath.Join(t.TempDir(), "vn.pkt")
	if err := os.WriteFile(probe, vnProbe(), 0o644); err != nil {
		t.Fatal(err)
	}
	rate := envInt("DOQSCAN_ZMAP_RATE", 5000)
	got, raceDiscards, err := zmapScan(context.Background(), t, tb, pop.Prefix.String(), doqPort, "file:"+probe, rate)
	if err != nil {
		t.Fatal(err)
	}
	missedLossy := 0
	var missed []string
	for a := range want {
		if !got[a] {
			if lossy[a] {
				missedLossy++
				continue
			}
			missed = append(missed, a)
		}
	}
	for _, a := range excuseZmapDiscards(t, missed, raceDiscards) {
		t.Errorf("%s (%s) answers UDP/%d in the population but not to zmap", a, pop.Lookup(netip.MustParseAddr(a)).Class, doqPort)
	}
	for a := range got {
		if !want[a] {
			r := pop.Lookup(netip.MustParseAddr(a))
			class := "silent"
			if r != nil {
				class = r.Class
			}
			t.Errorf("zmap got an answer from %s (%s), which should not answer UDP/%d", a, class, doqPort)
		}
	}
	t.Logf("delay line: %+v", readStats(tb))
	if t.Failed() {
		// Where did the answers go? The internet side's UDP counters (a server that
		// cannot keep up drops there).
		snmp, _ := tb.InetCommand(context.Background(), "grep", "^Udp:", "/proc/net/snmp").CombinedOutput()
		t.Logf("inet namespace /proc/net/snmp:\n%s", snmp)
	}
	t.Logf("zmap over %v UDP/%d: %d answered; truth %d (+%d peer addresses not started); %d on lossy paths missed",
		pop.Prefix, doqPort, len(got), len(want), peersSkipped, missedLossy)
}
