package e2e_test

import (
	"bytes"
	"context"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/cli/clitest"
	"github.com/doqscan/doqscan/internal/measure/campaign"
	"github.com/doqscan/doqscan/internal/store"
	"github.com/doqscan/doqscan/internal/store/storetest"
	"github.com/doqscan/doqscan/internal/testbed"
	"github.com/doqscan/doqscan/internal/testbed/wirecap"
)

// concurrentTargets is how many resolvers the concurrent-rounds test measures: enough
// that the first run is still measuring when the second has given up.
const concurrentTargets = 16

// TestConcurrentRoundsMeasureOnce starts bin/measure for a round, and once it holds the
// round's lock (seen in pg_locks) starts a second one for the same round (vantage,
// label, hour). The second exits 75 naming the first (its pid), while the first is still
// measuring; the first finishes the round. A packet capture on the vantage's link counts
// what reached the wire: per resolver and port, every exchange and every RTT probe is a
// flow of its own (a fresh socket: a TCP SYN, a DNS ID, a QUIC SCID), and there are
// exactly as many as the round stored rows (measurements, rtt_samples): each query went
// out once in total.
func TestConcurrentRoundsMeasureOnce(t *testing.T) {
	v, pop := testbed.RequirePopulation(t)
	bin := filepath.Join(commands.Dir(t), "measure")
	lines := doqTCPTargets(pop)
	if len(lines) < concurrentTargets {
		t.Fatalf("only %d targets on paths up to %v: the population changed?", len(lines), restartMaxRTT)
	}
	lines = lines[:concurrentTargets]
	targets := filepath.Join(t.TempDir(), "targets.txt")
	if err := os.WriteFile(targets, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dsn := storetest.NewDatabase(t)
	ctx := context.Background()
	s, err := store.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	hour := time.Now().UTC().Truncate(time.Hour)
	const label = "pair"
	command := func(stderr io.Writer) *exec.Cmd {
		c := exec.Command(bin, "--targets", targets, "--label", label, "--hour", hour.Format(time.RFC3339), "--vantage", "testbed",
			"--protocols", "doudp,dotcp,doq", "--concurrency", "4", "--timeout", "2s", "--rtt-samples", "2", "--log-level", "warn")
		c.Env = append(os.Environ(), "DATABASE_URL="+dsn)
		c.Stderr = stderr
		return c
	}

	capture, err := wirecap.ForVantage(ctx, v.Instance, v.Index)
	if err != nil {
		t.Fatalf("packet capture: %v", err)
	}
	first := command(os.Stderr)
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	firstDone := make(chan error, 1)
	go func() { firstDone <- first.Wait() }()
	var secondErr bytes.Buffer
	clitest.LockedOut(t, s, campaign.LockKey("testbed", label, hour), first, firstDone, command(&secondErr), &secondErr)
	if err := <-firstDone; err != nil {
		t.Fatalf("first run: %v", err)
	}
	pkts, st, err := capture.Stop()
	if err != nil {
		t.Fatalf("packet capture: %v", err)
	}
	if st.Dropped() > 0 || !st.Flushed {
		t.Fatalf("packet capture: %d of %d packets dropped (flushed: %v)", st.Dropped(), st.Captured, st.Flushed)
	}

	// On the wire: flows from the vantage to each (address, port, transport). The kernel
	// may give two sockets in a row the same port, so a flow is its source port and what
	// starts it: a TCP SYN's sequence number; on port 53 a datagram's first two bytes (a
	// DNS ID, the start of an RTT probe's random payload); on a QUIC port the client's
	// SCID, one per connection and per Version Negotiation probe (short-header packets
	// carry none and are not counted).
	type dst struct {
		addr  netip.Addr
		port  uint16
		proto uint8
	}
	type flow struct {
		port uint16
		id   string
	}
	src := netip.MustParseAddr(v.Addr)
	flows := map[dst]map[flow]bool{}
	for _, p := range pkts {
		if p.Src.Addr() != src {
			continue
		}
		f := flow{port: p.Src.Port()}
		switch {
		case p.Proto == wirecap.ProtoTCP:
			if p.TCPFlags&(wirecap.TCPSyn|wirecap.TCPAck) != wirecap.TCPSyn {
				continue
			}
			f.id = strconv.FormatUint(uint64(p.Seq), 10)
		case p.Dst.Port() == 53:
			f.id = strconv.FormatUint(uint64(p.Lead), 10)
		case p.SCID != "":
			f.id = p.SCID
		default:
			continue
		}
		d := dst{p.Dst.Addr(), p.Dst.Port(), p.Proto}
		if flows[d] == nil {
			flows[d] = map[flow]bool{}
		}
		flows[d][f] = true
	}
	// Stored: one exchange per measurement row (fresh sessions), one probe per RTT sample.
	stored := map[dst]int{}
	rows, err := s.Pool.Query(ctx, `
		SELECT host(m.address), m.port, CASE m.protocol WHEN 'dotcp' THEN 'tcp' ELSE 'udp' END, count(*)
		  FROM measurements m JOIN campaigns c USING (campaign_id) WHERE c.label = $1 GROUP BY 1, 2, 3
		UNION ALL
		SELECT host(r.address), r.port, CASE r.transport WHEN 'tcp' THEN 'tcp' ELSE 'udp' END, count(*)
		  FROM rtt_samples r JOIN campaigns c USING (campaign_id) WHERE c.label = $1 GROUP BY 1, 2, 3`, label)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var (
			a, proto string
			port     int32
			n        int
		)
		if err := rows.Scan(&a, &port, &proto, &n); err != nil {
			t.Fatal(err)
		}
		d := dst{netip.MustParseAddr(a), uint16(port), wirecap.ProtoUDP}
		if proto == "tcp" {
			d.proto = wirecap.ProtoTCP
		}
		stored[d] += n
	}
	rows.Close()
	if len(stored) == 0 {
		t.Fatal("the round stored nothing")
	}
	var wire, rowsN int
	for d, n := range stored {
		rowsN += n
		wire += len(flows[d])
		if len(flows[d]) != n {
			t.Errorf("%v:%d (proto %d): %d flows on the wire, %d exchanges and probes stored", d.addr, d.port, d.proto, len(flows[d]), n)
		}
	}
	t.Logf("%d resolvers: %d flows on the wire, %d exchanges and probes stored", concurrentTargets, wire, rowsN)
}
