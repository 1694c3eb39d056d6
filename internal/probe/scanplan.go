package probe

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/doqscan/doqscan/internal/provenance"
	"github.com/doqscan/doqscan/internal/store"
)

// planScan is the plan of a scan, in the order Scan always took it: the safety policy
// (c.Safety, or PrepareSafety), the probes and their ports, the zmap that sends them,
// the pace check, the run directory's files, the provenance, what earlier runs of the
// scan did, the estimate (refused for a long internet-wide scan without Confirmed), and
// the scan's row. Nothing is sent before it returns.
func planScan(ctx context.Context, c ScanConfig) (*scanRun, error) {
	r := &scanRun{c: c, log: c.Log, safety: c.Safety}
	var err error
	if r.safety == nil {
		if r.safety, err = PrepareSafety(ctx, c.Store, c.Targets, c.Testbed, c.InternetWide, c.BlocklistDir, nil); err != nil {
			return nil, err
		}
	}
	if r.pl, err = newPlan(c.QUIC, c.DNS, c.QUICPorts, c.DNSPorts); err != nil {
		return nil, err
	}
	if err := r.detectZmap(ctx); err != nil {
		return nil, err
	}
	if err := checkPace(r.c.Zmap, r.safety, min(len(r.pl.quicPkt), len(r.pl.dnsPkt))); err != nil {
		return nil, err
	}
	if err := r.writeRunDir(); err != nil {
		return nil, err
	}
	r.prov = r.pl.provenance(c.VantageID, c.VantageLocation, c.VantageContact,
		&provenance.Zmap{Binary: c.Zmap.Binary, Path: r.ver.Binary, Version: r.ver.Raw})
	r.log.Info("provenance", "build", r.prov.Build.String(), "zmap", r.ver.Binary, "zmap_version", r.ver.Raw)
	if err := r.readPrior(ctx); err != nil {
		return nil, err
	}
	r.sortPorts()
	if err := r.estimate(); err != nil {
		return nil, err
	}
	if err := r.startScan(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

// detectZmap finds the version of zmap (c.ZmapVersion, or DetectZmap) and gives its
// dialect to the zmap template.
func (r *scanRun) detectZmap(ctx context.Context) error {
	r.ver = r.c.ZmapVersion
	if r.ver == nil {
		v, err := DetectZmap(ctx, r.c.Zmap.Binary)
		if err != nil {
			return err
		}
		r.ver = &v
	}
	r.c.Zmap.Dialect = r.ver.Dialect
	r.log.Info("zmap", "binary", r.ver.Binary, "version", r.ver.Raw, "dialect", r.ver.Dialect.Name,
		"several_ports_per_run", r.ver.Dialect.MultiPort)
	return nil
}

// writeRunDir writes what zmap reads and a replay needs into the run directory: the
// probes, the blocklist, the allowlist (not for an internet-wide scan, and refused when
// no IPv4 target is left) and the manifest.
func (r *scanRun) writeRunDir() error {
	c := r.c
	r.dir = RunDir(c.OutDir, c.Week, c.VantageID, c.Label, c.Shard)
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return fmt.Errorf("run directory: %w", err)
	}
	var err error
	if r.files.quic, err = writeRunFile(r.dir, "quic.pkt", r.pl.quicPkt); err != nil {
		return err
	}
	if r.files.dns, err = writeRunFile(r.dir, "dns.pkt", r.pl.dnsPkt); err != nil {
		return err
	}
	var bl, al strings.Builder
	nBlock, _ := r.safety.List.WriteZmap(&bl)
	if r.files.blocklist, err = writeRunFile(r.dir, "blocklist.conf", []byte(bl.String())); err != nil {
		return err
	}
	if !c.InternetWide {
		n, _ := r.safety.WriteAllowlist(&al)
		if n == 0 {
			return fmt.Errorf("%w: no IPv4 targets for zmap (zmap 2.1.1 scans IPv4 only; use `zprobe send` for IPv6 hitlists)", ErrBadTargets)
		}
		if r.files.allowlist, err = writeRunFile(r.dir, "allowlist.conf", []byte(al.String())); err != nil {
			return err
		}
	}
	r.man = r.manifest()
	mb, _ := json.MarshalIndent(r.man, "", "  ")
	if _, err := writeRunFile(r.dir, "manifest.json", mb); err != nil {
		return err
	}
	r.log.Info("blocklist ready", "file", r.files.blocklist, "ipv4_lines", nBlock, "testbed_carve_out", c.Testbed,
		"targets", len(r.safety.Targets))
	return nil
}

// writeRunFile writes one file of a run directory and returns its absolute path.
func writeRunFile(dir, name string, data []byte) (string, error) {
	p, err := filepath.Abs(filepath.Join(dir, name))
	if err != nil {
		return "", err
	}
	return p, os.WriteFile(p, data, 0o644)
}

// manifest is the scan's Manifest: its key, its ports and probe files, its targets.
func (r *scanRun) manifest() Manifest {
	c := r.c
	man := Manifest{Week: c.Week, Vantage: c.VantageID, Label: c.Label, Shard: c.Shard, Shards: c.Shards, Seed: c.Seed,
		Ports: map[string]string{}, QUICProbe: "quic.pkt", DNSProbe: "dns.pkt"}
	for p, k := range r.pl.kinds {
		man.Ports[strconv.Itoa(int(p))] = string(k)
	}
	for _, t := range r.safety.Targets {
		man.Targets = append(man.Targets, t.String())
	}
	return man
}

// readPrior records the vantage point and reads what earlier runs of the scan did
// (with a store). Their ports are not reused when the targets changed or with Rescan.
func (r *scanRun) readPrior(ctx context.Context) error {
	c := r.c
	if c.Store == nil {
		return nil
	}
	if err := c.Store.EnsureVantage(ctx, store.Vantage{ID: c.VantageID, Location: c.VantageLocation, Contact: c.VantageContact}); err != nil {
		return store.Unavailable(err)
	}
	prior, found, err := c.Store.FindScan(ctx, c.Week, c.VantageID, c.Label, c.Shard)
	if err != nil {
		return store.Unavailable(err)
	}
	if found && prior.Targets != strings.Join(r.man.Targets, " ") {
		// Other targets under the same key: nothing of the earlier run is reused.
		r.log.Warn("an earlier run of this scan had other targets: every port is sent again",
			"scan_id", prior.ID, "earlier", prior.Targets, "now", strings.Join(r.man.Targets, " "))
		prior.Runs = nil
	}
	if found && c.Rescan && len(prior.Runs) > 0 {
		r.log.Warn("--rerun: every port is sent again, also those an earlier run finished (into new raw files)", "scan_id", prior.ID)
		prior.Runs = nil
	}
	if found && prior.Status == store.RunRunning {
		r.log.Warn("an earlier run of this scan ended without closing it (killed, or the database went away): "+
			"its ports are settled from their raw files", "scan_id", prior.ID)
	}
	r.prior = prior
	return nil
}

// sortPorts sorts the ports, in scan order, by what each needs: done by an earlier run
// (not sent), settled from an earlier run's raw file (and sent if that run did not
// finish), or sent.
func (r *scanRun) sortPorts() {
	for _, port := range r.pl.order {
		pr, ok := r.prior.Runs[int32(port)]
		if !ok {
			r.send = append(r.send, port)
			continue
		}
		h := sha256.Sum256(r.pl.packet(port))
		switch {
		case !bytes.Equal(pr.ProbeSHA256, h[:]):
			// Another probe: the earlier run's raw file cannot be classified with this
			// one, and the port is sent again.
			r.log.Warn("the earlier run of this port sent another probe: sending it again", "port", port, "status", pr.Status)
			r.send = append(r.send, port)
		case pr.Status == store.RunOK:
			r.done = append(r.done, port)
		default:
			r.settle = append(r.settle, port)
		}
	}
}

// estimate estimates the ports to settle and send, gives the estimate to OnEstimate and
// the log, and refuses (ErrNeedsConfirmation) an internet-wide scan estimated longer
// than ConfirmAbove, or at no rate, without Confirmed.
func (r *scanRun) estimate() error {
	c := r.c
	groups := groupPorts(append(slices.Clone(r.settle), r.send...), r.pl.kinds, r.ver.Dialect.MultiPort)
	est, err := Estimate(r.safety, c.Zmap, c.Shards, groups, max(len(r.pl.quicPkt), len(r.pl.dnsPkt)))
	if err != nil {
		return err
	}
	if c.OnEstimate != nil {
		c.OnEstimate(est)
	}
	r.log.Info("scan estimate", "estimate", est.String(), "ports_done_earlier", len(r.done))
	if c.InternetWide && !c.Confirmed && (est.Duration > c.ConfirmAbove || est.RatePPS <= 0) {
		return fmt.Errorf("%w: this internet-wide scan takes %s, more than %s: pass --yes to run it",
			ErrNeedsConfirmation, est, FormatDuration(c.ConfirmAbove))
	}
	return nil
}

// startScan opens the scan's row (with a store): its key, ports, probe version, sender,
// targets, rate or bandwidth, and provenance.
func (r *scanRun) startScan(ctx context.Context) error {
	c := r.c
	if c.Store == nil {
		return nil
	}
	var seed *int64
	if c.Seed != nil {
		v := int64(*c.Seed)
		seed = &v
	}
	pv := int64(c.QUIC.Version)
	var rate *int32
	if c.Zmap.Rate > 0 {
		v := int32(c.Zmap.Rate)
		rate = &v
	}
	var bw *string
	if c.Zmap.Bandwidth != "" {
		bw = &c.Zmap.Bandwidth
	}
	var err error
	r.scanID, _, err = c.Store.StartScan(ctx, store.Scan{ISOWeek: c.Week, VantageID: c.VantageID, Label: c.Label,
		Shard: c.Shard, Shards: c.Shards, Seed: seed, Ports: r.pl.ports32(), ProbeVersion: &pv, Sender: "zmap",
		Targets: strings.Join(r.man.Targets, " "), RatePPS: rate, Bandwidth: bw, Provenance: r.prov.JSON()})
	if err != nil {
		return store.Unavailable(err)
	}
	return nil
}
