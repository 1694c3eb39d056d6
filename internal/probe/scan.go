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
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/doqscan/doqscan/blocklist"
	"github.com/doqscan/doqscan/internal/home"
	"github.com/doqscan/doqscan/internal/labnet"
	"github.com/doqscan/doqscan/internal/optout/pace"
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

// PortSummary is one port's part of a scan summary.
type PortSummary struct {
	Port        uint16          `json:"port"`
	Probe       ProbeKind       `json:"probe"`
	Status      store.RunStatus `json:"status"`
	ProbesSent  int64           `json:"probes_sent"`
	Replies     int64           `json:"replies"`
	ByKind      map[Kind]int64  `json:"replies_by_kind"`
	HitRate     float64         `json:"hit_rate"` // quic-vn (or dns) replies / probes sent
	DurationS   float64         `json:"duration_s"`
	RatePPS     float64         `json:"achieved_rate_pps"`
	Inserted    int64           `json:"rows_inserted"`
	BadLines    int64           `json:"bad_lines"`
	Blocklisted int64           `json:"blocklisted"`
	PcapDrop    int64           `json:"zmap_pcap_drop"`       // replies zmap's capture dropped
	SendFails   int64           `json:"zmap_sendto_failures"` // probes zmap failed to send
	RawOutput   string          `json:"raw_output,omitempty"`
	NoPort      int64           `json:"replies_without_port,omitempty"` // ICMP replies of a several-port run: not stored
	Resumed     bool            `json:"resumed,omitempty"`              // done by an earlier run of the scan: not sent again
}

// Summary is the scan summary printed at the end and stored in scans.summary.
type Summary struct {
	ScanID     int64           `json:"scan_id"`
	Week       string          `json:"iso_week"`
	Vantage    string          `json:"vantage_id"`
	Label      string          `json:"label"`
	Shard      int             `json:"shard"`
	Shards     int             `json:"shards"`
	Sender     string          `json:"sender"`
	Zmap       string          `json:"zmap_version,omitempty"` // as `zmap --version` said it
	Version    string          `json:"probe_version"`
	Ports      []PortSummary   `json:"ports"`
	ProbesSent int64           `json:"probes_sent"`
	Replies    int64           `json:"replies"`
	ByKind     map[Kind]int64  `json:"replies_by_kind"`
	DurationS  float64         `json:"duration_s"`
	RatePPS    float64         `json:"achieved_rate_pps"`
	Status     store.RunStatus `json:"status"`
}

func (s *Summary) add(p PortSummary) {
	s.Ports = append(s.Ports, p)
	s.ProbesSent += p.ProbesSent
	s.Replies += p.Replies
	if s.ByKind == nil {
		s.ByKind = map[Kind]int64{}
	}
	for k, v := range p.ByKind {
		s.ByKind[k] += v
	}
}

// Manifest is written next to the raw CSV files so `zprobe ingest --raw` can replay them
// with the same scan key and probes.
type Manifest struct {
	Week      string            `json:"iso_week"`
	Vantage   string            `json:"vantage_id"`
	Label     string            `json:"label"`
	Shard     int               `json:"shard"`
	Shards    int               `json:"shards"`
	Seed      *uint64           `json:"seed,omitempty"`
	Ports     map[string]string `json:"ports"` // port -> probe kind
	QUICProbe string            `json:"quic_probe"`
	DNSProbe  string            `json:"dns_probe"`
	Targets   []string          `json:"targets"`
}

// RunDir returns where a scan keeps its raw output: OutDir/<week>/<vantage>/<label>-shard<N>.
func RunDir(outDir, week, vantage, label string, shard int) string {
	return filepath.Join(outDir, week, vantage, fmt.Sprintf("%s-shard%d", label, shard))
}

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

// PrepareSafety builds the blocklist (reserved + dir + database opt-outs), checks the
// targets, and refuses lab targets unless this process runs inside the testbed
// (Safety.CheckLab with g; nil: a guard of its own).
func PrepareSafety(ctx context.Context, s *store.Store, targets []netip.Prefix, testbed *netip.Prefix, internetWide bool, dir string, g *labnet.Guard) (*Safety, error) {
	var dirEntries []blocklist.Entry
	if dir != "" {
		var err error
		if dirEntries, err = blocklist.Dir(dir); err != nil {
			return nil, err
		}
	}
	var opt []blocklist.Entry
	if s != nil {
		var err error
		if opt, err = blocklist.OptOuts(ctx, s); err != nil {
			return nil, err
		}
	}
	safety, err := BuildSafety(targets, testbed, internetWide, dirEntries, opt)
	if err != nil {
		return nil, err
	}
	if g == nil {
		g = labnet.NewGuard()
	}
	if err := safety.CheckLab(g); err != nil {
		return nil, err
	}
	return safety, nil
}

// ScanLockKey is the advisory lock of a scan (store.RunKey): its week, vantage point,
// label and shard, the natural key of the scans row. zprobe scan, send and ingest take
// it, so one process at a time sends, or settles, a scan.
func ScanLockKey(week, vantage, label string, shard int) string {
	return store.RunKey("scan", week, vantage, label, strconv.Itoa(shard))
}

// holdScanLock takes the scan's lock for a run with a store (HoldLock: a second run of
// the scan gets a *store.LockedError, exit 75, before it writes or sends anything) and
// returns the run's context (cancelled if another run takes the lock while this one's
// connection is down) and the function that releases it and reports that loss. Without
// a store there is no lock.
func holdScanLock(ctx context.Context, s *store.Store, key string, log *slog.Logger) (context.Context, func() error, error) {
	if s == nil {
		return ctx, func() error { return nil }, nil
	}
	return s.HoldLock(ctx, key, store.RetryPolicy{}, log)
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

// resumedPort is the summary of a port an earlier run of the scan finished.
func resumedPort(r store.ScanRunState, kind ProbeKind) PortSummary {
	ps := PortSummary{Port: uint16(r.Port), Probe: kind, Status: r.Status, ByKind: map[Kind]int64{}, RawOutput: r.RawOutput, Resumed: true}
	setIfPresent(&ps.ProbesSent, r.ProbesSent)
	setIfPresent(&ps.Replies, r.Replies)
	setIfPresent(&ps.Blocklisted, r.Blocklisted)
	return ps
}

// metaFor is where the zmap metadata of a raw file is kept once its run is complete
// (<ports>[.attemptN].meta.json next to <ports>[.attemptN].csv): zmap writes it (as
// metaFor+partSuffix) when it exits, and zprobe renames it after it has copied all of
// zmap's output to the raw file, so its presence says the raw file is whole (Replay
// and settlePort read it).
func metaFor(rawPath string) string {
	return strings.TrimSuffix(rawPath, ".csv") + ".meta.json"
}

const partSuffix = ".part"

// rawBase names the raw file of a zmap run: its ports joined by "_" (853, 784_853_8853).
func rawBase(ports []uint16) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(int(p))
	}
	return strings.Join(s, "_")
}

var rawNameRE = regexp.MustCompile(`^([0-9]+(?:_[0-9]+)*)(?:\.attempt([0-9]+))?\.csv$`)

// ParseRawName reads the ports and the attempt (1 for the first) from a raw file's
// name: <port>.csv, <port>_<port>....csv, <ports>.attempt<N>.csv.
func ParseRawName(name string) (ports []uint16, attempt int, err error) {
	m := rawNameRE.FindStringSubmatch(filepath.Base(name))
	if m == nil {
		return nil, 0, fmt.Errorf("raw file %s: name must be <port>[_<port>...][.attempt<N>].csv", name)
	}
	for _, f := range strings.Split(m[1], "_") {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n > 65535 {
			return nil, 0, fmt.Errorf("raw file %s: bad port %q", name, f)
		}
		ports = append(ports, uint16(n))
	}
	attempt = 1
	if m[2] != "" {
		if attempt, err = strconv.Atoi(m[2]); err != nil || attempt < 2 {
			return nil, 0, fmt.Errorf("raw file %s: bad attempt %q", name, m[2])
		}
	}
	return ports, attempt, nil
}

// createAttempt creates the raw file of a new zmap run of ports in dir: <ports>.csv for
// the first attempt, <ports>.attempt<N>.csv for the next ones. An existing file is never
// opened for writing: the raw output of an earlier attempt stays as it was.
func createAttempt(dir string, ports []uint16) (*os.File, string, error) {
	base := rawBase(ports)
	for n := 1; n < 10000; n++ {
		name := base + ".csv"
		if n > 1 {
			name = fmt.Sprintf("%s.attempt%d.csv", base, n)
		}
		p, err := filepath.Abs(filepath.Join(dir, name))
		if err != nil {
			return nil, "", err
		}
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return nil, "", fmt.Errorf("raw output: %w", err)
		}
		return f, p, nil
	}
	return nil, "", fmt.Errorf("raw output: too many attempts of %s in %s", base, dir)
}

// groupPorts splits the ports to send into zmap runs: one per port, or with zmap 4.x
// (multi) one per probe for all the ports that carry it, in scan order.
func groupPorts(send []uint16, kinds map[uint16]ProbeKind, multi bool) [][]uint16 {
	var out [][]uint16
	at := map[ProbeKind]int{}
	for _, p := range send {
		if !multi {
			out = append(out, []uint16{p})
			continue
		}
		i, ok := at[kinds[p]]
		if !ok {
			at[kinds[p]] = len(out)
			out = append(out, []uint16{p})
			continue
		}
		out[i] = append(out[i], p)
	}
	return out
}

// settlePort stores what the raw file of an earlier run of a port holds (idempotently)
// when that run did not end 'ok'. If zmap had finished the port (metaPath exists) and
// the file is whole, the port is done ('ok', not sent again); otherwise a run left
// 'running' is closed as 'interrupted' and the caller sends the port again.
func settlePort(ctx context.Context, c ScanConfig, scanID int64, port uint16, kind ProbeKind, r store.ScanRunState, dir string,
	cl *Classifier, log *slog.Logger) (PortSummary, bool, error) {
	ps := PortSummary{Port: port, Probe: kind, Status: r.Status, RawOutput: r.RawOutput, Resumed: true}
	if r.RawOutput == "" {
		return ps, false, nil
	}
	plog := log.With("port", port, "raw", r.RawOutput)
	var in *Ingest
	err := store.Retry(ctx, dbPolicy(c.DBWait), plog, "recover port", func(ctx context.Context) error {
		f, err := os.Open(r.RawOutput)
		if errors.Is(err, os.ErrNotExist) {
			plog.Warn("the earlier run's raw file is gone: nothing to recover", "status", r.Status)
			in = nil
			return nil
		}
		if err != nil {
			return err
		}
		defer f.Close()
		in = NewIngest(c.Store, scanID, cl, plog)
		if fp, _, err := ParseRawName(r.RawOutput); err == nil && len(fp) > 1 {
			in.Ports = fp
		}
		return IngestCSV(ctx, f, port, in)
	})
	if err != nil {
		return ps, false, fmt.Errorf("port %d: recover the earlier run's raw output: %w", port, err)
	}
	if in == nil {
		return ps, false, nil
	}
	meta, merr := ReadZmapMeta(metaFor(r.RawOutput))
	done := merr == nil && !in.Truncated && filepath.Dir(r.RawOutput) == mustAbs(dir)
	plog.Info("earlier run of the port recovered from its raw file", "status", r.Status, "zmap_finished", done,
		"lines", in.Lines, "replies", in.Replies, "rows_new", in.Inserted, "bad_lines", in.Bad, "truncated_last_line", in.Truncated)
	ps.Replies, ps.Inserted, ps.BadLines, ps.ByKind = in.Replies, in.Inserted, in.Bad, in.Counts[port]
	if len(in.Ports) > 1 {
		ps.Replies = countOf(in.Counts[port])
	}
	if ps.ByKind == nil {
		ps.ByKind = map[Kind]int64{}
	}
	status, sent := store.RunInterrupted, r.ProbesSent
	if done {
		ps.ProbesSent = meta.TotalSent / int64(max(len(in.Ports), 1))
		status, sent = store.RunOK, &ps.ProbesSent
		ps.PcapDrop, ps.SendFails = meta.PcapDrop, meta.SendToFailures
	} else if r.Status != store.RunRunning {
		return ps, false, nil
	}
	ps.Status = status
	err = store.Retry(ctx, dbPolicy(c.DBWait), plog, "recover port", func(ctx context.Context) error {
		return store.Unavailable(c.Store.FinishScanRun(ctx, scanID, r.Port, status, sent, &ps.Replies, r.Blocklisted))
	})
	return ps, done, err
}

func mustAbs(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	return a
}

// countOf is the number of replies of one port's counts.
func countOf(byKind map[Kind]int64) int64 {
	var n int64
	for _, v := range byKind {
		n += v
	}
	return n
}

// runPorts runs zmap once for z.Ports (one port, or several with zmap 4.x) into a new
// raw file and returns a summary per port. Of a several-port run, zmap's metadata gives
// the probes of the whole run: each port is given an equal share (zmap sends every
// address to every port), and rows_inserted of the run is on its first port.
func runPorts(ctx context.Context, c ScanConfig, z ZmapRun, kind ProbeKind, pkt []byte, dir string, scanID int64, cl *Classifier, log *slog.Logger) ([]PortSummary, error) {
	ports := z.Ports
	if len(ports) == 0 {
		ports = []uint16{z.Port}
	}
	z.Ports = ports
	pss := make([]PortSummary, len(ports))
	for i, p := range ports {
		pss[i] = PortSummary{Port: p, Probe: kind, Status: store.RunFailed}
	}
	// The metadata name is the raw file's: zmap's command line is known once the raw
	// file exists; a failing command line leaves an empty raw file (a failed attempt).
	raw, rawPath, err := createAttempt(dir, ports)
	if err != nil {
		return pss, err
	}
	defer raw.Close()
	z.MetadataFile = metaFor(rawPath) + partSuffix
	args, err := z.Args()
	if err != nil {
		return pss, err
	}
	for i := range pss {
		pss[i].RawOutput = rawPath
	}
	plog := log.With("ports", rawBase(ports), "probe", kind, "raw", filepath.Base(rawPath))
	h := sha256.Sum256(pkt)
	if c.Store != nil {
		err := store.Retry(ctx, dbPolicy(c.DBWait), plog, "start port", func(ctx context.Context) error {
			for _, p := range ports {
				if err := c.Store.StartScanRun(ctx, store.ScanRun{ScanID: scanID, Port: int32(p), ProbeKind: string(kind),
					ProbeSHA256: h[:], ZmapArgs: args, RawOutput: rawPath}); err != nil {
					return store.Unavailable(err)
				}
			}
			return nil
		})
		if err != nil {
			return pss, err
		}
	}
	// A metadata file left from an earlier run whose raw file is gone must not make this
	// run look finished.
	for _, f := range []string{metaFor(rawPath), z.MetadataFile} {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return pss, err
		}
	}
	plog.Info("zmap starting", "args", strings.Join(args, " "))
	start := time.Now()
	cmd, stdout, status, err := StartZmap(ctx, z.Binary, args, plog)
	if err != nil {
		return pss, err
	}
	multi := len(ports) > 1
	newIngest := func() *Ingest {
		in := NewIngest(c.Store, scanID, cl, plog)
		if multi {
			in.Ports = ports
		}
		return in
	}
	in := newIngest()
	// Relay progress: zmap prints a status line a second; log one every 5 s.
	progDone := make(chan struct{})
	var lastStatus ZmapStatus
	go func() {
		defer close(progDone)
		var last time.Time
		for st := range status {
			lastStatus = st
			if time.Since(last) >= 5*time.Second || st.Done {
				plog.Info("zmap progress", "elapsed", st.Elapsed, "percent", st.Percent, "sent", st.Sent,
					"send_rate", st.SendRate, "recv", st.Recv, "hitrate_pct", st.HitRate)
				last = time.Now()
			}
		}
	}()
	streamErr := StreamCSV(ctx, stdout, raw, ports[0], in, c.FlushEvery)
	waitErr := cmd.Wait()
	<-progDone
	if streamErr == nil && waitErr == nil {
		// zmap finished and the raw file holds all of its output (synced by StreamCSV).
		if err := os.Rename(z.MetadataFile, metaFor(rawPath)); err != nil {
			plog.Warn("no zmap metadata", "err", err)
		} else {
			z.MetadataFile = metaFor(rawPath)
		}
	}
	if in.Deferred > 0 && streamErr == nil && waitErr == nil {
		// The database fell behind or went away during the scan: replay the complete raw
		// file when it answers (the rows already stored are dropped by the table's key).
		plog.Warn("not every reply reached the database during the scan; replaying the raw output", "deferred_lines", in.Deferred)
		var again *Ingest
		streamErr = store.Retry(ctx, dbPolicy(c.DBWait), plog, "replay raw output", func(ctx context.Context) error {
			f, err := os.Open(rawPath)
			if err != nil {
				return err
			}
			defer f.Close()
			again = newIngest()
			return IngestCSV(ctx, f, ports[0], again)
		})
		if streamErr == nil {
			again.Inserted += in.Inserted
			in = again
		}
	}
	if in.NoPort > 0 {
		plog.Warn("ICMP replies of a several-port zmap run name no port: counted, not stored", "replies_without_port", in.NoPort)
	}
	dur := time.Since(start).Seconds()
	meta, metaErr := ReadZmapMeta(z.MetadataFile)
	if metaErr != nil {
		plog.Warn("no zmap metadata", "err", metaErr)
	} else {
		if meta.SendToFailures > 0 {
			plog.Warn("zmap failed to send probes", "sendto_failures", meta.SendToFailures)
		}
		if meta.PcapDrop > 0 {
			plog.Warn("zmap's capture dropped replies", "pcap_drop", meta.PcapDrop)
		}
	}
	for i := range pss {
		ps := &pss[i]
		ps.DurationS = dur
		ps.Replies, ps.BadLines = in.Replies, in.Bad
		ps.ByKind = in.Counts[ps.Port]
		if ps.ByKind == nil {
			ps.ByKind = map[Kind]int64{}
		}
		if multi {
			ps.Replies = countOf(ps.ByKind)
			if i == 0 {
				ps.NoPort = in.NoPort
			}
		}
		if i == 0 {
			ps.Inserted = in.Inserted
		}
		if meta != nil {
			ps.ProbesSent = meta.TotalSent / int64(len(ports))
			ps.PcapDrop, ps.SendFails = meta.PcapDrop, meta.SendToFailures
			// Addresses of the targets zmap excluded through -b (zmap counts everything
			// outside the allowlist as "not allowed" too).
			ps.Blocklisted = max(0, targetSpace(c.Targets, c.InternetWide, c.Testbed)-meta.Allowed)
		}
		hits := ps.ByKind[KindQUICVN]
		if kind == ProbeDNS {
			hits = ps.ByKind[KindDNS]
		}
		if ps.ProbesSent > 0 {
			ps.HitRate = float64(hits) / float64(ps.ProbesSent)
		}
		// zmap's own average send rate (its last status line) is the achieved rate; the
		// wall-clock duration also holds start-up and the cooldown.
		if r, ok := ParseRate(lastStatus.SendRate); ok {
			ps.RatePPS = r / float64(len(ports))
		} else if ps.DurationS > 0 {
			ps.RatePPS = float64(ps.ProbesSent) / ps.DurationS
		}
	}
	err = errors.Join(streamErr, waitErr)
	wait := c.DBWait
	switch {
	case err == nil:
	case ctx.Err() != nil:
		err = fmt.Errorf("ports %s: %w", rawBase(ports), context.Canceled)
		wait = 0
	case store.IsUnavailable(err):
		err = fmt.Errorf("ports %s: %w", rawBase(ports), store.Unavailable(err))
		wait = 0
	default:
		err = fmt.Errorf("ports %s: %w", rawBase(ports), err)
	}
	runStatus := store.RunStatusOf(ctx, err)
	for i := range pss {
		pss[i].Status = runStatus
	}
	if c.Store != nil {
		ferr := store.Retry(context.WithoutCancel(ctx), dbPolicy(wait), plog, "finish port", func(ctx context.Context) error {
			for _, ps := range pss {
				sent, rep, bl := ps.ProbesSent, ps.Replies, ps.Blocklisted
				if err := c.Store.FinishScanRun(ctx, scanID, int32(ps.Port), ps.Status, &sent, &rep, &bl); err != nil {
					return store.Unavailable(err)
				}
			}
			return nil
		})
		if ferr != nil && err == nil {
			for i := range pss {
				pss[i].Status = store.RunStatusOf(ctx, ferr) // the database went away: interrupted
			}
			err = ferr
		}
	}
	for _, ps := range pss {
		plog.Info("port done", "port", ps.Port, "status", ps.Status, "sent", ps.ProbesSent, "replies", ps.Replies, "by_kind", ps.ByKind,
			"rows_new", ps.Inserted, "duration_s", ps.DurationS)
	}
	return pss, err
}

// targetSpace is the number of IPv4 addresses the targets cover (overlaps counted once
// per prefix; zprobe's targets do not overlap in practice).
func targetSpace(targets []netip.Prefix, internetWide bool, testbed *netip.Prefix) int64 {
	if internetWide {
		return 1 << 32
	}
	if len(targets) == 0 && testbed != nil {
		targets = []netip.Prefix{*testbed}
	}
	var n int64
	for _, t := range targets {
		if t.Addr().Is4() {
			n += 1 << (32 - t.Bits())
		}
	}
	return n
}

// plan is what a scan sends: the probe payloads, the probe kind per port (in scan
// order), and the classifier for the replies.
type plan struct {
	quicPkt, dnsPkt []byte
	kinds           map[uint16]ProbeKind
	order           []uint16
	cl              *Classifier
}

// newPlan builds the probes and assigns them to ports; a port may carry one probe only.
func newPlan(q QUICProbe, d DNSProbe, quicPorts, dnsPorts []uint16) (*plan, error) {
	quicPkt, err := q.Build()
	if err != nil {
		return nil, err
	}
	dnsPkt, err := d.Build()
	if err != nil {
		return nil, err
	}
	pl := &plan{quicPkt: quicPkt, dnsPkt: dnsPkt, kinds: map[uint16]ProbeKind{}}
	for _, p := range quicPorts {
		if _, dup := pl.kinds[p]; dup {
			return nil, fmt.Errorf("port %d given twice", p)
		}
		pl.kinds[p] = ProbeQUIC
		pl.order = append(pl.order, p)
	}
	for _, p := range dnsPorts {
		if _, dup := pl.kinds[p]; dup {
			return nil, fmt.Errorf("port %d given for both probes", p)
		}
		pl.kinds[p] = ProbeDNS
		pl.order = append(pl.order, p)
	}
	if len(pl.order) == 0 {
		return nil, errors.New("no ports to scan")
	}
	if pl.cl, err = NewClassifier(q, d, pl.kinds); err != nil {
		return nil, err
	}
	return pl, nil
}

// ports32 is the scan order as the scans table stores it.
func (pl *plan) ports32() []int32 {
	out := make([]int32, len(pl.order))
	for i, p := range pl.order {
		out[i] = int32(p)
	}
	return out
}

// checkPace refuses a scan that would send more than the opt-out page promises
// (pace.MaxPerSlash16 probes per second on average) towards some /16: zmap runs once
// per port at z's rate, spread by its random permutation over the targets (all of IPv4
// for an internet-wide scan) minus the blocklist. smallest is the shortest probe
// payload, the fastest a --bandwidth turns into packets.
func checkPace(z ZmapRun, safety *Safety, smallest int) error {
	if smallest <= 0 {
		smallest = 1
	}
	rate, err := z.PacketsPerSecond(smallest)
	if err != nil {
		return err
	}
	var targets []netip.Prefix
	if !safety.InternetWide {
		targets = safety.Targets
	}
	var excluded []netip.Prefix
	for _, e := range safety.List.Effective() {
		excluded = append(excluded, e.Prefix)
	}
	return pace.CheckScanPace(rate, targets, excluded)
}

// probes describes the plan's payloads for a provenance record (kind, ports, SHA-256).
func (pl *plan) probes() []provenance.Probe {
	var out []provenance.Probe
	for _, k := range []ProbeKind{ProbeQUIC, ProbeDNS} {
		pkt := pl.quicPkt
		if k == ProbeDNS {
			pkt = pl.dnsPkt
		}
		var ports []int
		for _, p := range pl.order {
			if pl.kinds[p] == k {
				ports = append(ports, int(p))
			}
		}
		if len(ports) > 0 {
			h := sha256.Sum256(pkt)
			out = append(out, provenance.NewProbe(string(k), ports, h[:]))
		}
	}
	return out
}

// provenance is the record of a scan from this vantage point with this plan; z is the
// zmap that sends it (nil: the built-in sender).
func (pl *plan) provenance(vantage, location, contact string, z *provenance.Zmap) provenance.Record {
	r := provenance.New("zprobe", provenance.Vantage{ID: vantage, Location: location, Contact: contact})
	r.Zmap, r.Probes = z, pl.probes()
	return r
}
