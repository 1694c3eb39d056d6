package probe

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/doqscan/doqscan/internal/store"
)

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
