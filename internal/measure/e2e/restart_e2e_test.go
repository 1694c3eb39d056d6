package e2e_test

import (
	"context"
	"fmt"
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
	"github.com/doqscan/doqscan/internal/testbed"
	"github.com/doqscan/doqscan/internal/testbed/population"
)

// restartMaxRTT bounds the paths of the restart test's targets (it is about rows, not
// timing; short paths keep the round short).
const restartMaxRTT = 80 * time.Millisecond

// restartTargets is how many resolvers the restart test's round measures, of them up to
// restartTargets6 over IPv6.
const (
	restartTargets  = 40
	restartTargets6 = 6
)

// TestKilledMeasureLosesAndDuplicatesNothing runs bin/measure (built from this tree) as a
// process on the testbed, SIGKILLs it once some resolvers are stored (no graceful
// shutdown: the worst case), restarts it for the same round (--hour), and compares the
// stored rows with an uninterrupted round of the same targets: the same number of rows
// of every kind and no natural key twice.
func TestKilledMeasureLosesAndDuplicatesNothing(t *testing.T) {
	_, pop := testbed.RequirePopulation(t)
	bin := filepath.Join(t.TempDir(), "measure")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/doqscan/doqscan/cmd/measure").CombinedOutput(); err != nil {
		t.Fatalf("go build cmd/measure: %v\n%s", err, out)
	}
	// Every address of the well-behaved DoQ classes on short paths (a /30 gives four
	// resolvers of one behaviour), all five protocols.
	targetsOf := func(pop *population.Population) []string {
		var lines []string
		seen := map[netip.Addr]bool{}
		for _, ep := range endpoints(pop, true) {
			if ep.rec.Peer != "" || pop.PathOf(ep.addr).RTT > restartMaxRTT || pop.PathOf(ep.addr).Loss > 0 || seen[ep.addr] {
				continue
			}
			seen[ep.addr] = true
			for a := ep.rec.Prefix.Addr(); ep.rec.Prefix.Contains(a); a = a.Next() {
				line := a.String()
				if ep.sni != "" {
					line += " sni=" + ep.sni
				}
				lines = append(lines, line)
			}
		}
		return lines
	}
	// Enough resolvers that the first write (after 10 s, the progress interval) comes
	// well before the end at concurrency 4 (~1 resolver/s), few enough for CI time; the
	// IPv6 ones of the dual-stack population spread over the round, so that some are
	// measured before the kill and some after.
	v4, v6 := targetsOf(pop), targetsOf(pop.IPv6())
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
			"--protocols", "doudp,dotcp,dot,doh,doq", "--concurrency", "4", "--timeout", "2s", "--rtt-samples", "2",
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

	// Interrupted: killed once some resolvers are stored, before all are.
	cut := command("killed")
	if err := cut.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cut.Wait() }()
	poll := time.NewTicker(200 * time.Millisecond)
	defer poll.Stop()
	var atKill int64
wait:
	for {
		select {
		case err := <-exited:
			t.Fatalf("measure ended (%v) before it could be killed mid-round (%d of %d stored)", err, stored("killed"), len(lines))
		case <-poll.C:
			if atKill = stored("killed"); atKill > 0 {
				if err := cut.Process.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				<-exited
				break wait
			}
		}
	}
	atKill = stored("killed")
	if atKill >= int64(len(lines)) {
		t.Fatalf("all %d resolvers stored before the kill: nothing to resume (raise the target count)", atKill)
	}
	t.Logf("killed with %d of %d resolvers stored", atKill, len(lines))
	if err := command("killed").Run(); err != nil {
		t.Fatalf("restarted measure: %v", err)
	}
	if err := command("whole").Run(); err != nil {
		t.Fatalf("uninterrupted measure: %v", err)
	}

	count := func(label, from, key string) (rows, keys int64) {
		q := fmt.Sprintf(`SELECT count(*), count(DISTINCT (%s)) FROM %s JOIN campaigns c ON c.campaign_id = x.campaign_id
			WHERE c.label = $1`, key, from)
		if err := s.Pool.QueryRow(ctx, q, label).Scan(&rows, &keys); err != nil {
			t.Fatalf("%s: %v", from, err)
		}
		return rows, keys
	}
	for _, tc := range []struct{ from, key string }{
		{"measurements x", "x.address, x.protocol, x.port, x.variant, x.mode, x.key_share, x.phase, x.seq"},
		{"handshake_analyses a JOIN measurements x USING (measurement_id)", "x.measurement_id"},
		{"qlogs x", "x.qlog_id"},
		{"rtt_samples x", "x.address, x.transport, x.port, x.seq"},
	} {
		kr, kk := count("killed", tc.from, tc.key)
		wr, _ := count("whole", tc.from, tc.key)
		t.Logf("%s: killed+restarted %d rows, uninterrupted %d", tc.from, kr, wr)
		if kr != kk {
			t.Errorf("%s: %d rows but %d distinct keys: duplicates", tc.from, kr, kk)
		}
		if kr != wr || kr == 0 {
			t.Errorf("%s: killed+restarted round stored %d rows, an uninterrupted one %d", tc.from, kr, wr)
		}
	}
	if got := stored("killed"); got != int64(len(lines)) {
		t.Errorf("killed+restarted round covers %d of %d resolvers", got, len(lines))
	}
	var got6 int64
	if err := s.Pool.QueryRow(ctx, `SELECT count(DISTINCT m.address) FROM measurements m JOIN campaigns c USING (campaign_id)
		WHERE c.label = 'killed' AND family(m.address) = 6`).Scan(&got6); err != nil || got6 != want6 {
		t.Errorf("killed+restarted round covers %d of %d IPv6 resolvers (%v)", got6, want6, err)
	}
}
