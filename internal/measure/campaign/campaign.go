// Package campaign runs one hourly measurement round: for every resolver and
// every (protocol, port, variant, mode, key share) a cache-warming exchange and the
// measured exchange, each on a new session; then per-transport RTT samples, a handshake
// analysis of every QUIC connection and per-resolver support checks. Rows are written in
// small transactions as resolvers complete, by a writer that retries while the database
// is away and keeps what waits in memory, then in a spill file (sink.go, spill.go); a
// restarted round skips what is stored.
package campaign

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/netip"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/doqscan/doqscan/internal/dnsmsg"
	"github.com/doqscan/doqscan/internal/home"
	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/measure/qlogana"
	"github.com/doqscan/doqscan/internal/measure/rtt"
	"github.com/doqscan/doqscan/internal/provenance"
	"github.com/doqscan/doqscan/internal/runkey"
	"github.com/doqscan/doqscan/internal/store"
)

// Phases, as in schema.sql measurements.phase.
const (
	PhaseWarmup   = "warmup"
	PhaseMeasured = "measured"
)

// Config is one campaign round.
type Config struct {
	VantageID   string
	Label       string    // "hourly"
	Hour        time.Time // the round's hour (truncated)
	RunID       *int64    // verification run the targets came from
	Protocols   []measure.Protocol
	Modes       []measure.Mode
	KeyShares   []measure.KeyShare
	DoHVariants []string
	Name        string
	Timeout     time.Duration
	Concurrency int           // resolvers measured at once
	RTTSamples  int           // samples per (transport, port)
	RTTTimeout  time.Duration // per RTT sample
	Persistent  int           // queries per session in persistent mode
	Features    bool          // run the support checks
	Spread      time.Duration // spread resolver starts over this long (0: as fast as possible)
	BatchSize   int           // resolvers per write transaction
	Progress    time.Duration // progress log interval
	// VantageLocation and VantageContact describe the vantage point in the round's
	// provenance (Rounds also stores them in vantage_points).
	VantageLocation, VantageContact string
	// OnFlush, if set, is called (from the writer's goroutine) after every batch
	// written with the resolvers stored so far in this run (tests use it to interrupt
	// a round mid-way).
	OnFlush func(stored int)
	// DBDeadline is how long the database may stay unavailable before the round gives
	// up (status interrupted, error wrapping store.ErrUnavailable: exit code 3); until
	// then writes are retried and results wait in memory and in a spill file.
	DBDeadline time.Duration
	// BufferResolvers bounds the resolvers whose results wait in memory for the
	// database; more go to a spill file in SpillDir.
	BufferResolvers int
	// SpillDir holds spill files (default var/spill of the project home,
	// home.Dir). Every round first writes the spill files it finds there.
	SpillDir string
	// OnResult, if set, is called (from the resolver's goroutine: concurrently) with
	// every exchange's result before it is stored (the testbed benchmarks check the
	// results' stamps against a packet capture).
	OnResult func(t Target, ep Endpoint, phase string, res *measure.Result)
	// OnResolver, if set, is called (from the resolver's goroutine: concurrently) with
	// every resolver's record once it is measured whole, before it is stored: the
	// command prints them (Printer).
	OnResolver func(Record)
	// Clock, if set, replaces the wall clock in Spread's schedule (slot times, the wait
	// for a slot, late starts): tests use it to make the schedule deterministic.
	Clock Clock
}

// Clock is the time source of a spread round's schedule.
type Clock interface {
	Now() time.Time
	// WaitUntil returns at t (at once if t is past) or with ctx's error.
	WaitUntil(ctx context.Context, t time.Time) error
}

// wallClock is the real time.
type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

func (wallClock) WaitUntil(ctx context.Context, t time.Time) error {
	w := time.Until(t)
	if w <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(w)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *Config) defaults() {
	c.Label = cmp.Or(c.Label, "hourly")
	if c.Clock == nil {
		c.Clock = wallClock{}
	}
	if len(c.Protocols) == 0 {
		c.Protocols = measure.Protocols
	}
	if len(c.Modes) == 0 {
		c.Modes = []measure.Mode{measure.ModeFresh}
	}
	if len(c.KeyShares) == 0 {
		c.KeyShares = []measure.KeyShare{measure.KeyShareX25519}
	}
	if len(c.DoHVariants) == 0 {
		c.DoHVariants = []string{measure.VariantGET, measure.VariantPOST}
	}
	c.Name = cmp.Or(c.Name, dnsmsg.DefaultQueryName)
	c.Timeout = cmp.Or(c.Timeout, measure.DefaultTimeout)
	c.Concurrency = cmp.Or(c.Concurrency, 64)
	c.RTTSamples = cmp.Or(c.RTTSamples, rtt.DefaultSamples)
	c.RTTTimeout = cmp.Or(c.RTTTimeout, rtt.DefaultTimeout)
	c.Persistent = cmp.Or(c.Persistent, 5)
	c.BatchSize = cmp.Or(c.BatchSize, 16)
	c.Progress = cmp.Or(c.Progress, 10*time.Second)
	if c.DBDeadline <= 0 {
		c.DBDeadline = DefaultDBDeadline
	}
	if c.BufferResolvers <= 0 {
		c.BufferResolvers = 256
	}
	if c.SpillDir == "" {
		c.SpillDir = filepath.Join(home.Dir(), "var", "spill")
	}
}

// DefaultDBDeadline is how long a round waits for an unavailable database by default.
const DefaultDBDeadline = 10 * time.Minute

// Summary is what a round did (also stored in campaigns.summary).
type Summary struct {
	CampaignID   int64                     `json:"campaign_id"`
	Planned      int                       `json:"planned"`
	Skipped      int                       `json:"skipped_already_stored"`
	Measured     int                       `json:"resolvers_measured"`
	Rows         int64                     `json:"measurement_rows"`
	RTTSamples   int64                     `json:"rtt_samples"`
	Analyses     int64                     `json:"handshake_analyses"`
	Features     int64                     `json:"feature_rows"`
	Status       map[string]map[string]int `json:"status"` // protocol -> status -> measured count
	Causes       map[string]int            `json:"doq_causes"`
	DurationSecs float64                   `json:"duration_s"`
	// LateStarts counts the resolvers of a spread round (Config.Spread) that started
	// more than one slot after their scheduled time because every worker was busy: the
	// round is behind its schedule and --concurrency is too low for the resolvers'
	// duration (docs/measure.md, sizing). MaxStartLagSecs is the largest delay.
	LateStarts      int64   `json:"late_starts,omitempty"`
	MaxStartLagSecs float64 `json:"max_start_lag_s,omitempty"`
	// Spilled counts the resolvers whose results were left in a spill file because the
	// database stayed unavailable past the deadline (the next round stores them).
	Spilled int `json:"resolvers_spilled,omitempty"`
	// Label is the round's label (with --rerun, the new attempt's).
	Label string `json:"label"`
	// Resumed counts the resolvers the round held in part: only their units not stored
	// yet were measured (Skipped counts those it held whole).
	Resumed int `json:"resolvers_partly_stored,omitempty"`
}

// batch holds the rows of some resolvers, written together.
type batch struct {
	qlogs    []store.Qlog
	meas     []store.Measurement
	rtts     []store.RTTSample
	analyses []store.HandshakeAnalysis
	features []store.ResolverFeature
	targets  int
}

func (b *batch) add(o *batch) {
	b.qlogs = append(b.qlogs, o.qlogs...)
	b.meas = append(b.meas, o.meas...)
	b.rtts = append(b.rtts, o.rtts...)
	b.analyses = append(b.analyses, o.analyses...)
	b.features = append(b.features, o.features...)
	b.targets += o.targets
}

// Run measures targets in the campaign of cfg (created or resumed) and finishes it. A
// resolver the round already holds is measured only in the units it lacks (a unit is a
// protocol, port, DoH variant, mode and key share with its measured row stored), with
// the support checks if they were asked for and have not run; one that has every unit
// (and the checks) is skipped, and the log and the summary say so.
//
// Run takes the round's lock and stores what earlier rounds spilled, then goes in
// three steps: plan (start or resume the campaign row, read what it holds, list what is
// left to measure), measure (workers, progress, a writer that keeps results while the
// database is away) and finish (the campaign's status and summary).
func Run(ctx context.Context, s *store.Store, cfg Config, targets []Target, log *slog.Logger) (_ *Summary, retErr error) {
	targets, log, err := prepare(&cfg, targets, log)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	policy := store.RetryPolicy{Deadline: cfg.DBDeadline}
	// One run of a round at a time: a second run of the same (vantage, label, hour) ends
	// here with a *store.LockedError (exit 75) and sends nothing. If another run takes the
	// lock while this one's connection is down (a database restart), this one stops.
	ctx, release, err := s.HoldLock(ctx, LockKey(cfg.VantageID, cfg.Label, cfg.Hour), policy, log)
	if err != nil {
		return nil, err
	}
	defer func() {
		if lost := release(); lost != nil && retErr == nil {
			retErr = lost
		}
	}()
	// Results an earlier round could not store (its database stayed away) first.
	if _, err := ReplaySpill(ctx, s, cfg.SpillDir, policy, log); err != nil {
		return nil, err
	}
	cid, existed, err := startRound(ctx, s, &cfg, len(targets), policy, log)
	if err != nil {
		return nil, err
	}
	rd := &roundRun{s: s, cfg: cfg, log: log, start: start, sum: newSummary(cid, cfg.Label, len(targets)),
		r: &runner{cfg: cfg, cid: cid, hour: cfg.Hour.UTC().Truncate(time.Hour), log: log}}
	if err := rd.plan(ctx, targets, existed, policy); err != nil {
		return rd.sum, err
	}
	prober := rtt.New()
	defer prober.Close()
	rd.r.prober = prober
	out, lateStarts, maxLag := rd.measure(ctx)
	return rd.finish(ctx, out, lateStarts, maxLag)
}

// prepare fills cfg's defaults, validates it and merges the targets' duplicates; a nil
// log discards.
func prepare(cfg *Config, targets []Target, log *slog.Logger) ([]Target, *slog.Logger, error) {
	cfg.defaults()
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	targets, err := MergeTargets(targets)
	if err != nil {
		return nil, nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return targets, log, nil
}

// startRound creates the round's campaign row, or finds the one an earlier run of the
// round created (existed), and returns its id.
func startRound(ctx context.Context, s *store.Store, cfg *Config, planned int, policy store.RetryPolicy, log *slog.Logger) (cid int64, existed bool, err error) {
	confJSON, _ := json.Marshal(map[string]any{
		"protocols": cfg.Protocols, "modes": cfg.Modes, "key_shares": cfg.KeyShares, "doh_variants": cfg.DoHVariants,
		"name": cfg.Name, "timeout_ms": cfg.Timeout.Milliseconds(), "concurrency": cfg.Concurrency,
		"rtt_samples": cfg.RTTSamples, "persistent_queries": cfg.Persistent, "features": cfg.Features,
	})
	prov := provenance.New("measure", provenance.Vantage{ID: cfg.VantageID, Location: cfg.VantageLocation, Contact: cfg.VantageContact}).JSON()
	n := int32(planned)
	err = store.Retry(ctx, policy, log, "start the round", func(ctx context.Context) (err error) {
		cid, existed, err = s.StartCampaign(ctx, store.Campaign{VantageID: cfg.VantageID, Label: cfg.Label,
			RoundHour: cfg.Hour, RunID: cfg.RunID, Config: confJSON, Planned: &n, Provenance: prov})
		return err
	})
	return cid, existed, err
}

// roundRun is one run of a campaign round with a database, between its plan and its finish.
type roundRun struct {
	s     *store.Store
	cfg   Config
	log   *slog.Logger
	start time.Time
	r     *runner
	todo  []job // the resolvers left to measure, with what the round holds of each
	// sum is the round's summary; sumMu guards its stored counters while the sink's
	// goroutine writes them.
	sum   *Summary
	sumMu sync.Mutex
}

// plan reads what the round holds and lists the resolvers left to measure (rd.todo),
// counting those held whole (skipped) and in part (resumed), and logs the plan.
func (rd *roundRun) plan(ctx context.Context, targets []Target, existed bool, policy store.RetryPolicy) error {
	cfg, log, sum, cid := rd.cfg, rd.log, rd.sum, rd.sum.CampaignID
	var done map[netip.Addr]*stored
	err := store.Retry(ctx, policy, log, "read what the round stored", func(ctx context.Context) (err error) {
		done, err = storedRound(ctx, rd.s, cid)
		return err
	})
	if err != nil {
		return err
	}
	for _, t := range targets {
		j := job{t: t, done: done[t.Addr]}
		switch {
		case j.done == nil:
		case rd.r.complete(j):
			sum.Skipped++
			continue
		default:
			sum.Resumed++
		}
		rd.todo = append(rd.todo, j)
	}
	log.Info("campaign round", "campaign", cid, "hour", cfg.Hour.UTC().Format(time.RFC3339), "resumed", existed,
		"planned", len(targets), "already_stored", sum.Skipped, "partly_stored", sum.Resumed, "to_measure", len(rd.todo),
		"concurrency", cfg.Concurrency)
	if sum.Skipped > 0 {
		lv := slog.LevelInfo
		if len(rd.todo) == 0 {
			lv = slog.LevelWarn
		}
		log.Log(ctx, lv, "resolvers the round holds with every unit asked for are not measured again; to measure them again: --rerun (a new attempt) or another --label",
			"skipped", sum.Skipped, "campaign", cid, "vantage", cfg.VantageID, "label", cfg.Label, "hour", cfg.Hour.UTC().Format(time.RFC3339))
	}
	if sum.Resumed > 0 {
		log.Info("resolvers the round holds in part: only the units not stored yet are measured (protocol, port, variant, mode, key share), RTTs not probed again",
			"partly_stored", sum.Resumed, "campaign", cid)
	}
	return nil
}

// measure measures rd.todo and hands every cfg.BatchSize resolvers measured to the
// sink, which stores them (or keeps them while the database is away). Measuring stops
// when ctx ends or when the database stays away past the deadline (the sink gives up);
// what is measured by then is in the sink, which measure returns open.
func (rd *roundRun) measure(ctx context.Context) (out *sink, lateStarts int64, maxLag time.Duration) {
	cfg, cid := rd.cfg, rd.sum.CampaignID
	mctx, stopMeasuring := context.WithCancel(ctx)
	defer stopMeasuring()
	gaveUp := func(err error) {
		stopMeasuring()
		rd.log.Error("round stopped: its results cannot be stored", "campaign", cid, "err", err)
	}
	out = newSink(ctx, rd.s, &rd.cfg, spillCampaign{CampaignID: cid, VantageID: cfg.VantageID, Label: cfg.Label,
		RoundHour: cfg.Hour.UTC().Truncate(time.Hour)}, rd.log, rd.stored, gaveUp)

	var pending batch
	flush := func() {
		if pending.targets == 0 {
			return
		}
		b := pending
		out.put(&b)
		pending = batch{}
	}
	lateStarts, maxLag = rd.r.measureAll(mctx, rd.todo, func(b *resolverResult) {
		for _, a := range b.batch.analyses {
			rd.sum.Causes[a.Cause]++
		}
		pending.add(&b.batch)
		if pending.targets >= cfg.BatchSize {
			flush()
		}
	}, func(lateStarts int64) {
		flush()
		rd.progress(out, lateStarts)
	})
	flush()
	return out, lateStarts, maxLag
}

// stored counts a batch the sink stored (called from the sink's goroutine).
func (rd *roundRun) stored(b *batch) {
	rd.sumMu.Lock()
	rd.sum.count(b)
	n := rd.sum.Measured
	rd.sumMu.Unlock()
	if rd.cfg.OnFlush != nil {
		rd.cfg.OnFlush(n)
	}
}

// progress logs how far the round is.
func (rd *roundRun) progress(out *sink, lateStarts int64) {
	sum := rd.sum
	rd.sumMu.Lock()
	args := []any{"campaign", sum.CampaignID, "done", sum.Measured + sum.Skipped, "planned", sum.Planned,
		"rows", sum.Rows, "elapsed", time.Since(rd.start).Round(time.Second)}
	rd.sumMu.Unlock()
	if mem, spilled := out.pending(); mem+spilled > 0 {
		args = append(args, "buffered_resolvers", mem, "spilled_resolvers", spilled)
	}
	if rd.cfg.Spread > 0 {
		args = append(args, "late_starts", lateStarts)
	}
	rd.log.Info("progress", args...)
}

// finish waits for the sink to store (or spill) what was measured, sets the campaign's
// status and summary, and returns the summary with the round's error.
func (rd *roundRun) finish(ctx context.Context, out *sink, lateStarts int64, maxLag time.Duration) (*Summary, error) {
	sum := rd.sum
	writeErr := out.close()
	sum.DurationSecs = time.Since(rd.start).Seconds()
	sum.lateStarts(lateStarts, maxLag, rd.cfg, rd.log)
	// A database that stayed away, or a stop: interrupted (the round resumes once it is
	// back); another write error: failed.
	status := store.RunStatusOf(ctx, errors.Join(writeErr, ctx.Err()))
	status, sum.Spilled, writeErr = out.finish(status, func(spilled int) []byte {
		sum.Spilled = spilled
		js, _ := json.Marshal(sum)
		return js
	})
	rd.log.Info("campaign round finished", "campaign", sum.CampaignID, "status", status, "measured", sum.Measured,
		"skipped", sum.Skipped, "rows", sum.Rows, "rtt_samples", sum.RTTSamples, "analyses", sum.Analyses,
		"spilled", sum.Spilled, "duration", time.Since(rd.start).Round(time.Millisecond))
	if writeErr != nil {
		return sum, writeErr
	}
	if ctx.Err() != nil {
		return sum, context.Cause(ctx) // the stop's cause: context.Canceled, or the lock lost
	}
	return sum, nil
}

// RunLocal measures targets as a round does, without a database: no campaign row, no
// lock, no spill file, nothing skipped; every resolver's record goes to
// cfg.OnResolver. The summary counts what was measured.
func RunLocal(ctx context.Context, cfg Config, targets []Target, log *slog.Logger) (*Summary, error) {
	targets, log, err := prepare(&cfg, targets, log)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	sum := newSummary(0, cfg.Label, len(targets))
	prober := rtt.New()
	defer prober.Close()
	r := &runner{cfg: cfg, prober: prober, log: log}
	todo := make([]job, len(targets))
	for i, t := range targets {
		todo[i] = job{t: t}
	}
	log.Info("measuring without a database", "resolvers", len(targets), "concurrency", cfg.Concurrency)
	lateStarts, maxLag := r.measureAll(ctx, todo, func(b *resolverResult) {
		for _, a := range b.batch.analyses {
			sum.Causes[a.Cause]++
		}
		sum.count(&b.batch)
	}, func(lateStarts int64) {
		log.Info("progress", "done", sum.Measured, "planned", sum.Planned, "elapsed", time.Since(start).Round(time.Second))
	})
	sum.DurationSecs = time.Since(start).Seconds()
	sum.lateStarts(lateStarts, maxLag, cfg, log)
	return sum, context.Cause(ctx)
}

func newSummary(cid int64, label string, planned int) *Summary {
	return &Summary{CampaignID: cid, Label: label, Planned: planned, Status: map[string]map[string]int{}, Causes: map[string]int{}}
}

// count adds a stored (or, without a database, measured) batch to the summary.
func (sum *Summary) count(b *batch) {
	sum.Rows += int64(len(b.meas))
	sum.RTTSamples += int64(len(b.rtts))
	sum.Analyses += int64(len(b.analyses))
	sum.Features += int64(len(b.features))
	sum.Measured += b.targets
	for _, m := range b.meas {
		if m.Phase != PhaseMeasured {
			continue
		}
		if sum.Status[m.Protocol] == nil {
			sum.Status[m.Protocol] = map[string]int{}
		}
		sum.Status[m.Protocol][m.Status]++
	}
}

// lateStarts records a spread round's late starts, and warns about them.
func (sum *Summary) lateStarts(n int64, maxLag time.Duration, cfg Config, log *slog.Logger) {
	sum.LateStarts, sum.MaxStartLagSecs = n, maxLag.Seconds()
	if n > 0 {
		log.Warn("round fell behind its schedule: every worker was busy when resolvers were due; raise --concurrency (docs/measure.md: sizing)",
			"campaign", sum.CampaignID, "late_starts", n, "max_start_lag", maxLag.Round(time.Millisecond), "concurrency", cfg.Concurrency)
	}
}

// measureAll measures the jobs with cfg.Concurrency workers (their starts spread over
// cfg.Spread) and calls each, from the calling goroutine, with every resolver measured
// whole (cut short by the stop: dropped, a resumed round measures it again) after
// handing its record to cfg.OnResolver; tick every cfg.Progress. It returns when every
// job is done or ctx ends, with the spread schedule's late starts and largest lag.
func (r *runner) measureAll(ctx context.Context, todo []job, each func(*resolverResult), tick func(lateStarts int64)) (int64, time.Duration) {
	cfg := r.cfg
	// A worker puts a token into idle before it takes a job, so the dispatcher knows
	// when a worker is free, before it hands the resolver over.
	jobs := make(chan job)
	idle := make(chan struct{}, cfg.Concurrency)
	results := make(chan *resolverResult, cfg.Concurrency)
	var wg sync.WaitGroup
	for i := 0; i < cfg.Concurrency; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.work(ctx, idle, jobs, results)
		}()
	}
	var late lateness
	go func() {
		defer close(jobs)
		r.dispatch(ctx, todo, idle, jobs, &late)
	}()
	go func() { wg.Wait(); close(results) }()

	tk := time.NewTicker(cfg.Progress)
	defer tk.Stop()
	for {
		select {
		case b, ok := <-results:
			if !ok {
				return late.starts.Load(), time.Duration(late.maxNS.Load())
			}
			if b.interrupted {
				continue // cut short by the stop: the resumed round measures it again
			}
			each(b)
		case <-tk.C:
			tick(late.starts.Load())
		}
	}
}

// work is one worker: it measures the jobs it takes until jobs is closed, handing each
// resolver measured whole to cfg.OnResolver, and sends every result.
func (r *runner) work(ctx context.Context, idle chan<- struct{}, jobs <-chan job, results chan<- *resolverResult) {
	for {
		idle <- struct{}{}
		j, ok := <-jobs
		if !ok {
			return
		}
		res := r.resolver(ctx, j)
		if !res.interrupted && r.cfg.OnResolver != nil {
			r.cfg.OnResolver(recordOf(j.t, &res.batch))
		}
		results <- res
	}
}

// lateness counts a spread round's late starts and their largest lag.
type lateness struct {
	starts, maxNS atomic.Int64
}

// dispatch hands the jobs to free workers, each in its slot of cfg.Spread (at once
// without a spread), until every job is handed over or ctx ends.
func (r *runner) dispatch(ctx context.Context, todo []job, idle <-chan struct{}, jobs chan<- job, late *lateness) {
	cfg := r.cfg
	var step time.Duration
	if cfg.Spread > 0 && len(todo) > 0 {
		step = cfg.Spread / time.Duration(len(todo))
	}
	// The slots begin now, not at the round's start: replaying spill files and the
	// database's set-up queries are no worker's fault.
	slots := cfg.Clock.Now()
	for i, j := range todo {
		var at time.Time
		if step > 0 {
			// Spread over the round with jitter: resolver i starts in its slot.
			at = slots.Add(step*time.Duration(i) + time.Duration(rand.Int64N(int64(step)+1)))
			if cfg.Clock.WaitUntil(ctx, at) != nil {
				return
			}
		}
		select {
		case <-idle:
		case <-ctx.Done():
			return
		}
		if step > 0 {
			// Started a whole slot late: every worker was busy until now (read
			// when a worker is free, before it takes the resolver).
			if lag := cfg.Clock.Now().Sub(at); lag > step {
				late.starts.Add(1)
				if lag.Nanoseconds() > late.maxNS.Load() {
					late.maxNS.Store(lag.Nanoseconds())
				}
			}
		}
		select {
		case jobs <- j:
		case <-ctx.Done():
			return
		}
	}
}

// LockKey is the advisory lock of a round (store.RunKey): its vantage point, label and
// hour.
func LockKey(vantage, label string, hour time.Time) string {
	return store.RunKey("measure", vantage, label, runkey.Hour(hour))
}

// stored is what a round already holds of one resolver. A resolver's rows of one run
// are written in one transaction, so a unit with its measured row has all its rows.
type stored struct {
	units    map[unitKey]bool // units with their measured rows
	rtts     map[rttKey]int64 // (transport, port) probed: the median RTT, 0 without an answer
	features bool             // the support checks ran (their tfo or edns-tcp-keepalive rows)
}

// unitKey names a unit as measurements rows do.
type unitKey struct {
	protocol measure.Protocol
	port     uint16
	variant  string
	mode     measure.Mode
	ks       measure.KeyShare
}

func (u unit) key() unitKey { return unitKey{u.ep.Protocol, u.ep.Port, u.variant, u.mode, u.ks} }

// storedRound returns what the campaign holds, per resolver.
func storedRound(ctx context.Context, s *store.Store, cid int64) (map[netip.Addr]*stored, error) {
	out := map[netip.Addr]*stored{}
	get := func(a netip.Addr) *stored {
		a = a.Unmap()
		if out[a] == nil {
			out[a] = &stored{units: map[unitKey]bool{}, rtts: map[rttKey]int64{}}
		}
		return out[a]
	}
	if err := storedUnits(ctx, s, cid, get); err != nil {
		return nil, err
	}
	if err := storedRTTs(ctx, s, cid, get); err != nil {
		return nil, err
	}
	if err := storedFeatures(ctx, s, cid, get); err != nil {
		return nil, err
	}
	return out, nil
}

// storedUnits marks the units the campaign holds with their measured rows.
func storedUnits(ctx context.Context, s *store.Store, cid int64, get func(netip.Addr) *stored) error {
	rows, err := s.Pool.Query(ctx, `SELECT DISTINCT address, protocol, port, variant, mode, key_share FROM measurements
		WHERE campaign_id = $1 AND phase = 'measured'`, cid)
	if err != nil {
		return fmt.Errorf("stored measurements of campaign %d: %w", cid, err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			a                  netip.Addr
			proto, v, mode, ks string
			port               int32
		)
		if err := rows.Scan(&a, &proto, &port, &v, &mode, &ks); err != nil {
			return err
		}
		get(a).units[unitKey{measure.Protocol(proto), uint16(port), v, measure.Mode(mode), measure.KeyShare(ks)}] = true
	}
	return rows.Err()
}

// storedRTTs sets the median RTT of every (transport, port) the campaign probed (0
// without an answer).
func storedRTTs(ctx context.Context, s *store.Store, cid int64, get func(netip.Addr) *stored) error {
	rows, err := s.Pool.Query(ctx, `SELECT address, transport, port, rtt_ns FROM rtt_samples WHERE campaign_id = $1`, cid)
	if err != nil {
		return fmt.Errorf("stored RTT samples of campaign %d: %w", cid, err)
	}
	defer rows.Close()
	samples := map[netip.Addr]map[rttKey][]int64{}
	for rows.Next() {
		var (
			a  netip.Addr
			tr string
			p  int32
			ns *int64
		)
		if err := rows.Scan(&a, &tr, &p, &ns); err != nil {
			return err
		}
		a, k := a.Unmap(), rttKey{rtt.Transport(tr), uint16(p)}
		if samples[a] == nil {
			samples[a] = map[rttKey][]int64{}
		}
		if samples[a][k] == nil {
			samples[a][k] = []int64{} // probed, answered or not
		}
		if ns != nil {
			samples[a][k] = append(samples[a][k], *ns)
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for a, byKey := range samples {
		for k, ns := range byKey {
			get(a).rtts[k] = rtt.MedianNS(ns)
		}
	}
	return nil
}

// storedFeatures marks the resolvers whose support checks ran.
func storedFeatures(ctx context.Context, s *store.Store, cid int64, get func(netip.Addr) *stored) error {
	rows, err := s.Pool.Query(ctx, `SELECT DISTINCT address FROM resolver_features WHERE campaign_id = $1 AND feature = ANY($2)`,
		cid, []string{FeatureTFO, FeatureTCPKeepalive})
	if err != nil {
		return fmt.Errorf("stored support checks of campaign %d: %w", cid, err)
	}
	defer rows.Close()
	for rows.Next() {
		var a netip.Addr
		if err := rows.Scan(&a); err != nil {
			return err
		}
		get(a).features = true
	}
	return rows.Err()
}

// write stores a batch in one transaction, parents first.
func write(ctx context.Context, s *store.Store, b *batch) error {
	return pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		if _, err := store.InsertTx(ctx, tx, store.TableQlogs, b.qlogs); err != nil {
			return err
		}
		if _, err := store.InsertTx(ctx, tx, store.TableMeasurements, b.meas); err != nil {
			return err
		}
		if _, err := store.InsertTx(ctx, tx, store.TableRTTSamples, b.rtts); err != nil {
			return err
		}
		if _, err := store.InsertTx(ctx, tx, store.TableHandshakeAnalyses, b.analyses); err != nil {
			return err
		}
		_, err := store.InsertTx(ctx, tx, store.TableResolverFeatures, b.features)
		return err
	})
}

// resolverResult is one resolver's rows, or interrupted: the round was stopped before
// the resolver was measured completely, and none of its rows are kept.
type resolverResult struct {
	batch       batch
	interrupted bool
}

type runner struct {
	cfg    Config
	cid    int64
	hour   time.Time // the campaign's round_hour: the partition key of its rows
	prober *rtt.Prober
	log    *slog.Logger
}

// job is one resolver to measure and what the round holds of it already (nil: nothing).
type job struct {
	t    Target
	done *stored
}

// complete says whether the round holds every unit of j asked for, and the support
// checks if they are asked for: nothing is left to measure.
func (r *runner) complete(j job) bool {
	if j.done == nil || (r.cfg.Features && !j.done.features) {
		return false
	}
	for _, u := range r.units(j.t) {
		if !j.done.units[u.key()] {
			return false
		}
	}
	return true
}

// unit is one (endpoint, variant, mode, key share).
type unit struct {
	ep      Endpoint
	variant string
	mode    measure.Mode
	ks      measure.KeyShare
}

func (r *runner) units(t Target) []unit {
	want := map[measure.Protocol]bool{}
	for _, p := range r.cfg.Protocols {
		want[p] = true
	}
	var out []unit
	for _, ep := range t.Endpoints {
		if !want[ep.Protocol] {
			continue
		}
		spec := ep.Protocol.Spec()
		variants := []string{""}
		if len(spec.Variants) > 0 {
			variants = r.cfg.DoHVariants
		}
		for _, v := range variants {
			for _, m := range r.cfg.Modes {
				if !spec.HasMode(string(m)) {
					continue // e.g. no TLS, nothing to resume; DoUDP: no session to persist
				}
				keyShares := []measure.KeyShare{""}
				if spec.TLS {
					keyShares = r.cfg.KeyShares
				}
				for _, ks := range keyShares {
					out = append(out, unit{ep, v, m, ks})
				}
			}
		}
	}
	return out
}

// featureKey is a resolver_features row of one resolver.
type featureKey struct {
	p    measure.Protocol
	port uint16
	name string
}

type rttKey struct {
	t    rtt.Transport
	port uint16
}

// resolver measures one resolver: every unit (warm-up then measured) the round does not
// hold yet (j.done), RTT per (transport, port) after its first success unless the round
// holds its samples, analyses and features.
func (r *runner) resolver(ctx context.Context, j job) (out *resolverResult) {
	t := j.t
	out = &resolverResult{}
	defer r.recoverResolver(t, out)
	st := newResolverRun(j, &out.batch)
	for _, u := range r.units(t) {
		if j.done != nil && j.done.units[u.key()] {
			continue // stored by an earlier run of the round
		}
		if ctx.Err() != nil {
			out.interrupted = true
			return out
		}
		warm, meas := r.exchange(ctx, t, u)
		if ctx.Err() != nil {
			out.interrupted = true
			return out
		}
		r.keepExchange(st, u, PhaseWarmup, warm)
		r.keepExchange(st, u, PhaseMeasured, meas)
		r.probeRTT(ctx, st, u, meas)
		st.observe(u, warm, meas)
	}
	st.analyze()
	if r.cfg.Features && (j.done == nil || !j.done.features) {
		r.checkFeatures(ctx, t, st.setFeature)
	}
	// A resolver is stored whole or not at all. If the round was stopped while it was
	// measured (a signal, the database away past the deadline), something was cut short:
	// an RTT probe's remaining samples come back as timeouts or not at all, a support
	// check is left out. None of it is kept; the resumed round measures the resolver again.
	if ctx.Err() != nil {
		out.interrupted = true
		return out
	}
	st.featureRows(r.cid)
	return out
}

// resolverRun is what the measurement of one resolver has gathered so far.
type resolverRun struct {
	t        Target
	b        *batch
	rtts     map[rttKey]int64 // median RTT ns, 0: none
	quicRows []quicRow
	feat     map[featureKey]observation
}

// quicRow is a QUIC measurement whose handshake is explained once the path's RTT is known.
type quicRow struct {
	m     store.Measurement
	qa    *qlogana.Analysis
	trace *qlogana.Trace
	tk    rttKey
	wall  time.Duration
}

func newResolverRun(j job, b *batch) *resolverRun {
	b.targets = 1
	st := &resolverRun{t: j.t, b: b, rtts: map[rttKey]int64{}, feat: map[featureKey]observation{}}
	if j.done != nil {
		maps.Copy(st.rtts, j.done.rtts) // probed by an earlier run of the round: not again
	}
	return st
}

// setFeature records a support observation (a featureSetter).
func (st *resolverRun) setFeature(p measure.Protocol, port uint16, name string, o observation) {
	k := featureKey{p, port, name}
	if f, ok := st.feat[k]; ok && f.rank() >= o.rank() {
		return // supported wins over unsupported, which wins over unknown; else the first
	}
	st.feat[k] = o
}

// exchange measures unit u of t: a cache-warming exchange, then the measured one, each
// on a new session.
func (r *runner) exchange(ctx context.Context, t Target, u unit) (warm, meas *measure.Result) {
	m, _ := measure.For(u.ep.Protocol)
	peer := measure.NewPeer()
	base := measure.Request{
		Addr: netip.AddrPortFrom(t.Addr, u.ep.Port), ServerName: t.ServerName, Name: r.cfg.Name,
		Timeout: r.cfg.Timeout, Mode: u.mode, KeyShare: u.ks, Variant: u.variant, Peer: peer,
	}
	if u.ep.ALPN != "" {
		base.ALPN = []string{u.ep.ALPN}
	}
	warmReq := base
	warmReq.Queries = 1
	if u.mode == measure.ModePersistent || u.mode == measure.Mode0RTT {
		warmReq.Mode = measure.ModeFresh
		if u.mode == measure.Mode0RTT {
			warmReq.Mode = measure.ModeResumed // obtain the ticket
		}
	}
	warm = m.Measure(ctx, &warmReq)
	measReq := base
	measReq.Queries = r.cfg.Persistent
	meas = m.Measure(ctx, &measReq)
	return warm, meas
}

// keepExchange adds an exchange's rows and qlog to the resolver's batch, and its
// handshake to those to explain.
func (r *runner) keepExchange(st *resolverRun, u unit, phase string, res *measure.Result) {
	if r.cfg.OnResult != nil {
		r.cfg.OnResult(st.t, u.ep, phase, res)
	}
	rows, ql := r.rows(st.t, u, phase, res)
	if ql != nil {
		st.b.qlogs = append(st.b.qlogs, *ql)
	}
	st.b.meas = append(st.b.meas, rows...)
	if len(res.Qlog) > 0 && len(rows) > 0 {
		// Only completed handshakes are explained (a failed one has no time); one
		// whose qlog was cut before it completed gets cause unknown, marked
		// qlog_truncated.
		a := res.QlogAnalysis
		if a != nil && (a.HandshakeNS > 0 || a.Truncated) && rows[0].HandshakeNS != nil {
			st.quicRows = append(st.quicRows, quicRow{m: rows[0], qa: a, trace: res.QlogTrace, tk: rttKey{u.ep.Protocol.Transport(), u.ep.Port}, wall: res.HandshakeWall})
		}
	}
}

// probeRTT samples the RTT of u's (transport, port) after a successful measurement,
// once per (transport, port).
func (r *runner) probeRTT(ctx context.Context, st *resolverRun, u unit, meas *measure.Result) {
	tk := rttKey{u.ep.Protocol.Transport(), u.ep.Port}
	if _, ok := st.rtts[tk]; ok || meas.Status != measure.StatusOK {
		return
	}
	t := st.t
	samples := r.prober.Probe(ctx, tk.t, netip.AddrPortFrom(t.Addr, u.ep.Port), r.cfg.RTTSamples, r.rttTimeout(meas))
	var ok []int64
	for _, s := range samples {
		row := store.RTTSample{CampaignID: r.cid, Address: t.Addr, Transport: string(tk.t), Port: int32(u.ep.Port),
			Seq: int16(s.Seq), SentAt: s.SentAt, Status: string(s.Status), Detail: s.Detail, RoundHour: r.hour}
		if s.Answered() {
			ns := s.RTT.Nanoseconds()
			row.RTTNS = &ns
			ok = append(ok, ns)
		}
		st.b.rtts = append(st.b.rtts, row)
	}
	st.rtts[tk] = rtt.MedianNS(ok)
}

// observe records the support observations of u's regular exchanges (each unknown
// unless the exchanges got far enough to show it).
func (st *resolverRun) observe(u unit, warm, meas *measure.Result) {
	if u.ep.Protocol == measure.DoQ && u.mode == measure.ModeFresh {
		st.setFeature(measure.DoQ, u.ep.Port, FeatureNewToken, newTokenShown(warm))
		st.setFeature(measure.DoQ, u.ep.Port, FeatureRetry, retryShown(warm))
	}
	if u.mode == measure.ModeResumed {
		st.setFeature(u.ep.Protocol, u.ep.Port, FeatureSessionTicket, ticketShown(warm, meas))
	}
	// A POST is never early data (not safe to replay): only GETs show 0-RTT.
	if u.mode == measure.Mode0RTT && u.ep.Protocol.Spec().EarlyData && u.variant != measure.VariantPOST {
		st.setFeature(u.ep.Protocol, u.ep.Port, Feature0RTT, zeroRTTShown(warm, meas))
	}
}

// analyze adds the handshake analysis of every QUIC measurement kept.
func (st *resolverRun) analyze() {
	for _, q := range st.quicRows {
		// With an RTT sample of the path, explain the handshake against it rather than
		// against the qlog's own RTT.
		q.qa = q.trace.AgainstPathRTT(q.qa, st.rtts[q.tk])
		st.b.analyses = append(st.b.analyses, analysisRow(q.m, q.qa, st.rtts[q.tk], q.wall))
	}
}

// featureRows adds the resolver_features rows of the observations, in a stable order.
func (st *resolverRun) featureRows(cid int64) {
	b := st.b
	for k, o := range st.feat {
		b.features = append(b.features, store.ResolverFeature{CampaignID: cid, Address: st.t.Addr, Protocol: string(k.p),
			Port: int32(k.port), Feature: k.name, Supported: o.Supported, Detail: o.Detail})
	}
	sort.Slice(b.features, func(i, j int) bool {
		x, y := b.features[i], b.features[j]
		return cmp.Or(cmp.Compare(x.Protocol, y.Protocol), cmp.Compare(x.Port, y.Port), cmp.Compare(x.Feature, y.Feature)) < 0
	})
}

// rttTimeout bounds an RTT sample's wait by the resolve time just measured on the same
// port (rtt.TimeoutAfter).
func (r *runner) rttTimeout(meas *measure.Result) time.Duration {
	return rtt.TimeoutAfter(meas.First().Resolve, r.cfg.RTTTimeout)
}

// gzipPool reuses compressors: a gzip.Writer allocates ~800 KB of state.
var gzipPool = sync.Pool{New: func() any {
	zw, _ := gzip.NewWriterLevel(nil, gzip.BestSpeed)
	return zw
}}

// rows converts an exchange into measurement rows (one per query) and its qlog row.
func (r *runner) rows(t Target, u unit, phase string, res *measure.Result) ([]store.Measurement, *store.Qlog) {
	key := store.MeasurementKey{CampaignID: r.cid, Address: t.Addr, Protocol: string(u.ep.Protocol), Port: int32(u.ep.Port),
		Variant: u.variant, Mode: string(u.mode), KeyShare: string(u.ks), Phase: phase}
	var ql *store.Qlog
	var qlID *[16]byte
	if len(res.Qlog) > 0 {
		var buf bytes.Buffer
		zw := gzipPool.Get().(*gzip.Writer)
		zw.Reset(&buf)
		_, _ = zw.Write(res.Qlog)
		_ = zw.Close()
		gzipPool.Put(zw)
		id := key.QlogID()
		qlID = &id
		ql = &store.Qlog{QlogID: id, CampaignID: r.cid, Address: t.Addr, Port: int32(u.ep.Port), ODCID: res.ODCID, Encoding: "gzip",
			Format: "sqlog", RawSize: int32(len(res.Qlog)), Data: buf.Bytes(), CreatedAt: time.Now(), Truncated: res.QlogTruncated,
			RoundHour: r.hour}
	}
	queries := res.Queries
	if len(queries) == 0 {
		queries = []measure.Query{{Status: res.Status, Err: res.Err, StartedAt: res.StartedAt}}
	}
	var out []store.Measurement
	for i, q := range queries {
		k := key
		k.Seq = int16(i)
		m := store.Measurement{
			MeasurementID: k.ID(), CampaignID: r.cid, Address: t.Addr, Protocol: k.Protocol, Port: k.Port,
			Variant: k.Variant, Mode: k.Mode, KeyShare: k.KeyShare, Phase: phase, Seq: k.Seq,
			StartedAt: res.StartedAt, Status: string(q.Status), QlogID: qlID,
			TokenReceived: res.TokenReceived, TokenUsed: res.TokenUsed, RetrySeen: res.RetrySeen, VNSeen: res.VNSeen,
			Resumed: res.Resumed, Used0RTT: res.Used0RTT, TFO: res.TFO, RoundHour: r.hour,
		}
		if m.StartedAt.IsZero() {
			m.StartedAt = q.StartedAt
		}
		if q.Err != nil {
			m.Error = q.Err.Error()
		}
		if i == 0 && res.HasHandshake {
			hs := res.Handshake.Nanoseconds()
			m.HandshakeNS = &hs
		}
		if q.Status == measure.StatusOK {
			ns := q.Resolve.Nanoseconds()
			rc := int16(q.Rcode)
			m.ResolveNS, m.Rcode = &ns, &rc
			m.Answers = q.Answers
			if m.Answers == nil {
				m.Answers = []string{}
			}
		}
		if res.TLSVersion != 0 {
			v := int32(res.TLSVersion)
			m.TLSVersion = &v
			c := res.TLSCipher
			m.TLSCipher = &c
		}
		if res.QUICVersion != 0 {
			v := int64(res.QUICVersion)
			m.QUICVersion = &v
		}
		if res.ALPN != "" {
			a := res.ALPN
			m.ALPN = &a
		}
		out = append(out, m)
	}
	return out, ql
}

// analysisRow is the handshake_analyses row of a QUIC measurement.
func analysisRow(m store.Measurement, a *qlogana.Analysis, rttNS int64, wall time.Duration) store.HandshakeAnalysis {
	h := store.HandshakeAnalysis{
		MeasurementID: m.MeasurementID, OneRTT: a.OneRTT, VersionNegotiation: a.VersionNegotiation, Retry: a.Retry,
		AmplificationStall: a.AmplificationStall, Loss: a.Loss, Cause: a.Cause, RoundHour: m.RoundHour,
	}
	if rttNS > 0 {
		h.RTTNS = &rttNS
		if m.HandshakeNS != nil {
			r := float32(float64(*m.HandshakeNS) / float64(rttNS))
			h.Ratio = &r
		}
	}
	rt := int16(a.RoundTrips)
	h.RoundTrips = &rt
	ci, sp := int32(a.ClientInitialBytes), int32(a.ServerBytesPreAck)
	h.ClientInitialBytes, h.ServerBytesPreAck = &ci, &sp
	if a.AmplificationStall {
		st := a.StallNS
		h.StallNS = &st
	}
	detail, _ := json.Marshal(map[string]any{
		"handshake_qlog_ns": a.HandshakeNS, "handshake_wall_ns": wall.Nanoseconds(), "analysis_rtt_ns": a.RTTNS, "flights": a.Flights,
		"retransmissions": a.Retransmissions, "lost_packets": a.LostPackets, "token_received": a.TokenReceived,
		"qlog_truncated": a.Truncated,
	})
	h.Detail = detail
	return h
}
