package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/store"
	"github.com/doqscan/doqscan/internal/store/storetest"
	"github.com/doqscan/doqscan/internal/testbed"
	"github.com/doqscan/doqscan/internal/testbed/population"
)

// restartMaxRTT bounds the paths of the restart test's targets (it is about rows, not
// timing; short paths keep the round short).
const restartMaxRTT = 80 * time.Millisecond

// restartTargets is how many resolvers the restart test's round measures, of them up to
// restartTargets6 over IPv6; restartStops how often one round is stopped before it is
// let finish.
const (
	restartTargets  = 72
	restartTargets6 = 8
	restartStops    = 3
)

// doqTCPTargets are the targets-file lines of every address of the well-behaved DoQ
// classes with DNS over TCP, on short loss-free paths (a /30 gives four resolvers of one
// behaviour): its verified DoQ port, then DoTCP (then the protocols not named), each
// exchange answered. A resolver's last step is the TCP probe after DoTCP
// (--rtt-samples SYNs, one RTT each).
func doqTCPTargets(pop *population.Population) []string {
	var lines []string
	seen := map[netip.Addr]bool{}
	for _, ep := range endpoints(pop, true) {
		if ep.proto != measure.DoQ || !ep.rec.HasDNS("tcp") || ep.rec.Peer != "" || seen[ep.addr] ||
			pop.PathOf(ep.addr).RTT > restartMaxRTT || pop.PathOf(ep.addr).Loss > 0 {
			continue
		}
		seen[ep.addr] = true
		for a := ep.rec.Prefix.Addr(); ep.rec.Prefix.Contains(a); a = a.Next() {
			line := a.String()
			if ep.sni != "" {
				line += " sni=" + ep.sni
			}
			lines = append(lines, fmt.Sprintf("%s doq=%d/%s dotcp=53", line, ep.port, ep.alpn))
		}
	}
	return lines
}

// TestStoppedMeasureLosesAndDuplicatesNothing runs bin/measure (built from this tree) as
// a process on the testbed and stops it restartStops times during one round, each time
// right after the process stored its first batch of resolvers (observed in the
// database), then lets a last run finish the round (--hour). Once with SIGTERM (a
// graceful stop: exit 130, the resolvers in flight are dropped, not stored cut short)
// and once with SIGKILL (no shutdown at all). Each round's stored rows are compared, key
// by key, with an uninterrupted round of the same targets: every measurement, qlog,
// analysis and RTT sample, none lost and none twice.
//
// The targets are doqTCPTargets (DoQ, then DoTCP); --rtt-samples 6 makes the TCP probe
// that ends each resolver about a third of its time, so a stop finds some of the eight
// resolvers in flight there. A round stopped while a resolver probed used to store that
// resolver with the samples the stop cut short (a timeout, the rest missing), and the
// resumed round skipped it.
func TestStoppedMeasureLosesAndDuplicatesNothing(t *testing.T) {
	_, pop := testbed.RequirePopulation(t)
	bin := filepath.Join(commands.Dir(t), "measure")
	// Enough resolvers that each of the stopped runs stores its first batch (16
	// resolvers, or what is done at the 10 s progress tick) well before the round ends;
	// the IPv6 ones of the dual-stack population spread over the round, so that some are
	// measured before each stop and some after.
	v4, v6 := doqTCPTargets(pop), doqTCPTargets(pop.IPv6())
	t.Logf("%d IPv4 and %d IPv6 targets on paths up to %v", len(v4), len(v6), restartMaxRTT)
	v6 = v6[:min(len(v6), restartTargets6)]
	v4 = v4[:min(len(v4), restartTargets-len(v6))]
	if len(v4)+len(v6) < restartTargets || len(v6) == 0 {
		t.Fatalf("only %d IPv4 and %d IPv6 targets on paths up to %v: the population changed?", len(v4), len(v6), restartMaxRTT)
	}
	var lines []string
	step := max(1, len(v4)/len(v6))
	for i, l := range v4 {
		if i%step == 0 && len(v6) > 0 {
			lines, v6 = append(lines, v6[0]), v6[1:]
		}
		lines = append(lines, l)
	}
	lines = append(lines, v6...)
	var want6 int64
	for _, l := range lines {
		if strings.Contains(strings.Fields(l)[0], ":") {
			want6++
		}
	}
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
	hour := time.Now().UTC().Truncate(time.Hour).Format(time.RFC3339)
	command := func(label string) *exec.Cmd {
		c := exec.Command(bin, "--targets", targets, "--label", label, "--hour", hour, "--vantage", "testbed",
			"--protocols", "doq,dotcp", "--concurrency", "8", "--timeout", "2s", "--rtt-samples", "6",
			"--log-level", "warn")
		c.Env = append(os.Environ(), "DATABASE_URL="+dsn)
		c.Stderr = os.Stderr
		return c
	}
	stored := func(label string) int64 {
		var n int64
		if err := s.Pool.QueryRow(ctx, `SELECT count(DISTINCT m.address) FROM measurements m JOIN campaigns c USING (campaign_id)
			WHERE c.label = $1`, label).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// stopAfterFirstBatch runs measure for label and sends it sig as soon as the database
	// holds more of the round's resolvers than when it started (the process stored its
	// first batch), then waits for it to end: exit 130 after SIGTERM, killed by SIGKILL.
	stopAfterFirstBatch := func(t *testing.T, label string, sig syscall.Signal) {
		t.Helper()
		before := stored(label)
		c := command(label)
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- c.Wait() }()
		poll := time.NewTicker(50 * time.Millisecond)
		defer poll.Stop()
		for {
			select {
			case err := <-exited:
				t.Fatalf("measure ended (%v) before its first batch was seen (%d of %d stored): nothing to stop (raise restartTargets)",
					err, stored(label), len(lines))
			case <-poll.C:
				if stored(label) == before {
					continue
				}
				if err := c.Process.Signal(sig); err != nil {
					t.Fatal(err)
				}
				err := <-exited
				var ee *exec.ExitError
				if !errors.As(err, &ee) {
					t.Fatalf("measure after %v: %v", sig, err)
				}
				ws := ee.Sys().(syscall.WaitStatus)
				switch {
				case sig == syscall.SIGKILL && !(ws.Signaled() && ws.Signal() == syscall.SIGKILL),
					sig == syscall.SIGTERM && ws.ExitStatus() != 130:
					t.Fatalf("measure after %v: %v, want exit 130 (SIGTERM) or killed (SIGKILL)", sig, err)
				}
				if n := stored(label); n >= int64(len(lines)) {
					t.Fatalf("all %d resolvers stored by the stop: nothing to resume (raise restartTargets)", n)
				}
				return
			}
		}
	}

	if err := command("whole").Run(); err != nil {
		t.Fatalf("uninterrupted measure: %v", err)
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		label := "stopped-" + strings.ToLower(unix.SignalName(sig))
		t.Run(unix.SignalName(sig), func(t *testing.T) {
			for i := 0; i < restartStops; i++ {
				stopAfterFirstBatch(t, label, sig)
				t.Logf("stop %d (%v): %d of %d resolvers stored", i+1, sig, stored(label), len(lines))
			}
			if err := command(label).Run(); err != nil {
				t.Fatalf("resumed measure: %v", err)
			}
			storetest.SameCampaignRows(t, s, label, "whole")
			if got := stored(label); got != int64(len(lines)) {
				t.Errorf("stopped+resumed round covers %d of %d resolvers", got, len(lines))
			}
			var got6 int64
			if err := s.Pool.QueryRow(ctx, `SELECT count(DISTINCT m.address) FROM measurements m JOIN campaigns c USING (campaign_id)
				WHERE c.label = $1 AND family(m.address) = 6`, label).Scan(&got6); err != nil || got6 != want6 {
				t.Errorf("stopped+resumed round covers %d of %d IPv6 resolvers (%v)", got6, want6, err)
			}
		})
	}
}
