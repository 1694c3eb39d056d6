package campaign

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/doqscan/doqscan/blocklist"
	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/dnsmsg"
	"github.com/doqscan/doqscan/internal/labnet"
	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/protocol"
	"github.com/doqscan/doqscan/internal/store"
)

// spreadShare is the part of the round interval the resolvers' starts are spread over;
// the rest is slack so a round ends before the next begins.
const spreadShare = 0.8

// Options are cmd/measure's flags (DefaultOptions gives their defaults); Command checks
// and runs them.
type Options struct {
	Config
	// Vantage is --vantage, --vantage-location and --vantage-contact (Command copies them
	// into Config).
	Vantage cli.VantageFlags
	// RoundHour is --hour as given: one round's hour (2026-11-22T04 or RFC 3339); ""
	// means $DOQSCAN_RUN_KEY, else now. Command parses it into Config.Hour.
	RoundHour string
	RunID     int64 // 0: the latest run of Run's vantage point and label with DoQ-verified resolvers
	// Run selects the verification run when RunID is 0 (--run-vantage, default this
	// vantage point; --run-label, default "weekly").
	Run         RunSelection
	TargetsFile string // instead of a verification run
	// Targets are TargetsFile's resolvers when they were read already (Command reads the
	// file once, before it opens the database; every round measures them); nil: each
	// round reads the file.
	Targets   []Target
	Every     time.Duration
	Protocols string
	Modes     string
	KeyShares string
	Variants  string
	// BlocklistDir holds the operator's blocklist *.conf files ("": none). Resolvers in
	// them, in an accepted opt-out or in a reserved range outside the lab space are never
	// contacted (blocklist.ForContact).
	BlocklistDir string
	// DBDeadline is --db-deadline (copied into Config.DBDeadline by Parse).
	DBDeadline time.Duration
	// Output is --json and --no-store.
	Output cli.OutputFlags
	// Rerun is --rerun: measure the round again as a new attempt (label LABEL-rN,
	// store.AttemptLabel) instead of only what it lacks.
	Rerun bool
	// Out receives the results and the summary (Command: default standard output;
	// nil for Rounds: nothing is printed).
	Out io.Writer
}

// DefaultOptions are the defaults of cmd/measure's flags (the vantage flags take theirs
// from the environment when they are registered).
func DefaultOptions() Options {
	return Options{
		Config: Config{
			Label:       "hourly",
			Name:        dnsmsg.DefaultQueryName,
			Timeout:     measure.DefaultTimeout,
			Concurrency: 64,
			RTTSamples:  3,
			Persistent:  5,
		},
		Protocols:    strings.Join(protocol.Names(), ","),
		Modes:        "fresh",
		KeyShares:    "x25519",
		Variants:     "GET,POST",
		BlocklistDir: cli.DefaultBlocklistDir(),
		DBDeadline:   DefaultDBDeadline,
	}
}

// Command is the measure command: it checks the flags as given (usage errors name the
// flag: exit code 2; a missing blocklist directory: 5), reads the targets file, opens
// the store and runs the rounds (Rounds), or with --no-store one round without a
// database (RunLocal). Every resolver's results go to o.Out as they are measured: one
// JSON object a line with --json; else a table, when o.Out is a terminal or with
// --no-store. Each round's summary follows (or with --json goes to the log only).
func Command(ctx context.Context, log *slog.Logger, o Options, args []string) error {
	if len(args) > 0 {
		return cli.Usagef("unexpected arguments: %v", args)
	}
	if o.RoundHour != "" && o.Every != 0 {
		return cli.Usagef("--hour names one round: it does not combine with --every")
	}
	if o.Rerun && (o.Every != 0 || o.Output.NoStore) {
		return cli.Usagef("--rerun measures one stored round again: it does not combine with --every or --no-store")
	}
	if o.Output.NoStore && (o.TargetsFile == "" || o.Every != 0) {
		return cli.Usagef("--no-store measures one round of the resolvers of --targets (a verification run's are in the database; --every needs the database)")
	}
	if o.Out == nil {
		o.Out = os.Stdout
	}
	o.VantageID, o.VantageLocation, o.VantageContact = o.Vantage.ID, o.Vantage.Location, o.Vantage.Contact
	if err := o.Parse(); err != nil {
		return err
	}
	if err := cli.CheckBlocklistDir("blocklist-dir", o.BlocklistDir); err != nil {
		return err
	}
	h, err := ParseRoundHour(o.RoundHour, os.Getenv("DOQSCAN_RUN_KEY"))
	if err != nil {
		return cli.Usagef("--hour: %v", err)
	}
	o.Hour = h
	// The targets file before the database: a missing or bad file is exit 5 or 2
	// whether or not a database answers.
	if o.TargetsFile != "" {
		if o.Targets, err = ReadTargetsFile(o.TargetsFile); err != nil {
			return fmt.Errorf("targets file: %w", err) // *listfile.OpenError: exit 5, *listfile.LineError: exit 2
		}
	}
	if o.Output.NoStore {
		return local(ctx, o, log)
	}
	s, err := cli.OpenStore(ctx, log)
	if err != nil {
		return err
	}
	defer s.Close()
	return Rounds(ctx, s, o, log)
}

// local measures the targets once without a database (--no-store).
func local(ctx context.Context, o Options, log *slog.Logger) error {
	targets, _, err := blocklist.ExcludeForContact(ctx, nil, o.BlocklistDir, o.Targets, func(t Target) netip.Addr { return t.Addr }, "resolver", log)
	if err != nil {
		return err
	}
	guard := labnet.NewGuard()
	for _, t := range targets {
		if err := guard.Check(t.Addr); err != nil {
			return err
		}
	}
	if len(targets) == 0 {
		return cli.Environmentf("no targets to measure")
	}
	cfg := o.Config
	pr := o.printer()
	cfg.OnResolver = pr.print
	sum, err := RunLocal(ctx, cfg, targets, log)
	pr.done(sum, log)
	return err
}

// roundPrinter prints one round's results and its summary (Command's rules).
type roundPrinter struct {
	p   *Printer // nil: results not printed
	out io.Writer
	// json: the summary goes to the log only
	json bool
}

func (o Options) printer() *roundPrinter {
	rp := &roundPrinter{out: o.Out, json: o.Output.JSON}
	if o.Out == nil {
		rp.out, rp.json = io.Discard, true
		return rp
	}
	if o.Output.JSON || o.Output.NoStore || cli.Terminal(o.Out) {
		rp.p = NewPrinter(o.Out, o.Output.JSON)
	}
	return rp
}

func (rp *roundPrinter) print(r Record) {
	if rp.p != nil {
		_ = rp.p.Print(r)
	}
}

// done writes the table (if any) and the summary (nil: none).
func (rp *roundPrinter) done(sum *Summary, log *slog.Logger) {
	if rp.p != nil {
		_ = rp.p.Close()
	}
	if sum == nil {
		return
	}
	sum.Log(log)
	if !rp.json {
		if rp.p != nil {
			fmt.Fprintln(rp.out)
		}
		sum.WriteText(rp.out)
	}
}

// Parse fills the Config lists from the comma-separated flags and checks every flag
// (Config.Validate, --every 0 or whole hours up to MaxEvery, --spread up to MaxSpread,
// --run-id >= 0). Errors are usage errors naming the flag.
func (o *Options) Parse() error {
	o.Config.Protocols, o.Config.Modes, o.Config.KeyShares, o.Config.DoHVariants = nil, nil, nil, nil
	for _, p := range cli.SplitList(o.Protocols) {
		if _, err := measure.For(measure.Protocol(p)); err != nil {
			return cli.Usagef("--protocols: %v", err)
		}
		o.Config.Protocols = append(o.Config.Protocols, measure.Protocol(p))
	}
	for _, m := range cli.SplitList(o.Modes) {
		ok := false
		for _, k := range measure.Modes {
			ok = ok || string(k) == m
		}
		if !ok {
			return cli.Usagef("--modes: unknown mode %q (fresh, resumed, 0rtt, persistent)", m)
		}
		o.Config.Modes = append(o.Config.Modes, measure.Mode(m))
	}
	for _, k := range cli.SplitList(o.KeyShares) {
		if _, err := measure.KeyShare(k).Curves(); err != nil {
			return cli.Usagef("--key-shares: %v (x25519, x25519mlkem768)", err)
		}
		o.Config.KeyShares = append(o.Config.KeyShares, measure.KeyShare(k))
	}
	for _, v := range cli.SplitList(o.Variants) {
		v = strings.ToUpper(v)
		if v != measure.VariantGET && v != measure.VariantPOST {
			return cli.Usagef("--doh-variants: %q is not GET or POST", v)
		}
		o.Config.DoHVariants = append(o.Config.DoHVariants, v)
	}
	if o.Every != 0 && (o.Every < time.Hour || o.Every > MaxEvery || o.Every%time.Hour != 0) {
		return cli.Usagef("--every %v: want 0 (one round) or a whole number of hours, 1h..%v (rounds are keyed by hour)", o.Every, MaxEvery)
	}
	if err := cli.FirstError(
		cli.InRange("spread", o.Spread, 0, MaxSpread),
		cli.InRange("run-id", o.RunID, 0, 1<<62),
	); err != nil {
		return err
	}
	o.Config.DBDeadline = o.DBDeadline
	return o.Config.Validate()
}

// Rounds runs one round, or rounds every o.Every until ctx is cancelled.
func Rounds(ctx context.Context, s *store.Store, o Options, log *slog.Logger) error {
	if err := s.EnsureVantage(ctx, store.Vantage{ID: o.VantageID, Location: o.VantageLocation, Contact: o.VantageContact}); err != nil {
		return err
	}
	guard := labnet.NewGuard() // one verdict per lab prefix for the whole run
	if o.Every == 0 {
		hour := o.Hour
		if hour.IsZero() {
			hour = time.Now().UTC().Truncate(time.Hour)
		}
		_, err := round(ctx, s, o, hour, o.Spread, guard, log)
		return err
	}
	for {
		now := time.Now().UTC()
		slot := now.Truncate(o.Every)
		// Spread what is left of this round over what is left of its window (after a
		// restart mid-round, the remaining resolvers share the remaining time).
		spread := time.Until(slot.Add(time.Duration(float64(o.Every) * spreadShare)))
		if spread < 0 {
			spread = 0
		}
		if _, err := round(ctx, s, o, slot, spread, guard, log); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if _, refused := errors.AsType[*labnet.RefusedError](err); refused {
				return err // no later round can do better from here
			}
			if errors.Is(err, store.ErrLocked) {
				log.Warn("round skipped: another run of it holds its lock", "hour", slot.Format(time.RFC3339), "err", err)
			} else {
				log.Error("round failed", "hour", slot.Format(time.RFC3339), "err", err)
			}
		}
		next := slot.Add(o.Every)
		if now2 := time.Now(); !next.After(now2) {
			missed := now2.Sub(next)/o.Every + 1
			log.Warn("round overran its interval: skipping to the next boundary", "missed", int(missed))
			next = next.Add(missed * o.Every)
		}
		log.Info("waiting for the next round", "at", next.Format(time.RFC3339))
		t := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

//nolint:unparam // the Summary is the round's result; today's callers log their own
func round(ctx context.Context, s *store.Store, o Options, hour time.Time, spread time.Duration, guard *labnet.Guard, log *slog.Logger) (*Summary, error) {
	cfg := o.Config
	cfg.Hour, cfg.Spread = hour, spread
	var targets []Target
	var err error
	if o.TargetsFile != "" {
		if targets = o.Targets; targets == nil {
			targets, err = ReadTargetsFile(o.TargetsFile)
			if err != nil {
				return nil, fmt.Errorf("targets file: %w", err) // *listfile.OpenError: exit 5, *listfile.LineError: exit 2
			}
		}
	} else {
		runID := o.RunID
		if runID == 0 {
			sel := o.Run
			sel.Vantage = cmp.Or(sel.Vantage, cfg.VantageID)
			run, err := LatestRun(ctx, s, sel)
			if err != nil {
				if errors.Is(err, context.Canceled) {
					return nil, err
				}
				return nil, cli.Environmentf("no verification run to measure (run verify first, or pass --run-id, --run-vantage or --targets): %w", err)
			}
			runID = run.RunID
			log.Info("targets from verification run", "run_id", run.RunID, "week", run.ISOWeek,
				"run_vantage", run.Vantage, "run_label", run.Label)
		} else {
			log.Info("targets from verification run", "run_id", runID)
		}
		cfg.RunID = &runID
		targets, err = LoadTargets(ctx, s, runID)
		if err != nil {
			return nil, err
		}
	}
	// The opt-out page promises that no later scan or measurement contacts an opted-out
	// address: drop them before anything is sent.
	if targets, _, err = blocklist.ExcludeForContact(ctx, s, o.BlocklistDir, targets, func(t Target) netip.Addr { return t.Addr }, "resolver", log); err != nil {
		return nil, err
	}
	// Lab addresses only from inside the testbed, checked before anything is written.
	for _, t := range targets {
		if err := guard.Check(t.Addr); err != nil {
			return nil, err
		}
	}
	if len(targets) == 0 {
		return nil, cli.Environmentf("no targets to measure")
	}
	if o.Rerun {
		taken, err := s.AttemptLabels(ctx, "campaigns", "vantage_id = $2 AND round_hour = $3", cfg.Label, cfg.VantageID, hour)
		if err != nil {
			return nil, err
		}
		if cfg.Label = store.AttemptLabel(cfg.Label, taken); cfg.Label != o.Label {
			log.Info("--rerun: the round is measured again as a new attempt, under its own label", "label", cfg.Label,
				"first_attempt", o.Label, "hour", hour.Format(time.RFC3339))
		}
	}
	pr := o.printer()
	cfg.OnResolver = pr.print
	sum, err := Run(ctx, s, cfg, targets, log)
	pr.done(sum, log)
	return sum, err
}
