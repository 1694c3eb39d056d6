package probe

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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
	log := c.Log
	safety := c.Safety
	if safety == nil {
		var err error
		if safety, err = PrepareSafety(ctx, c.Store, c.Targets, c.Testbed, c.InternetWide, c.BlocklistDir, nil); err != nil {
			return nil, err
		}
	}
	pl, err := newPlan(c.QUIC, c.DNS, c.QUICPorts, c.DNSPorts)
	if err != nil {
		return nil, err
	}
	ver := c.ZmapVersion
	if ver == nil {
		v, err := DetectZmap(ctx, c.Zmap.Binary)
		if err != nil {
			return nil, err
		}
		ver = &v
	}
	c.Zmap.Dialect = ver.Dialect
	log.Info("zmap", "binary", ver.Binary, "version", ver.Raw, "dialect", ver.Dialect.Name, "several_ports_per_run", ver.Dialect.MultiPort)
	quicPkt, dnsPkt, ports, order, cl := pl.quicPkt, pl.dnsPkt, pl.kinds, pl.order, pl.cl
	if err := checkPace(c.Zmap, safety, min(len(quicPkt), len(dnsPkt))); err != nil {
		return nil, err
	}
	dir := RunDir(c.OutDir, c.Week, c.VantageID, c.Label, c.Shard)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("run directory: %w", err)
	}
	write := func(name string, data []byte) (string, error) {
		p, err := filepath.Abs(filepath.Join(dir, name))
		if err != nil {
			return "", err
		}
		return p, os.WriteFile(p, data, 0o644)
	}
	quicFile, err := write("quic.pkt", quicPkt)
	if err != nil {
		return nil, err
	}
	dnsFile, err := write("dns.pkt", dnsPkt)
	if err != nil {
		return nil, err
	}
	var bl, al strings.Builder
	nBlock, _ := safety.List.WriteZmap(&bl)
	blFile, err := write("blocklist.conf", []byte(bl.String()))
	if err != nil {
		return nil, err
	}
	alFile := ""
	if !c.InternetWide {
		n, _ := safety.WriteAllowlist(&al)
		if n == 0 {
			return nil, fmt.Errorf("%w: no IPv4 targets for zmap (zmap 2.1.1 scans IPv4 only; use `zprobe send` for IPv6 hitlists)", ErrBadTargets)
		}
		if alFile, err = write("allowlist.conf", []byte(al.String())); err != nil {
			return nil, err
		}
	}
	man := Manifest{Week: c.Week, Vantage: c.VantageID, Label: c.Label, Shard: c.Shard, Shards: c.Shards, Seed: c.Seed,
		Ports: map[string]string{}, QUICProbe: "quic.pkt", DNSProbe: "dns.pkt"}
	for p, k := range ports {
		man.Ports[strconv.Itoa(int(p))] = string(k)
	}
	for _, t := range safety.Targets {
		man.Targets = append(man.Targets, t.String())
	}
	mb, _ := json.MarshalIndent(man, "", "  ")
	if _, err := write("manifest.json", mb); err != nil {
		return nil, err
	}
	log.Info("blocklist ready", "file", blFile, "ipv4_lines", nBlock, "testbed_carve_out", c.Testbed, "targets", len(safety.Targets))

	prov := pl.provenance(c.VantageID, c.VantageLocation, c.VantageContact,
		&provenance.Zmap{Binary: c.Zmap.Binary, Path: ver.Binary, Version: ver.Raw})
	log.Info("provenance", "build", prov.Build.String(), "zmap", ver.Binary, "zmap_version", ver.Raw)

	var prior store.ScanState
	if c.Store != nil {
		if err := c.Store.EnsureVantage(ctx, store.Vantage{ID: c.VantageID, Location: c.VantageLocation, Contact: c.VantageContact}); err != nil {
			return nil, store.Unavailable(err)
		}
		var found bool
		if prior, found, err = c.Store.FindScan(ctx, c.Week, c.VantageID, c.Label, c.Shard); err != nil {
			return nil, store.Unavailable(err)
		}
		if found && prior.Targets != strings.Join(man.Targets, " ") {
			// Other targets under the same key: nothing of the earlier run is reused.
			log.Warn("an earlier run of this scan had other targets: every port is sent again",
				"scan_id", prior.ID, "earlier", prior.Targets, "now", strings.Join(man.Targets, " "))
			prior.Runs = nil
		}
		if found && c.Rescan && len(prior.Runs) > 0 {
			log.Warn("--rerun: every port is sent again, also those an earlier run finished (into new raw files)", "scan_id", prior.ID)
			prior.Runs = nil
		}
		if found && prior.Status == store.RunRunning {
			log.Warn("an earlier run of this scan ended without closing it (killed, or the database went away): "+
				"its ports are settled from their raw files", "scan_id", prior.ID)
		}
	}
	probeOf := func(port uint16) []byte {
		if ports[port] == ProbeDNS {
			return dnsPkt
		}
		return quicPkt
	}
	// What each port needs: done by an earlier run (not sent), settled from an earlier
	// run's raw file (and sent if that run did not finish), or sent.
	var done, settle, send []uint16
	for _, port := range order {
		r, ok := prior.Runs[int32(port)]
		if !ok {
			send = append(send, port)
			continue
		}
		h := sha256.Sum256(probeOf(port))
		switch {
		case !bytes.Equal(r.ProbeSHA256, h[:]):
			// Another probe: the earlier run's raw file cannot be classified with this
			// one, and the port is sent again.
			log.Warn("the earlier run of this port sent another probe: sending it again", "port", port, "status", r.Status)
			send = append(send, port)
		case r.Status == store.RunOK:
			done = append(done, port)
		default:
			settle = append(settle, port)
		}
	}
	est, err := Estimate(safety, c.Zmap, c.Shards, groupPorts(append(slices.Clone(settle), send...), ports, ver.Dialect.MultiPort),
		max(len(quicPkt), len(dnsPkt)))
	if err != nil {
		return nil, err
	}
	if c.OnEstimate != nil {
		c.OnEstimate(est)
	}
	log.Info("scan estimate", "estimate", est.String(), "ports_done_earlier", len(done))
	if c.InternetWide && !c.Confirmed && (est.Duration > c.ConfirmAbove || est.RatePPS <= 0) {
		return nil, fmt.Errorf("%w: this internet-wide scan takes %s, more than %s: pass --yes to run it",
			ErrNeedsConfirmation, est, FormatDuration(c.ConfirmAbove))
	}

	var scanID int64
	if c.Store != nil {
		seed := (*int64)(nil)
		if c.Seed != nil {
			v := int64(*c.Seed)
			seed = &v
		}
		pv := int64(c.QUIC.Version)
		var rate *int32
		if c.Zmap.Rate > 0 {
			r := int32(c.Zmap.Rate)
			rate = &r
		}
		var bw *string
		if c.Zmap.Bandwidth != "" {
			bw = &c.Zmap.Bandwidth
		}
		scanID, _, err = c.Store.StartScan(ctx, store.Scan{ISOWeek: c.Week, VantageID: c.VantageID, Label: c.Label,
			Shard: c.Shard, Shards: c.Shards, Seed: seed, Ports: pl.ports32(), ProbeVersion: &pv, Sender: "zmap",
			Targets: strings.Join(man.Targets, " "), RatePPS: rate, Bandwidth: bw, Provenance: prov.JSON()})
		if err != nil {
			return nil, store.Unavailable(err)
		}
	}
	sum := &Summary{ScanID: scanID, Week: c.Week, Vantage: c.VantageID, Label: c.Label, Shard: c.Shard, Shards: c.Shards,
		Sender: "zmap", Zmap: ver.Raw, Version: fmt.Sprintf("0x%08x", c.QUIC.Version), Status: store.RunOK}
	start := time.Now()
	var runErr error
	for _, port := range done {
		r := prior.Runs[int32(port)]
		log.Info("port done by an earlier run of this scan: not sent again (--rerun sends it)", "port", port, "replies", r.Replies)
		sum.add(resumedPort(r, ports[port]))
	}
	for _, port := range settle {
		// The earlier run of this port did not end cleanly: store what its raw file
		// holds; if zmap had finished the port, it is done, else it is sent again
		// (into a new raw file: the earlier one stays).
		ps, finished, err := settlePort(ctx, c, scanID, port, ports[port], prior.Runs[int32(port)], dir, cl, log)
		if err != nil {
			runErr = err
			break
		}
		if finished {
			sum.add(ps)
			continue
		}
		send = append(send, port)
	}
	if runErr == nil {
		slices.SortStableFunc(send, func(a, b uint16) int { return cmp.Compare(slices.Index(order, a), slices.Index(order, b)) })
		for _, g := range groupPorts(send, ports, ver.Dialect.MultiPort) {
			kind := ports[g[0]]
			z := c.Zmap
			z.Port, z.Ports = g[0], g
			z.ProbeFile = quicFile
			if kind == ProbeDNS {
				z.ProbeFile = dnsFile
			}
			z.BlocklistFile, z.AllowlistFile, z.InternetWide = blFile, alFile, c.InternetWide
			z.Seed, z.Shards, z.Shard = c.Seed, c.Shards, c.Shard
			pss, err := runPorts(ctx, c, z, kind, probeOf(g[0]), dir, scanID, cl, log)
			for _, ps := range pss {
				sum.add(ps)
			}
			if err != nil {
				runErr = err
				break
			}
		}
	}
	sum.DurationS = time.Since(start).Seconds()
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
	if c.Store != nil {
		js, _ := json.Marshal(sum)
		wait := c.DBWait
		if runErr != nil { // one attempt: a run left 'running' is settled by the next run or ingest
			wait = 0
		}
		err := store.Retry(context.WithoutCancel(ctx), dbPolicy(wait), log, "finish scan", func(ctx context.Context) error {
			return store.Unavailable(c.Store.FinishScan(ctx, scanID, sum.Status, js))
		})
		if err != nil && runErr == nil {
			sum.Status = store.RunStatusOf(ctx, err) // the database went away: interrupted
			runErr = err
		}
	}
	return sum, runErr
}
