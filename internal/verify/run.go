package verify

import (
	"cmp"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"runtime/debug"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/doqscan/doqscan/blocklist"
	"github.com/doqscan/doqscan/internal/certs"
	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/geo"
	"github.com/doqscan/doqscan/internal/labnet"
	"github.com/doqscan/doqscan/internal/provenance"
	"github.com/doqscan/doqscan/internal/quicver"
	"github.com/doqscan/doqscan/internal/runkey"
	"github.com/doqscan/doqscan/internal/store"
)

// RunConfig is everything a verification run needs besides the store.
type RunConfig struct {
	Verify      Config
	Vantage     string // vantage point id of this run
	Label       string // run label; default "weekly"
	Week        string // ISO week of the run; default: the scan's week, or this week
	Scan        ScanSelection
	TargetsFile string // use these targets instead of a scan ("-" = stdin)
	// Targets are TargetsFile's targets when they were read already (Command reads the
	// file before it opens the database); nil: Run reads the file.
	Targets     []Target
	Ports       []int32
	Concurrency int     // parallel targets; default 256
	Rate        float64 // new targets per second; 0 = unlimited
	CityDB      string  // GeoIP City mmdb (with ASNDB; both or none)
	ASNDB       string
	BatchSize   int           // results per database write; default 500
	Progress    time.Duration // progress log interval; default 10 s
	// RetryTimeouts verifies targets whose outcome was a timeout once more, after the
	// others, at an eighth of the concurrency.
	RetryTimeouts bool
	// BlocklistDir holds the operator's blocklist *.conf files ("": none). Targets in
	// them, in an accepted opt-out or in a reserved range outside the lab space are
	// never contacted (see blocklist.ForContact).
	BlocklistDir string
	// VantageLocation and VantageContact describe the vantage point (vantage_points and
	// the run's provenance); "" keeps what the database has.
	VantageLocation, VantageContact string
	// Rerun verifies a run the database holds again, as a new attempt: a run of its own
	// under the label Label-r2, -r3, ... (store.AttemptLabel), instead of only the
	// targets it lacks.
	Rerun bool
	// OnResult, if set, gets every target's result of this invocation as it is made
	// (from one goroutine), with its location when GeoIP databases are given: the
	// command prints them (Printer).
	OnResult func(Record)
	// NoDDR skips DDR discovery: by default every DNS/53 responder of the scan (and of
	// DDRTargetsFile) is asked for _dns.resolver.arpa SVCB (RFC 9462), the answers are
	// stored (ddr_queries, ddr_designations) and the designated DoQ endpoints are
	// verified in the same run, whatever their port.
	NoDDR bool
	// DDRTargetsFile lists DNS resolvers to ask as well (addr per line, '#' comments;
	// "": none), e.g. with TargetsFile.
	DDRTargetsFile string
}

// Defaults of a run.
const (
	DefaultConcurrency = 256
	DefaultBatchSize   = 500
	DefaultProgress    = 10 * time.Second
)

// Limits of a run's settings (the flags' ranges), checked by Validate.
const (
	MaxConcurrency = 10000
	MaxRate        = 1e6 // new targets per second
	MaxBatchSize   = 100000
	MinProgress    = 100 * time.Millisecond
	MaxProgress    = time.Hour
)

// Validate checks every setting against its range (--concurrency 1..MaxConcurrency,
// --rate 0..MaxRate, --batch 1..MaxBatchSize, --progress MinProgress..MaxProgress,
// --ports 1..65535, the per-target settings of Config.Validate) and the combinations.
// Zero values are not accepted: Run fills them with the defaults first, the command
// checks the flags as given. Errors are usage errors naming the flag (exit code 2).
func (c *RunConfig) Validate() error {
	if err := cli.FirstError(
		cli.InRange("concurrency", c.Concurrency, 1, MaxConcurrency),
		cli.InRange("rate", c.Rate, 0, MaxRate),
		cli.InRange("batch", c.BatchSize, 1, MaxBatchSize),
		cli.InRange("progress", c.Progress, MinProgress, MaxProgress),
	); err != nil {
		return err
	}
	for _, p := range c.Ports {
		if err := cli.InRange("ports", p, 1, 65535); err != nil {
			return err
		}
	}
	if (c.CityDB == "") != (c.ASNDB == "") {
		return cli.Usagef("give both --geoip-city and --geoip-asn, or neither")
	}
	if c.Vantage == "" {
		return cli.Usagef("--vantage must not be empty")
	}
	return c.Verify.Validate()
}

func (c *RunConfig) setDefaults() {
	c.Concurrency = cmp.Or(c.Concurrency, DefaultConcurrency)
	c.BatchSize = cmp.Or(c.BatchSize, DefaultBatchSize)
	c.Progress = cmp.Or(c.Progress, DefaultProgress)
	c.Label = cmp.Or(c.Label, "weekly")
	c.Scan.Vantage = cmp.Or(c.Scan.Vantage, c.Vantage) // its own scans unless told otherwise
	if len(c.Ports) == 0 {
		c.Ports = DefaultPorts
	}
	c.Verify.setDefaults()
}

// Summary is what a run found (the whole run, including earlier invocations).
type Summary struct {
	RunID    int64           `json:"run_id"`
	Week     string          `json:"iso_week"`
	Vantage  string          `json:"vantage"`
	Label    string          `json:"label"`
	Source   string          `json:"source"`
	ScanIDs  []int64         `json:"scan_ids,omitempty"`
	Targets  int             `json:"targets"`       // in this invocation's target list
	Skipped  int             `json:"skipped"`       // already verified in this run
	Excluded int             `json:"excluded"`      // blocklisted or opted out: never contacted
	Verified int             `json:"verified_now"`  // verified by this invocation
	Elapsed  float64         `json:"elapsed_s"`     // this invocation
	Rate     float64         `json:"targets_per_s"` // this invocation
	Outcomes map[Outcome]int `json:"outcomes"`      // whole run
	Versions []VersionCount  `json:"versions"`      // whole run, completed handshakes
	// Libraries counts the QUIC library identifications (quic_stacks) of the whole run.
	Libraries map[string]int  `json:"libraries,omitempty"`
	Status    store.RunStatus `json:"status"` // ok | interrupted | failed
	// DDR is the run's designated-resolver discovery (nil: nobody was asked).
	DDR *DDRSummary `json:"ddr,omitempty"`
}

// DDRSummary counts a run's DDR discovery.
type DDRSummary struct {
	AskedNow     int            `json:"asked_now"`     // responders asked by this invocation
	Statuses     map[string]int `json:"statuses"`      // whole run, per ddr_queries.status
	DoQEndpoints int            `json:"doq_endpoints"` // designated DoQ endpoints (address hint, port)
	NewTargets   int            `json:"new_targets"`   // of those, not among the scan's targets (verified all the same)
	Refused      int            `json:"refused"`       // of those, never contacted: blocklisted, or refused by the lab guard
}

// VersionCount counts completed handshakes per DoQ (ALPN) and QUIC version pair.
type VersionCount struct {
	ALPN        string `json:"alpn"`
	QUICVersion string `json:"quic_version"`
	Count       int    `json:"count"`
}

// Run verifies the targets of a scan (or a file), writes the results, certificates,
// resolvers and their locations, and returns the summary. Starting the same run (week,
// vantage, label) again resumes it: targets already verified are skipped, and rows
// written twice are not duplicated.
func Run(ctx context.Context, s *store.Store, cfg RunConfig, log *slog.Logger) (_ *Summary, retErr error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	v, err := New(cfg.Verify)
	if err != nil {
		return nil, err
	}
	sum := &Summary{Vantage: cfg.Vantage, Label: cfg.Label}

	// Targets.
	var targets []Target
	var scanID *int64
	if cfg.TargetsFile != "" {
		sum.Source = "file"
		if targets = cfg.Targets; targets == nil {
			if targets, err = ReadTargetsFile(cfg.TargetsFile); err != nil {
				return nil, fmt.Errorf("targets: %w", err)
			}
		}
		sum.Week = cfg.Week
	} else {
		sum.Source = "scan"
		ids, week, err := ResolveScans(ctx, s, cfg.Scan)
		if errors.Is(err, ErrNoScan) {
			return nil, cli.Environmentf("%w (run zprobe first, or pass --targets)", err)
		}
		if err != nil {
			return nil, err
		}
		sum.ScanIDs, scanID = ids, &ids[0]
		log.Info("targets from scans", "scan_ids", ids, "week", week, "scan_vantage", cfg.Scan.Vantage,
			"scan_label", cmp.Or(cfg.Scan.Label, "weekly"))
		sum.Week = cfg.Week
		if sum.Week == "" {
			sum.Week = week
		}
		if targets, err = ScanTargets(ctx, s, ids, cfg.Ports); err != nil {
			return nil, err
		}
	}
	if sum.Week == "" {
		sum.Week = runkey.Week(time.Now())
	}
	ddrAsk, err := ddrResponders(ctx, s, cfg, sum.ScanIDs)
	if err != nil {
		return nil, err
	}
	if targets, sum.Excluded, err = blocklist.ExcludeForContact(ctx, s, cfg.BlocklistDir, targets, func(t Target) netip.Addr { return t.Addr.Addr() }, "target", log); err != nil {
		return nil, err
	}
	var ddrExcluded int
	if ddrAsk, ddrExcluded, err = blocklist.ExcludeForContact(ctx, s, cfg.BlocklistDir, ddrAsk, func(a netip.Addr) netip.Addr { return a }, "DDR resolver", log); err != nil {
		return nil, err
	}
	sum.Excluded += ddrExcluded
	// Lab addresses only from inside the testbed, checked before the run row exists.
	guard := labnet.NewGuard()
	for _, t := range targets {
		if err := guard.Check(t.Addr.Addr()); err != nil {
			return nil, err
		}
	}
	for _, a := range ddrAsk {
		if err := guard.Check(a); err != nil {
			return nil, err
		}
	}

	if cfg.Rerun {
		taken, err := s.AttemptLabels(ctx, "verification_runs", "iso_week = $2 AND vantage_id = $3", cfg.Label, sum.Week, cfg.Vantage)
		if err != nil {
			return nil, err
		}
		if l := store.AttemptLabel(cfg.Label, taken); l != cfg.Label {
			log.Info("--rerun: the run is verified again as a new attempt, under its own label", "label", l, "first_attempt", cfg.Label, "week", sum.Week)
			cfg.Label, sum.Label = l, l
		}
	}
	// One process at a time verifies a run (week, vantage, label): a second one ends
	// here with a *store.LockedError (exit 75) before it contacts anything.
	ctx, release, err := s.HoldLock(ctx, LockKey(sum.Week, cfg.Vantage, cfg.Label), store.RetryPolicy{}, log)
	if err != nil {
		return nil, err
	}
	defer func() {
		if lost := release(); lost != nil {
			retErr = errors.Join(retErr, lost)
		}
	}()

	// Geo databases and the run row.
	var gdb *geo.DB
	var cityID, asnID *int64
	if cfg.CityDB != "" {
		if gdb, err = geo.Open(cfg.CityDB, cfg.ASNDB); err != nil {
			return nil, cli.Environmentf("%w", err)
		}
		defer gdb.Close()
		c, a, err := gdb.Register(ctx, s)
		if err != nil {
			return nil, err
		}
		cityID, asnID = &c, &a
		log.Info("GeoIP databases", "city", cfg.CityDB, "city_built", gdb.CityInfo.BuildTime, "asn", cfg.ASNDB, "asn_built", gdb.ASNInfo.BuildTime)
	}
	if err := s.EnsureVantage(ctx, store.Vantage{ID: cfg.Vantage, Location: cfg.VantageLocation, Contact: cfg.VantageContact}); err != nil {
		return nil, err
	}
	prov := provenance.New("verify", provenance.Vantage{ID: cfg.Vantage, Location: cfg.VantageLocation, Contact: cfg.VantageContact})
	if gdb != nil {
		for _, d := range []store.Dataset{gdb.CityInfo, gdb.ASNInfo} {
			prov.GeoIP = append(prov.GeoIP, provenance.Dataset{Kind: d.Kind, DatabaseType: d.DatabaseType,
				BuildTime: d.BuildTime.UTC(), SHA256: hex.EncodeToString(d.SHA256), Path: d.Path})
		}
	}
	vc := v.Config()
	conf, _ := json.Marshal(map[string]any{
		"alpns": vc.ALPNs, "quic_versions": vc.Versions, "handshake_timeout_ms": vc.HandshakeTimeout.Milliseconds(),
		"query_timeout_ms": vc.QueryTimeout.Milliseconds(), "target_timeout_ms": vc.TargetTimeout.Milliseconds(),
		"query_name": vc.QueryName, "sni_names": vc.SNINames, "max_sni_attempts": vc.MaxSNIAttempts,
		"concurrency": cfg.Concurrency, "rate": cfg.Rate, "ports": cfg.Ports, "scan_ids": sum.ScanIDs,
		"targets_file": cfg.TargetsFile, "geoip_city": cfg.CityDB, "geoip_asn": cfg.ASNDB,
		"identify": !vc.NoIdentify, "ddr": !cfg.NoDDR, "ddr_targets_file": cfg.DDRTargetsFile,
	})
	runID, existed, err := s.StartVerificationRun(ctx, store.VerificationRun{ISOWeek: sum.Week, VantageID: cfg.Vantage,
		Label: cfg.Label, ScanID: scanID, Source: sum.Source, Config: conf, CityDataset: cityID, ASNDataset: asnID, Provenance: prov.JSON()})
	if err != nil {
		return nil, err
	}
	sum.RunID = runID

	// DDR: the designated DoQ endpoints join the targets, whatever their port.
	if len(ddrAsk) > 0 {
		var lim *rate.Limiter
		if cfg.Rate > 0 {
			lim = rate.NewLimiter(rate.Limit(cfg.Rate), 1)
		}
		eps, asked, err := discoverDDR(ctx, s, runID, ddrAsk, cfg.Concurrency, lim, cfg.Verify.QueryTimeout, log)
		if err != nil {
			return nil, err
		}
		sum.DDR = &DDRSummary{AskedNow: asked, DoQEndpoints: len(eps)}
		have := map[netip.AddrPort]bool{}
		for _, t := range targets {
			have[t.Addr] = true
		}
		var more []Target
		for _, ep := range eps {
			if !have[ep] {
				have[ep] = true
				more = append(more, Target{Addr: ep})
			}
		}
		n := len(more)
		if more, _, err = blocklist.ExcludeForContact(ctx, s, cfg.BlocklistDir, more, func(t Target) netip.Addr { return t.Addr.Addr() }, "DDR endpoint", log); err != nil {
			return nil, err
		}
		for _, t := range more {
			// A designation may name any address: one the lab guard refuses is not
			// contacted (and does not stop the run).
			if err := guard.Check(t.Addr.Addr()); err != nil {
				log.Warn("DDR endpoint not contacted", "endpoint", t.Addr, "err", err)
				continue
			}
			targets = append(targets, t)
			sum.DDR.NewTargets++
		}
		sum.DDR.Refused = n - sum.DDR.NewTargets
	}

	// Resume: skip what this run already has.
	sum.Targets = len(targets)
	if existed {
		done, err := doneTargets(ctx, s, runID)
		if err != nil {
			return nil, err
		}
		kept := targets[:0]
		for _, t := range targets {
			if !done[t.Addr] {
				kept = append(kept, t)
			}
		}
		sum.Skipped = len(targets) - len(kept)
		targets = kept
	}
	if sum.Skipped > 0 {
		lv := slog.LevelInfo
		if len(targets) == 0 {
			lv = slog.LevelWarn
		}
		log.Log(ctx, lv, "targets the run holds already are not verified again; to verify them again: --rerun (a new attempt) or another --label",
			"skipped", sum.Skipped, "run_id", runID, "week", sum.Week, "vantage", cfg.Vantage, "label", cfg.Label)
	}
	log.Info("verification run", "run_id", runID, "week", sum.Week, "vantage", cfg.Vantage, "label", cfg.Label,
		"source", sum.Source, "scan_ids", sum.ScanIDs, "ports", portsString(cfg.Ports), "targets", sum.Targets,
		"already_done", sum.Skipped, "concurrency", cfg.Concurrency, "rate", cfg.Rate)

	start := time.Now()
	w := &writer{s: s, runID: runID, gdb: gdb, cityID: cityID, asnID: asnID}
	n, runErr := verifyAll(ctx, v.Verify, w, gdb, targets, cfg, log)
	sum.Verified = n
	sum.Elapsed = time.Since(start).Seconds()
	if sum.Elapsed > 0 {
		sum.Rate = float64(n) / sum.Elapsed
	}
	sum.Status = store.RunStatusOf(ctx, runErr)
	// The summary covers the whole run; write it with a context that survives SIGINT.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := runSummary(fctx, s, runID, sum); err != nil && runErr == nil {
		runErr = err
	}
	js, _ := json.Marshal(sum)
	if err := s.FinishVerificationRun(fctx, runID, sum.Status, js); err != nil && runErr == nil {
		runErr = err
	}
	return sum, runErr
}

// ddrResponders lists the DNS resolvers a run asks for their designations: the scans'
// DNS/53 responders and DDRTargetsFile's addresses, each once (none with NoDDR).
func ddrResponders(ctx context.Context, s *store.Store, cfg RunConfig, scanIDs []int64) ([]netip.Addr, error) {
	if cfg.NoDDR {
		return nil, nil
	}
	var out []netip.Addr
	if len(scanIDs) > 0 {
		var err error
		if out, err = ScanDNSResponders(ctx, s, scanIDs); err != nil {
			return nil, err
		}
	}
	if cfg.DDRTargetsFile != "" {
		ts, err := ReadTargetsFile(cfg.DDRTargetsFile)
		if err != nil {
			return nil, fmt.Errorf("DDR targets: %w", err)
		}
		seen := map[netip.Addr]bool{}
		for _, a := range out {
			seen[a] = true
		}
		for _, t := range ts {
			if a := t.Addr.Addr(); !seen[a] {
				seen[a] = true
				out = append(out, a)
			}
		}
	}
	return out, nil
}

// LockKey is the advisory lock of a verification run (store.RunKey): its week,
// vantage point and label, the natural key of verification_runs.
func LockKey(week, vantage, label string) string {
	return store.RunKey("verify", week, vantage, label)
}

func doneTargets(ctx context.Context, s *store.Store, runID int64) (map[netip.AddrPort]bool, error) {
	rows, err := s.Pool.Query(ctx, `SELECT address, port FROM verification_results WHERE run_id = $1`, runID)
	if err != nil {
		return nil, fmt.Errorf("done targets: %w", err)
	}
	defer rows.Close()
	done := map[netip.AddrPort]bool{}
	for rows.Next() {
		var a netip.Addr
		var p int32
		if err := rows.Scan(&a, &p); err != nil {
			return nil, err
		}
		done[netip.AddrPortFrom(a.Unmap(), uint16(p))] = true
	}
	return done, rows.Err()
}

// checkFunc verifies one target (Verifier.Verify).
type checkFunc func(context.Context, Target) Result

// sink keeps results: the database's writer, or counts in memory (RunLocal).
type sink interface {
	add(Result) error
	// flush writes what was added since the last flush and returns how many results.
	flush(context.Context) (int, error)
	buffered() int
}

// verifyAll runs the worker pool and hands every result to out (and cfg.OnResult); it
// returns how many results out kept. Results of targets cut short by cancellation are
// dropped (a resumed run verifies them again) rather than stored as false timeouts.
func verifyAll(ctx context.Context, check checkFunc, w sink, gdb *geo.DB, targets []Target, cfg RunConfig, log *slog.Logger) (int, error) {
	total := len(targets)
	if total == 0 {
		return 0, ctx.Err()
	}
	var lim *rate.Limiter
	if cfg.Rate > 0 {
		lim = rate.NewLimiter(rate.Limit(cfg.Rate), 1)
	}
	results := make(chan Result, cfg.Concurrency)
	go func() {
		defer close(results)
		var again []Result
		for r := range pool(ctx, check, targets, cfg.Concurrency, lim, log) {
			if cfg.RetryTimeouts && r.Outcome == OutcomeTimeout {
				again = append(again, r) // held back: verified once more below
				continue
			}
			results <- r
		}
		if len(again) == 0 || ctx.Err() != nil {
			return
		}
		// Second pass over timeouts at an eighth of the concurrency: a handshake that
		// missed 2 s because this machine (or the path) was busy gets one more chance;
		// a host that really stalls costs one more timeout.
		first := map[netip.AddrPort]Result{}
		retry := make([]Target, len(again))
		for i, r := range again {
			first[r.Addr] = r
			retry[i] = r.Target
		}
		log.Info("second pass over timeouts", "targets", len(retry), "concurrency", max(1, cfg.Concurrency/8))
		for r := range pool(ctx, check, retry, max(1, cfg.Concurrency/8), lim, log) {
			r.Attempts += first[r.Addr].Attempts
			r.Detail = "second pass: " + r.Detail
			results <- r
		}
	}()

	var done atomic.Int64
	stopProgress := make(chan struct{})
	progressDone := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(progressDone)
		tk := time.NewTicker(cfg.Progress)
		defer tk.Stop()
		for {
			select {
			case <-stopProgress:
				return
			case <-tk.C:
				d := done.Load()
				el := time.Since(start).Seconds()
				r := float64(d) / el
				eta := "unknown"
				if r > 0 {
					eta = (time.Duration(float64(int64(total)-d)/r) * time.Second).String()
				}
				log.Info("progress", "done", d, "total", total, "rate_per_s", fmt.Sprintf("%.1f", r), "eta", eta)
			}
		}
	}()
	defer func() { close(stopProgress); <-progressDone }()

	flushEvery := time.NewTicker(2 * time.Second)
	defer flushEvery.Stop()
	written := 0
	var werr error
	// The writer keeps going after SIGINT so that finished results are kept.
	wctx := context.WithoutCancel(ctx)
	flush := func() {
		if werr != nil {
			return
		}
		n, err := w.flush(wctx)
		written += n
		if err != nil {
			werr = err
			log.Error("writing results failed", "err", err)
		}
	}
	for open := true; open; {
		select {
		case r, ok := <-results:
			if !ok {
				open = false
				break
			}
			done.Add(1)
			if cfg.OnResult != nil {
				cfg.OnResult(RecordOf(r, gdb))
			}
			if err := w.add(r); err != nil && werr == nil {
				werr = err
			}
			if w.buffered() >= cfg.BatchSize {
				flush()
			}
		case <-flushEvery.C:
			flush()
		}
	}
	flush()
	if werr != nil {
		return written, werr
	}
	return written, ctx.Err()
}

// pool verifies targets with conc workers and streams the results; results of targets
// cut short by cancellation are dropped. A check that panics gives its target the
// outcome error (guarded); the other workers go on.
func pool(ctx context.Context, check checkFunc, targets []Target, conc int, lim *rate.Limiter, log *slog.Logger) <-chan Result {
	jobs := make(chan Target)
	out := make(chan Result, conc)
	var wg sync.WaitGroup
	for range min(conc, len(targets)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for t := range jobs {
				r := guarded(ctx, check, t, log)
				if ctx.Err() != nil {
					continue // cut short: not a real outcome
				}
				out <- r
			}
		}()
	}
	go func() {
		defer close(jobs)
		for _, t := range targets {
			if lim != nil {
				if err := lim.Wait(ctx); err != nil {
					return
				}
			}
			select {
			case jobs <- t:
			case <-ctx.Done():
				return
			}
		}
	}()
	go func() { wg.Wait(); close(out) }()
	return out
}

// guarded runs check on t; a panic becomes the outcome error with the panic as its
// detail and the stack in the log, so one bad target cannot end the run.
func guarded(ctx context.Context, check checkFunc, t Target, log *slog.Logger) (r Result) {
	defer func() {
		if p := recover(); p != nil {
			log.Error("verifying a target panicked: recorded as outcome error", "target", t.Addr, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			r = Result{Target: t, Outcome: OutcomeError, Detail: fmt.Sprintf("panic: %v", p), SNISource: SNINone, Attempts: 1, At: time.Now()}
		}
	}()
	return check(ctx, t)
}

// writer batches rows for the database.
type writer struct {
	s             *store.Store
	runID         int64
	gdb           *geo.DB
	cityID, asnID *int64
	certs         certs.Dedup
	results       []store.VerificationResult
	resolvers     []store.Resolver
	geo           []store.ResolverGeo
	stacks        []store.QUICStack
	seenResolver  map[netip.Addr]bool
}

func (w *writer) add(r Result) error {
	w.results = append(w.results, toRow(w.runID, r))
	if r.Stack != nil {
		w.stacks = append(w.stacks, stackRow(w.runID, r))
	}
	rows, _ := certs.Chain(r.Chain, r.At)
	w.certs.Add(rows...)
	// A resolver: an address that answered a DNS query over DoQ with a well-formed
	// reply (any rcode). A malformed reply (protocol-error) keeps its rcode in the
	// result but does not make the address a resolver.
	if r.Rcode == nil || !isResolverOutcome(r.Outcome) {
		return nil
	}
	a := r.Addr.Addr()
	if w.seenResolver == nil {
		w.seenResolver = map[netip.Addr]bool{}
	}
	if w.seenResolver[a] {
		return nil
	}
	w.seenResolver[a] = true
	w.resolvers = append(w.resolvers, store.Resolver{Address: a, FirstSeen: r.At, LastSeen: r.At})
	if w.gdb != nil {
		g, err := w.gdb.Row(a, *w.cityID, *w.asnID)
		if err != nil {
			return err
		}
		w.geo = append(w.geo, g)
	}
	return nil
}

func (w *writer) buffered() int { return len(w.results) }

func (w *writer) flush(ctx context.Context) (int, error) {
	n := len(w.results)
	if n == 0 {
		return 0, nil
	}
	if _, err := store.Insert(ctx, w.s, store.TableCertificates, w.certs.Take()); err != nil {
		return 0, err
	}
	if _, err := store.Insert(ctx, w.s, store.TableVerificationResults, w.results); err != nil {
		return 0, err
	}
	if _, err := store.Insert(ctx, w.s, store.TableQUICStacks, w.stacks); err != nil {
		return 0, err
	}
	if _, err := store.Insert(ctx, w.s, store.TableResolvers, w.resolvers); err != nil {
		return 0, err
	}
	if len(w.resolvers) > 0 {
		// Known resolvers seen again (a later week's run): move last_seen forward.
		addrs := make([]netip.Addr, len(w.resolvers))
		var latest time.Time
		for i, r := range w.resolvers {
			addrs[i] = r.Address
			if r.LastSeen.After(latest) {
				latest = r.LastSeen
			}
		}
		if _, err := w.s.Pool.Exec(ctx, `UPDATE resolvers SET last_seen = $2
			WHERE address = ANY($1) AND last_seen < $2`, addrs, latest); err != nil {
			return 0, fmt.Errorf("resolvers last_seen: %w", err)
		}
	}
	if _, err := store.Insert(ctx, w.s, store.TableResolverGeo, w.geo); err != nil {
		return 0, err
	}
	w.results, w.resolvers, w.geo, w.stacks = w.results[:0], w.resolvers[:0], w.geo[:0], w.stacks[:0]
	return n, nil
}

func ptr[T any](v T) *T { return &v }

// toRow converts a result into its verification_results row.
func toRow(runID int64, r Result) store.VerificationResult {
	row := store.VerificationResult{RunID: runID, Address: r.Addr.Addr(), Port: int32(r.Addr.Port()),
		Outcome: string(r.Outcome), Detail: r.Detail, ScanVersions: r.ScanVersions, Attempts: int16(r.Attempts),
		VerifiedAt: r.At, SNISource: ptr(r.SNISource), CertValidForSNI: r.CertValid, DNSAnswers: nil}
	if r.QUICVersion != 0 {
		row.QUICVersion = ptr(int64(r.QUICVersion))
		row.ALPN = ptr(r.ALPN)
		row.TLSVersion = ptr(int32(r.TLSVersion))
		row.TLSCipher = ptr(r.TLSCipher)
		row.HandshakeNS = ptr(r.Handshake.Nanoseconds())
	}
	if r.SNI != "" {
		row.SNI = ptr(r.SNI)
	}
	for _, c := range r.Chain {
		row.CertChain = append(row.CertChain, certs.Fingerprint(c.Raw))
	}
	if r.Rcode != nil {
		row.DNSRcode = ptr(int16(*r.Rcode))
		row.DNSAnswers = ptr(int16(min(r.Answers, 32767)))
	}
	if row.VerifiedAt.IsZero() {
		row.VerifiedAt = time.Now()
	}
	return row
}

// stackRow converts a result's identification into its quic_stacks row.
func stackRow(runID int64, r Result) store.QUICStack {
	st := r.Stack
	return store.QUICStack{RunID: runID, Address: r.Addr.Addr(), Port: int32(r.Addr.Port()), Library: st.Library,
		Matched: nonNil(st.Matched), Conflicts: nonNil(st.Conflicts), Evidence: st.Evidence.evidenceJSON()}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// runSummary fills the whole-run counts from the database.
func runSummary(ctx context.Context, s *store.Store, runID int64, sum *Summary) error {
	sum.Outcomes = map[Outcome]int{}
	rows, err := s.Pool.Query(ctx, `SELECT outcome, count(*) FROM verification_results WHERE run_id = $1 GROUP BY outcome`, runID)
	if err != nil {
		return fmt.Errorf("summary: %w", err)
	}
	for rows.Next() {
		var o string
		var n int
		if err := rows.Scan(&o, &n); err != nil {
			rows.Close()
			return err
		}
		sum.Outcomes[Outcome(o)] = n
	}
	rows.Close()
	sum.Libraries = map[string]int{}
	rows, err = s.Pool.Query(ctx, `SELECT library, count(*) FROM quic_stacks WHERE run_id = $1 GROUP BY library`, runID)
	if err != nil {
		return fmt.Errorf("summary: %w", err)
	}
	for rows.Next() {
		var lib string
		var n int
		if err := rows.Scan(&lib, &n); err != nil {
			rows.Close()
			return err
		}
		sum.Libraries[lib] = n
	}
	rows.Close()
	if sum.DDR != nil {
		sum.DDR.Statuses = map[string]int{}
		rows, err = s.Pool.Query(ctx, `SELECT status, count(*) FROM ddr_queries WHERE run_id = $1 GROUP BY status`, runID)
		if err != nil {
			return fmt.Errorf("summary: %w", err)
		}
		for rows.Next() {
			var st string
			var n int
			if err := rows.Scan(&st, &n); err != nil {
				rows.Close()
				return err
			}
			sum.DDR.Statuses[st] = n
		}
		rows.Close()
	}
	rows, err = s.Pool.Query(ctx, `SELECT alpn, quic_version, count(*) FROM verification_results
		WHERE run_id = $1 AND alpn IS NOT NULL GROUP BY alpn, quic_version`, runID)
	if err != nil {
		return fmt.Errorf("summary: %w", err)
	}
	defer rows.Close()
	sum.Versions = []VersionCount{}
	for rows.Next() {
		var vc VersionCount
		var qv int64
		if err := rows.Scan(&vc.ALPN, &qv, &vc.Count); err != nil {
			return err
		}
		vc.QUICVersion = quicver.Name(uint32(qv))
		sum.Versions = append(sum.Versions, vc)
	}
	sortVersions(sum.Versions)
	return rows.Err()
}

// sortVersions orders version counts, most first.
func sortVersions(vs []VersionCount) {
	sort.Slice(vs, func(i, j int) bool {
		if vs[i].Count != vs[j].Count {
			return vs[i].Count > vs[j].Count
		}
		return vs[i].ALPN+vs[i].QUICVersion < vs[j].ALPN+vs[j].QUICVersion
	})
}

// Log logs the summary as one line with structured fields (outcomes and versions as
// groups, not Go map strings).
func (s *Summary) Log(log *slog.Logger) {
	versions := map[string]int{}
	for _, v := range s.Versions {
		versions[cmp.Or(v.ALPN, "(none)")+"/"+v.QUICVersion] = v.Count
	}
	log.Info("verification summary", "run_id", s.RunID, "week", s.Week, "vantage", s.Vantage, "label", s.Label,
		"source", s.Source, "targets", s.Targets, "skipped", s.Skipped, "excluded", s.Excluded, "verified_now", s.Verified,
		"elapsed_s", s.Elapsed, "status", s.Status, cli.CountsAttr("outcomes", s.Outcomes), cli.CountsAttr("versions", versions))
}

// WriteText prints a summary as a small table.
func (s *Summary) WriteText(w io.Writer) {
	if s.RunID == 0 {
		fmt.Fprintf(w, "verification without a database (vantage %s, source %s)\n", s.Vantage, s.Source)
	} else {
		fmt.Fprintf(w, "verification run %d (%s, vantage %s, label %s, source %s)\n", s.RunID, s.Week, s.Vantage, s.Label, s.Source)
	}
	fmt.Fprintf(w, "this invocation: %d targets, %d already done, %d verified in %.1f s (%.1f/s), status %s\n",
		s.Targets, s.Skipped, s.Verified, s.Elapsed, s.Rate, s.Status)
	if s.Skipped > 0 {
		fmt.Fprintf(w, "skipped: %d targets the run holds already; to verify them again: --rerun (a new attempt) or another --label\n", s.Skipped)
	}
	fmt.Fprintf(w, "\noutcome            count (whole run)\n")
	for _, o := range Outcomes.Values() {
		if n := s.Outcomes[o]; n > 0 {
			fmt.Fprintf(w, "%-18s %6d\n", o, n)
		}
	}
	if len(s.Versions) > 0 {
		fmt.Fprintf(w, "\nDoQ ALPN   QUIC   handshakes\n")
		for _, v := range s.Versions {
			fmt.Fprintf(w, "%-10s %-6s %6d\n", cmp.Or(v.ALPN, "(none)"), v.QUICVersion, v.Count) // alpn '': doq-no-alpn
		}
	}
	if d := s.DDR; d != nil {
		fmt.Fprintf(w, "\nDDR (RFC 9462): %d responders asked now; designated DoQ endpoints %d, %d not among the scan's targets (verified above), %d not contacted\n",
			d.AskedNow, d.DoQEndpoints, d.NewTargets, d.Refused)
		for _, st := range []string{DDRDesignations, DDRNone, DDRNXDomain, DDRRefused, DDRDNSError, DDRTimeout, DDRBadResponse, DDRError} {
			if n := d.Statuses[st]; n > 0 {
				fmt.Fprintf(w, "  %-14s %6d\n", st, n)
			}
		}
	}
	if len(s.Libraries) > 0 {
		fmt.Fprintf(w, "\nQUIC library   endpoints\n")
		for _, lib := range append(Libraries(), LibraryUnknown) {
			if n := s.Libraries[lib]; n > 0 {
				fmt.Fprintf(w, "%-14s %6d\n", lib, n)
			}
		}
	}
}

// isResolverOutcome reports whether an outcome with an rcode makes its address a resolver.
func isResolverOutcome(o Outcome) bool {
	return o == OutcomeVerified || o == OutcomeRefused || o == OutcomeDNSError
}

// RunLocal verifies cfg's targets (cfg.Targets, else TargetsFile) without a database:
// no run row, no lock, no resume; the targets in the blocklist files (--blocklist-dir,
// its optout.conf included) and in reserved ranges outside the lab space are not
// contacted; every result goes to cfg.OnResult. The summary counts this invocation.
func RunLocal(ctx context.Context, cfg RunConfig, log *slog.Logger) (*Summary, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.TargetsFile == "" && cfg.Targets == nil {
		return nil, cli.Usagef("without a database the targets come from --targets")
	}
	v, err := New(cfg.Verify)
	if err != nil {
		return nil, err
	}
	sum := &Summary{Vantage: cfg.Vantage, Label: cfg.Label, Source: "file", Week: cmp.Or(cfg.Week, runkey.Week(time.Now()))}
	targets := cfg.Targets
	if targets == nil {
		if targets, err = ReadTargetsFile(cfg.TargetsFile); err != nil {
			return nil, fmt.Errorf("targets: %w", err)
		}
	}
	if targets, sum.Excluded, err = blocklist.ExcludeForContact(ctx, nil, cfg.BlocklistDir, targets, func(t Target) netip.Addr { return t.Addr.Addr() }, "target", log); err != nil {
		return nil, err
	}
	guard := labnet.NewGuard()
	for _, t := range targets {
		if err := guard.Check(t.Addr.Addr()); err != nil {
			return nil, err
		}
	}
	var gdb *geo.DB
	if cfg.CityDB != "" {
		if gdb, err = geo.Open(cfg.CityDB, cfg.ASNDB); err != nil {
			return nil, cli.Environmentf("%w", err)
		}
		defer gdb.Close()
	}
	sum.Targets = len(targets)
	log.Info("verification without a database", "targets", sum.Targets, "excluded", sum.Excluded, "ports", portsString(cfg.Ports),
		"concurrency", cfg.Concurrency, "rate", cfg.Rate)
	start := time.Now()
	counts := &counter{}
	n, runErr := verifyAll(ctx, v.Verify, counts, gdb, targets, cfg, log)
	sum.Verified = n
	sum.Elapsed = time.Since(start).Seconds()
	if sum.Elapsed > 0 {
		sum.Rate = float64(n) / sum.Elapsed
	}
	sum.Status = store.RunStatusOf(ctx, runErr)
	sum.Outcomes, sum.Versions = counts.outcomes, counts.versionCounts()
	return sum, runErr
}

// counter is the sink of RunLocal: counts per outcome and per (ALPN, QUIC version).
type counter struct {
	outcomes map[Outcome]int
	versions map[VersionCount]int
	added    int
}

func (c *counter) add(r Result) error {
	if c.outcomes == nil {
		c.outcomes, c.versions = map[Outcome]int{}, map[VersionCount]int{}
	}
	c.outcomes[r.Outcome]++
	if r.QUICVersion != 0 {
		c.versions[VersionCount{ALPN: r.ALPN, QUICVersion: quicver.Name(r.QUICVersion)}]++
	}
	c.added++
	return nil
}

func (c *counter) flush(context.Context) (int, error) {
	n := c.added
	c.added = 0
	return n, nil
}

func (c *counter) buffered() int { return c.added }

// versionCounts are the counts in the order runSummary gives them (most first).
func (c *counter) versionCounts() []VersionCount {
	out := []VersionCount{}
	for vc, n := range c.versions {
		vc.Count = n
		out = append(out, vc)
	}
	sortVersions(out)
	if c.outcomes == nil {
		c.outcomes = map[Outcome]int{}
	}
	return out
}
