package campaign_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/measure/campaign"
	"github.com/doqscan/doqscan/internal/measure/measuretest"
	"github.com/doqscan/doqscan/internal/store"
	"github.com/doqscan/doqscan/internal/store/pgcluster"
	"github.com/doqscan/doqscan/internal/store/storetest"
)

// outageFor is how long the outage test keeps PostgreSQL stopped: the duration of the
// fault, not a synchronisation (every step waits for the event it needs).
const outageFor = 20 * time.Second

// countingHandler counts the "waiting for database" records, calls gaveUp at the
// "round stopped" record (logged once measuring is cancelled) and passes warnings on
// to stderr.
type countingHandler struct {
	slog.Handler
	n      *atomic.Int64
	gaveUp func()
}

func (h countingHandler) Handle(ctx context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, "waiting for database") {
		h.n.Add(1)
	}
	if strings.HasPrefix(r.Message, "round stopped") {
		h.gaveUp()
	}
	return h.Handler.Handle(ctx, r)
}

func (h countingHandler) WithAttrs(a []slog.Attr) slog.Handler {
	return countingHandler{h.Handler.WithAttrs(a), h.n, h.gaveUp}
}

// countingLogger logs warnings to stderr, counts "waiting for database" lines and
// closes the returned channel when the round gives up on its database.
func countingLogger() (*slog.Logger, *atomic.Int64, <-chan struct{}) {
	n := &atomic.Int64{}
	gaveUp := make(chan struct{})
	var once sync.Once
	return slog.New(countingHandler{slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}),
		n, func() { once.Do(func() { close(gaveUp) }) }}), n, gaveUp
}

// outageTargets starts servers for n resolvers and returns them with their addresses.
func outageTargets(t *testing.T, first byte, n int) ([]campaign.Target, []netip.Addr) {
	var hosts []string
	for i := 0; i < n; i++ {
		hosts = append(hosts, fmt.Sprintf("127.0.3.%d", int(first)+i))
	}
	targets := targetsFor(t, hosts, measuretest.Config{})
	var addrs []netip.Addr
	for _, tg := range targets {
		addrs = append(addrs, tg.Addr)
	}
	return targets, addrs
}

// outageWorld gives an outage test its project home (DOQSCAN_HOME: the spill files go
// to its var/spill), a PostgreSQL cluster of its own with a store on it, n resolvers
// from 127.0.3.first, and their uninterrupted round, labelled "reference".
func outageWorld(t *testing.T, first byte, n int) (string, *pgcluster.Cluster, *store.Store, []campaign.Target, []netip.Addr) {
	home := t.TempDir()
	t.Setenv("DOQSCAN_HOME", home)
	cluster, url := storetest.NewCluster(t)
	ctx := context.Background()
	s, err := store.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if err := s.EnsureVantage(ctx, store.Vantage{ID: "test"}); err != nil {
		t.Fatal(err)
	}
	targets, addrs := outageTargets(t, first, n)
	if _, err := campaign.Run(ctx, s, outageConfig("reference"), targets, logger()); err != nil {
		t.Fatal(err)
	}
	return home, cluster, s, targets, addrs
}

func outageConfig(label string) campaign.Config {
	return campaign.Config{VantageID: "test", Label: label, Hour: hour, Timeout: 2 * time.Second, Concurrency: 1,
		BatchSize: 1, RTTSamples: 2, RTTTimeout: 300 * time.Millisecond}
}

// roundEnd is what campaign.Run returned.
type roundEnd struct {
	sum *campaign.Summary
	err error
}

// outageRound is a round running on its own goroutine that holds one resolver until
// the test has stopped the database.
type outageRound struct {
	done                      chan roundEnd
	storedTwo, atHeld, dbDown chan struct{}
}

// startOutageRound starts a round of cfg on targets. Its hooks close storedTwo once two
// resolvers are stored and atHeld at the result of resolver held, which then waits for
// dbDown (see stopDBAtHeld); the result of any resolver a in more runs more[a].
func startOutageRound(ctx context.Context, s *store.Store, cfg campaign.Config, targets []campaign.Target, log *slog.Logger,
	held netip.Addr, more map[netip.Addr]func()) *outageRound {
	r := &outageRound{done: make(chan roundEnd, 1), storedTwo: make(chan struct{}), atHeld: make(chan struct{}), dbDown: make(chan struct{})}
	var stored, atHeld sync.Once
	cfg.OnFlush = func(n int) {
		if n >= 2 {
			stored.Do(func() { close(r.storedTwo) })
		}
	}
	cfg.OnResult = func(tg campaign.Target, _ campaign.Endpoint, _ string, _ *measure.Result) {
		if tg.Addr == held {
			atHeld.Do(func() { close(r.atHeld) })
			<-r.dbDown
		}
		if f := more[tg.Addr]; f != nil {
			f()
		}
	}
	go func() {
		sum, err := campaign.Run(ctx, s, cfg, targets, log)
		r.done <- roundEnd{sum, err}
	}()
	return r
}

// await waits for ch, at most limit (a hang is a failure, not a wait forever); the
// round ending first is a failure too.
func (r *outageRound) await(t *testing.T, what string, ch <-chan struct{}, limit time.Duration) {
	t.Helper()
	select {
	case <-ch:
	case end := <-r.done:
		t.Fatalf("round ended (%v) while waiting for %s", end.err, what)
	case <-time.After(limit):
		t.Fatalf("no %s within %v", what, limit)
	}
}

// stopDBAtHeld waits for two resolvers stored and the held resolver measured, stops
// the database, and lets the held resolver go on.
func (r *outageRound) stopDBAtHeld(t *testing.T, ctx context.Context, cluster *pgcluster.Cluster) {
	t.Helper()
	r.await(t, "two resolvers stored", r.storedTwo, 2*time.Minute)
	r.await(t, "the held resolver", r.atHeld, 2*time.Minute)
	if err := cluster.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	close(r.dbDown)
}

// TestDatabaseOutageMidRoundLosesNothing stops the test's own PostgreSQL for 20 s in the
// middle of a round (two resolvers stored, eight measured during the outage: three wait
// in memory, the rest in a spill file; two after it) and compares the stored rows with
// an uninterrupted round of the same targets: every table's keys equal, none lost,
// none twice, the round ends ok. One worker
// measures the resolvers in order; the OnResult hook holds the third resolver until
// the server is down and the eleventh until it is back, so the phases do not depend
// on timing.
func TestDatabaseOutageMidRoundLosesNothing(t *testing.T) {
	home, cluster, s, targets, addrs := outageWorld(t, 10, 12)
	ctx := context.Background()

	atEleventh, dbUp := make(chan struct{}), make(chan struct{})
	var once sync.Once
	cfg := outageConfig("outage")
	cfg.BufferResolvers = 3 // the rest of the outage's results go to a spill file
	log, waits, _ := countingLogger()
	r := startOutageRound(ctx, s, cfg, targets, log, addrs[2], map[netip.Addr]func(){
		addrs[10]: func() {
			once.Do(func() { close(atEleventh) })
			<-dbUp
		},
	})
	r.stopDBAtHeld(t, ctx, cluster)
	stopped := time.Now()
	r.await(t, "the eleventh resolver (eight measured during the outage)", atEleventh, 2*time.Minute)
	// One result waits in the channel at most: seven of the outage's resolvers were
	// handed to the writer, more than the memory holds.
	if files, _ := filepath.Glob(filepath.Join(home, "var", "spill", "*")); len(files) != 1 {
		t.Errorf("spill files during the outage: %v, want one", files)
	}
	// The outage lasts outageFor: the fault's duration, not a synchronisation.
	<-time.After(time.Until(stopped.Add(outageFor)))
	if waits.Load() < 3 {
		t.Errorf("%d 'waiting for database' lines during a %v outage, want a warning per failed write (>= 3)", waits.Load(), outageFor)
	}
	if _, _, err := cluster.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("PostgreSQL stopped for %v; %d 'waiting for database' lines", time.Since(stopped).Round(time.Millisecond), waits.Load())
	close(dbUp)
	var end roundEnd
	select {
	case end = <-r.done:
	case <-time.After(5 * time.Minute):
		t.Fatal("the round did not end within 5 minutes of the database's return")
	}
	if end.err != nil {
		t.Errorf("round after an outage shorter than the deadline: %v", end.err)
	}
	if end.sum == nil || end.sum.Measured != len(targets) {
		t.Errorf("stored %+v, want all %d resolvers", end.sum, len(targets))
	}
	var status string
	if err := s.Pool.QueryRow(ctx, `SELECT status FROM campaigns WHERE label = 'outage'`).Scan(&status); err != nil {
		t.Fatal(err)
	}
	if status != "ok" {
		t.Errorf("campaign status %q, want ok", status)
	}
	storetest.SameCampaignRows(t, s, "outage", "reference")
	if left, _ := filepath.Glob(filepath.Join(home, "var", "spill", "*")); len(left) != 0 {
		t.Errorf("spill files left after the database came back: %v", left)
	}
}

// TestDatabaseAwayPastDeadline: PostgreSQL stops after two resolvers are stored and
// stays away past --db-deadline: the round stops measuring, ends with an error that
// maps to exit code 3, and leaves what it measured in a spill file with its status
// (interrupted); the resolver in flight at the deadline is dropped (measured again on
// resume) and no further resolver starts. With the database back, the next round's
// start writes the spill file (status interrupted recorded, file gone), and resuming
// the round stores exactly what an uninterrupted round stores.
func TestDatabaseAwayPastDeadline(t *testing.T) {
	home, cluster, s, targets, addrs := outageWorld(t, 40, 8)
	spill := filepath.Join(home, "var", "spill")
	ctx := context.Background()

	log, waits, gaveUp := countingLogger()
	cfg := outageConfig("away")
	cfg.DBDeadline = 3 * time.Second
	cfg.BufferResolvers = 1
	r := startOutageRound(ctx, s, cfg, targets, log, addrs[2], map[netip.Addr]func(){
		addrs[5]: func() { <-gaveUp }, // the sixth resolver is still being measured at the deadline
	})
	r.stopDBAtHeld(t, ctx, cluster)
	var end roundEnd
	select {
	case end = <-r.done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the round did not give up within 2 minutes of a 3 s deadline")
	}
	sum, runErr := end.sum, end.err
	if !errors.Is(runErr, store.ErrUnavailable) || cli.ExitCode(runErr) != cli.ExitDatabase {
		t.Fatalf("round error %v (exit %d), want store.ErrUnavailable (exit %d)", runErr, cli.ExitCode(runErr), cli.ExitDatabase)
	}
	if waits.Load() == 0 {
		t.Errorf("no 'waiting for database' line before giving up")
	}
	files, _ := filepath.Glob(filepath.Join(spill, "*"))
	if len(files) == 0 || sum.Spilled == 0 {
		t.Fatalf("no spill file (%v) or no spilled resolvers (%d) after giving up", files, sum.Spilled)
	}
	// Resolvers 1-2 stored, then up to three more measured (spilled) while the database
	// is away: how many of them finish within the 3 s deadline is the machine's speed
	// (a loaded one finished two). The sixth is held until the round gives up, so no
	// resolver after it can have started; the ones cut short or never started are
	// measured when the round is resumed (checked below: the rows equal the reference).
	if n := sum.Measured + sum.Spilled; sum.Measured < 2 || n > 5 {
		t.Errorf("%d stored + %d spilled, want the 2 stored before the database stopped and at most 5 in all (the sixth is held)", sum.Measured, sum.Spilled)
	}
	t.Logf("gave up: %d resolvers stored, %d spilled to %v", sum.Measured, sum.Spilled, files)

	if _, _, err := cluster.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	countStored := func() (n int) {
		if err := s.Pool.QueryRow(ctx, `SELECT count(DISTINCT address) FROM measurements m JOIN campaigns c USING (campaign_id)
			WHERE c.label = 'away'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := countStored()
	// The next run's start: what the spill file holds is written, the file is removed.
	n, err := campaign.ReplaySpill(ctx, s, spill, store.RetryPolicy{Deadline: time.Minute}, logger())
	if err != nil {
		t.Fatal(err)
	}
	if n != sum.Spilled || countStored() != before+sum.Spilled {
		t.Errorf("replay wrote %d resolvers (%d -> %d stored), %d were spilled", n, before, countStored(), sum.Spilled)
	}
	var status, summary string
	if err := s.Pool.QueryRow(ctx, `SELECT status, summary::text FROM campaigns WHERE label = 'away'`).Scan(&status, &summary); err != nil {
		t.Fatal(err)
	}
	if status != "interrupted" || !strings.Contains(summary, `"resolvers_spilled"`) {
		t.Errorf("campaign status %q, summary %s: want interrupted with resolvers_spilled", status, summary)
	}
	if left, _ := filepath.Glob(filepath.Join(spill, "*")); len(left) != 0 {
		t.Errorf("spill files left after the replay: %v", left)
	}
	// A second replay finds nothing; resuming the round measures the rest.
	if n, err := campaign.ReplaySpill(ctx, s, spill, store.RetryPolicy{Deadline: time.Minute}, logger()); n != 0 || err != nil {
		t.Errorf("second replay: %d, %v", n, err)
	}
	rest, err := campaign.Run(ctx, s, outageConfig("away"), targets, logger())
	if err != nil {
		t.Fatal(err)
	}
	if rest.Skipped != before+sum.Spilled || rest.Skipped+rest.Measured != len(targets) {
		t.Errorf("resumed round skipped %d and measured %d of %d", rest.Skipped, rest.Measured, len(targets))
	}
	storetest.SameCampaignRows(t, s, "away", "reference")
}

// TestDBDeadlineFlag: --db-deadline must be 1s..24h.
func TestDBDeadlineFlag(t *testing.T) {
	opts := func(d time.Duration) campaign.Options {
		o := campaign.Options{Protocols: "doudp", Modes: "fresh", KeyShares: "x25519", Variants: "GET", DBDeadline: d}
		o.VantageID, o.Name, o.RTTSamples, o.Concurrency, o.Timeout, o.Persistent = "v", "test.com", 1, 4, 2*time.Second, 5
		return o
	}
	for _, d := range []time.Duration{0, -time.Second, time.Millisecond, 25 * time.Hour} {
		o := opts(d)
		if err := o.Parse(); cli.ExitCode(err) != cli.ExitUsage {
			t.Errorf("--db-deadline %v: %v, want a usage error", d, err)
		}
	}
	o := opts(time.Minute)
	if err := o.Parse(); err != nil {
		t.Errorf("--db-deadline 1m: %v", err)
	}
}
