package probe

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"time"

	"github.com/doqscan/doqscan/internal/home"
	"github.com/doqscan/doqscan/internal/provenance"
	"github.com/doqscan/doqscan/internal/runkey"
	"github.com/doqscan/doqscan/internal/store"
)

// Default ports: the three ports the DoQ drafts proposed (784, 853 since RFC 9250, 8853)
// with the QUIC probe, and DNS on 53 (RFC 1035) for comparison.
var (
	DefaultQUICPorts = []uint16{784, 853, 8853}
	DefaultDNSPorts  = []uint16{53}
)

// ScanConfig is one zmap scan: every port, one scan row.
type ScanConfig struct {
	Store        *store.Store
	Log          *slog.Logger
	VantageID    string
	Label        string // default "weekly"
	Week         string // ISO week (2026-W47); default: the current week
	Shard        int
	Shards       int
	Seed         *uint64
	QUICPorts    []uint16
	DNSPorts     []uint16
	QUIC         QUICProbe
	DNS          DNSProbe
	Targets      []netip.Prefix
	Testbed      *netip.Prefix
	InternetWide bool
	BlocklistDir string  // blocklist/ (its *.conf files)
	Safety       *Safety // built by PrepareSafety from the fields above; nil: Scan builds it
	OutDir       string  // var/scans
	Zmap         ZmapRun // template: binary, rate, bandwidth, interface, gateway, cooldown...
	FlushEvery   time.Duration
	DBWait       time.Duration // how long to wait for an unavailable database (default DefaultDBWait)
	// VantageLocation and VantageContact describe the vantage point (vantage_points and
	// the scan's provenance); "" keeps what the database has.
	VantageLocation, VantageContact string

	// ZmapVersion is the zmap Zmap.Binary is (DetectZmap); nil: Scan detects it.
	ZmapVersion *ZmapVersion
	// Rescan sends every port again, also those an earlier run of the scan finished
	// (each into a new raw file; the earlier files stay).
	Rescan bool
	// Confirmed allows an internet-wide scan estimated to take longer than
	// ConfirmAbove (default DefaultConfirmAbove); without it Scan refuses
	// (ErrNeedsConfirmation) before anything is sent.
	Confirmed    bool
	ConfirmAbove time.Duration
	// OnEstimate, if set, is called with the scan's estimate before anything is sent.
	OnEstimate func(ScanEstimate)
}

// DefaultDBWait is how long a scan waits for an unavailable database before it stops
// with store.ErrUnavailable (exit 3). zmap's output meanwhile goes to the raw file, and
// what did not reach the database is ingested when it is back, or by the next run.
const DefaultDBWait = 10 * time.Minute

// defaultRun fills what a scan and a send leave unset alike: the logger (discard), the
// week (the current one), the ports and the probes (the defaults).
func defaultRun(log **slog.Logger, week *string, quicPorts, dnsPorts *[]uint16, q *QUICProbe, d *DNSProbe) {
	if *log == nil {
		*log = slog.New(slog.DiscardHandler)
	}
	if *week == "" {
		*week = runkey.Week(time.Now())
	}
	if *quicPorts == nil && *dnsPorts == nil {
		*quicPorts, *dnsPorts = DefaultQUICPorts, DefaultDNSPorts
	}
	if q.DCID == nil {
		*q = DefaultQUICProbe()
	}
	if d.QName == "" {
		*d = DefaultDNSProbe()
	}
}

func (c *ScanConfig) defaults() {
	if c.Label == "" {
		c.Label = "weekly"
	}
	if c.Shards == 0 {
		c.Shards = 1
	}
	defaultRun(&c.Log, &c.Week, &c.QUICPorts, &c.DNSPorts, &c.QUIC, &c.DNS)
	if c.OutDir == "" {
		c.OutDir = home.Path("var", "scans")
	}
	if c.DBWait <= 0 {
		c.DBWait = DefaultDBWait
	}
	if c.ConfirmAbove <= 0 {
		c.ConfirmAbove = DefaultConfirmAbove
	}
	if c.Zmap.Rate == 0 && c.Zmap.Bandwidth == "" {
		c.Zmap.Rate = DefaultRate
	}
}

// dbPolicy is how a scan waits for an unavailable database (store.Retry): for wait
// after the first failure; an attempt may take long (replaying a raw file) and stops
// when ctx ends, which ends the wait with ctx's error. Every operation it retries is
// idempotent.
func dbPolicy(wait time.Duration) store.RetryPolicy {
	return store.RetryPolicy{Deadline: wait, Attempt: store.NoDeadline, Interruptible: true}
}

// Scan runs zmap once per port, streams every reply through the classifier into the
// store while zmap runs, keeps zmap's raw CSV on disk, and returns the summary. It
// holds the scan's lock (ScanLockKey) throughout.
//
// Its steps: planScan (safety, probes, zmap, run directory, earlier runs, estimate, the
// scan's row), scanRun.run (settle and send the ports), scanRun.finish (the summary's
// totals and the scan's row closed).
func Scan(ctx context.Context, c ScanConfig) (_ *Summary, retErr error) {
	c.defaults()
	ctx, release, err := holdScanLock(ctx, c.Store, ScanLockKey(c.Week, c.VantageID, c.Label, c.Shard), c.Log)
	if err != nil {
		return nil, err
	}
	defer func() {
		if lost := release(); lost != nil {
			retErr = errors.Join(retErr, lost)
		}
	}()
	r, err := planScan(ctx, c)
	if err != nil {
		return nil, err
	}
	sum, runErr := r.run(ctx)
	return r.finish(ctx, sum, runErr)
}

// scanRun is one run of a scan from its plan to its summary: what Scan's steps share.
type scanRun struct {
	c      ScanConfig // defaults filled; c.Zmap.Dialect set by detectZmap
	log    *slog.Logger
	safety *Safety
	pl     *plan
	ver    *ZmapVersion
	dir    string   // RunDir: probes, lists, manifest and raw files
	files  runFiles // what zmap reads from dir
	man    Manifest
	prov   provenance.Record
	prior  store.ScanState // the scan's earlier runs (none without a store)
	// The ports by what they need (sortPorts): done by an earlier run (not sent),
	// settled from an earlier run's raw file (and sent if that run did not finish), sent.
	done, settle, send []uint16
	scanID             int64 // 0 without a store
}

// runFiles are the files of a run directory zmap reads (absolute paths).
type runFiles struct {
	quic, dns, blocklist string
	allowlist            string // "" for an internet-wide scan
}

// run settles and sends the ports (those done earlier only counted) and returns the
// summary of the ports so far with the error that stopped the ports after it.
func (r *scanRun) run(ctx context.Context) (*Summary, error) {
	c := r.c
	sum := &Summary{ScanID: r.scanID, Week: c.Week, Vantage: c.VantageID, Label: c.Label, Shard: c.Shard, Shards: c.Shards,
		Sender: "zmap", Zmap: r.ver.Raw, Version: fmt.Sprintf("0x%08x", c.QUIC.Version), Status: store.RunOK}
	start := time.Now()
	err := r.settleAndSend(ctx, sum)
	sum.DurationS = time.Since(start).Seconds()
	return sum, err
}

// settleAndSend adds the ports done earlier to sum, settles the ports of an earlier
// run that did not end cleanly, and sends the rest in scan order, one zmap run per
// group of ports; it stops at the first error.
func (r *scanRun) settleAndSend(ctx context.Context, sum *Summary) error {
	kinds := r.pl.kinds
	for _, port := range r.done {
		pr := r.prior.Runs[int32(port)]
		r.log.Info("port done by an earlier run of this scan: not sent again (--rerun sends it)", "port", port, "replies", pr.Replies)
		sum.add(resumedPort(pr, kinds[port]))
	}
	for _, port := range r.settle {
		// The earlier run of this port did not end cleanly: store what its raw file
		// holds; if zmap had finished the port, it is done, else it is sent again
		// (into a new raw file: the earlier one stays).
		ps, finished, err := settlePort(ctx, r.c, r.scanID, port, kinds[port], r.prior.Runs[int32(port)], r.dir, r.pl.cl, r.log)
		if err != nil {
			return err
		}
		if finished {
			sum.add(ps)
			continue
		}
		r.send = append(r.send, port)
	}
	order := r.pl.order
	slices.SortStableFunc(r.send, func(a, b uint16) int { return cmp.Compare(slices.Index(order, a), slices.Index(order, b)) })
	for _, g := range groupPorts(r.send, kinds, r.ver.Dialect.MultiPort) {
		pss, err := runPorts(ctx, r.c, r.zmapRun(g), kinds[g[0]], r.pl.packet(g[0]), r.dir, r.scanID, r.pl.cl, r.log)
		for _, ps := range pss {
			sum.add(ps)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// zmapRun is the zmap invocation of one group of ports: the configured template with
// the group's ports and probe, the run directory's lists, and the shard.
func (r *scanRun) zmapRun(ports []uint16) ZmapRun {
	c := r.c
	z := c.Zmap
	z.Port, z.Ports = ports[0], ports
	z.ProbeFile = r.files.quic
	if r.pl.kinds[ports[0]] == ProbeDNS {
		z.ProbeFile = r.files.dns
	}
	z.BlocklistFile, z.AllowlistFile, z.InternetWide = r.files.blocklist, r.files.allowlist, c.InternetWide
	z.Seed, z.Shards, z.Shard = c.Seed, c.Shards, c.Shard
	return z
}

// finish completes the summary (the achieved rate over the time spent sending, the
// status) and closes the scan's row with it: waiting for the database after a clean
// run, one attempt after a failed one (a run left 'running' is settled by the next run
// or ingest).
func (r *scanRun) finish(ctx context.Context, sum *Summary, runErr error) (*Summary, error) {
	var sendS float64 // time spent sending, at each port's achieved rate
	for _, p := range sum.Ports {
		if p.RatePPS > 0 {
			sendS += float64(p.ProbesSent) / p.RatePPS
		}
	}
	if sendS > 0 {
		sum.RatePPS = float64(sum.ProbesSent) / sendS
	}
	if runErr != nil {
		sum.Status = store.RunStatusOf(ctx, runErr)
	}
	if r.c.Store == nil {
		return sum, runErr
	}
	js, _ := json.Marshal(sum)
	wait := r.c.DBWait
	if runErr != nil {
		wait = 0
	}
	err := store.Retry(context.WithoutCancel(ctx), dbPolicy(wait), r.log, "finish scan", func(ctx context.Context) error {
		return store.Unavailable(r.c.Store.FinishScan(ctx, r.scanID, sum.Status, js))
	})
	if err != nil && runErr == nil {
		sum.Status = store.RunStatusOf(ctx, err) // the database went away: interrupted
		runErr = err
	}
	return sum, runErr
}
