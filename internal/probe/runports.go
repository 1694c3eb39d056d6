package probe

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/doqscan/doqscan/internal/store"
)

// runPorts runs zmap once for z.Ports (one port, or several with zmap 4.x) into a new
// raw file and returns a summary per port. Of a several-port run, zmap's metadata gives
// the probes of the whole run: each port is given an equal share (zmap sends every
// address to every port), and rows_inserted of the run is on its first port.
//
// Its steps: openRaw (the raw file and zmap's command line), startRuns (the ports' rows),
// clearMeta, stream (zmap's output into the raw file and the store), replay (what did
// not reach the database), summarize (the summaries from the replies and zmap's
// metadata) and finish (the ports' status, their rows closed).
func runPorts(ctx context.Context, c ScanConfig, z ZmapRun, kind ProbeKind, pkt []byte, dir string, scanID int64, cl *Classifier, log *slog.Logger) ([]PortSummary, error) {
	if len(z.Ports) == 0 {
		z.Ports = []uint16{z.Port}
	}
	pr := &portRun{c: c, z: z, kind: kind, ports: z.Ports, multi: len(z.Ports) > 1, scanID: scanID, cl: cl,
		pss: make([]PortSummary, len(z.Ports))}
	for i, p := range pr.ports {
		pr.pss[i] = PortSummary{Port: p, Probe: kind, Status: store.RunFailed}
	}
	raw, args, err := pr.openRaw(dir, log)
	if err != nil {
		return pr.pss, err
	}
	defer raw.Close()
	if err := pr.startRuns(ctx, pkt, args); err != nil {
		return pr.pss, err
	}
	if err := pr.clearMeta(); err != nil {
		return pr.pss, err
	}
	pr.log.Info("zmap starting", "args", strings.Join(args, " "))
	start := time.Now()
	cmd, stdout, status, err := StartZmap(ctx, pr.z.Binary, args, pr.log)
	if err != nil {
		return pr.pss, err
	}
	streamErr, waitErr := pr.stream(ctx, cmd, stdout, status, raw)
	if pr.in.Deferred > 0 && streamErr == nil && waitErr == nil {
		streamErr = pr.replay(ctx)
	}
	if pr.in.NoPort > 0 {
		pr.log.Warn("ICMP replies of a several-port zmap run name no port: counted, not stored", "replies_without_port", pr.in.NoPort)
	}
	pr.summarize(time.Since(start).Seconds())
	return pr.pss, pr.finish(ctx, errors.Join(streamErr, waitErr))
}

// portRun is one zmap run of runPorts: what its steps share.
type portRun struct {
	c      ScanConfig
	z      ZmapRun // z.Ports set; z.MetadataFile where zmap's metadata is now
	kind   ProbeKind
	ports  []uint16
	multi  bool // several ports in one run (zmap 4.x)
	scanID int64
	cl     *Classifier
	log    *slog.Logger // with the run's ports, probe and raw file

	rawPath    string
	in         *Ingest    // the replies (of the replay, if there was one)
	lastStatus ZmapStatus // zmap's last status line
	pss        []PortSummary
}

// openRaw creates the run's raw file and zmap's command line. The metadata name is the
// raw file's: zmap's command line is known once the raw file exists; a failing command
// line leaves an empty raw file (a failed attempt).
func (pr *portRun) openRaw(dir string, log *slog.Logger) (*os.File, []string, error) {
	raw, rawPath, err := createAttempt(dir, pr.ports)
	if err != nil {
		return nil, nil, err
	}
	pr.z.MetadataFile = metaFor(rawPath) + partSuffix
	args, err := pr.z.Args()
	if err != nil {
		raw.Close()
		return nil, nil, err
	}
	pr.rawPath = rawPath
	for i := range pr.pss {
		pr.pss[i].RawOutput = rawPath
	}
	pr.log = log.With("ports", rawBase(pr.ports), "probe", pr.kind, "raw", filepath.Base(rawPath))
	return raw, args, nil
}

// startRuns opens the ports' scan_runs rows (with a store), waiting for the database.
func (pr *portRun) startRuns(ctx context.Context, pkt []byte, args []string) error {
	if pr.c.Store == nil {
		return nil
	}
	h := sha256.Sum256(pkt)
	return store.Retry(ctx, dbPolicy(pr.c.DBWait), pr.log, "start port", func(ctx context.Context) error {
		for _, p := range pr.ports {
			if err := pr.c.Store.StartScanRun(ctx, store.ScanRun{ScanID: pr.scanID, Port: int32(p), ProbeKind: string(pr.kind),
				ProbeSHA256: h[:], ZmapArgs: args, RawOutput: pr.rawPath}); err != nil {
				return store.Unavailable(err)
			}
		}
		return nil
	})
}

// clearMeta removes a metadata file left from an earlier run whose raw file is gone: it
// must not make this run look finished.
func (pr *portRun) clearMeta() error {
	for _, f := range []string{metaFor(pr.rawPath), pr.z.MetadataFile} {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// newIngest is an Ingest of the run's replies.
func (pr *portRun) newIngest() *Ingest {
	in := NewIngest(pr.c.Store, pr.scanID, pr.cl, pr.log)
	if pr.multi {
		in.Ports = pr.ports
	}
	return in
}

// stream copies zmap's output to the raw file and ingests it while zmap runs (relaying
// zmap's progress to the log), waits for zmap, and, when zmap finished and the raw file
// holds all of its output (synced by StreamCSV), gives zmap's metadata its final name.
func (pr *portRun) stream(ctx context.Context, cmd *exec.Cmd, stdout io.Reader, status <-chan ZmapStatus, raw io.Writer) (streamErr, waitErr error) {
	pr.in = pr.newIngest()
	progDone := make(chan struct{})
	go func() {
		defer close(progDone)
		pr.relayProgress(status)
	}()
	streamErr = StreamCSV(ctx, stdout, raw, pr.ports[0], pr.in, pr.c.FlushEvery)
	waitErr = cmd.Wait()
	<-progDone
	if streamErr == nil && waitErr == nil {
		if err := os.Rename(pr.z.MetadataFile, metaFor(pr.rawPath)); err != nil {
			pr.log.Warn("no zmap metadata", "err", err)
		} else {
			pr.z.MetadataFile = metaFor(pr.rawPath)
		}
	}
	return streamErr, waitErr
}

// relayProgress logs zmap's status lines (it prints one a second) every 5 s and the
// last one, and keeps the last in pr.lastStatus.
func (pr *portRun) relayProgress(status <-chan ZmapStatus) {
	var last time.Time
	for st := range status {
		pr.lastStatus = st
		if time.Since(last) >= 5*time.Second || st.Done {
			pr.log.Info("zmap progress", "elapsed", st.Elapsed, "percent", st.Percent, "sent", st.Sent,
				"send_rate", st.SendRate, "recv", st.Recv, "hitrate_pct", st.HitRate)
			last = time.Now()
		}
	}
}

// replay ingests the complete raw file again when the database fell behind or went
// away during the scan, waiting for it to answer (the rows already stored are dropped by
// the table's key); on success its Ingest replaces the streamed one.
func (pr *portRun) replay(ctx context.Context) error {
	pr.log.Warn("not every reply reached the database during the scan; replaying the raw output", "deferred_lines", pr.in.Deferred)
	var again *Ingest
	err := store.Retry(ctx, dbPolicy(pr.c.DBWait), pr.log, "replay raw output", func(ctx context.Context) error {
		f, err := os.Open(pr.rawPath)
		if err != nil {
			return err
		}
		defer f.Close()
		again = pr.newIngest()
		return IngestCSV(ctx, f, pr.ports[0], again)
	})
	if err == nil {
		again.Inserted += pr.in.Inserted
		pr.in = again
	}
	return err
}

// summarize fills the ports' summaries from the replies and zmap's metadata (logging
// the probes it failed to send and the replies its capture dropped).
func (pr *portRun) summarize(dur float64) {
	meta, metaErr := ReadZmapMeta(pr.z.MetadataFile)
	if metaErr != nil {
		pr.log.Warn("no zmap metadata", "err", metaErr)
	} else {
		if meta.SendToFailures > 0 {
			pr.log.Warn("zmap failed to send probes", "sendto_failures", meta.SendToFailures)
		}
		if meta.PcapDrop > 0 {
			pr.log.Warn("zmap's capture dropped replies", "pcap_drop", meta.PcapDrop)
		}
	}
	for i := range pr.pss {
		pr.summarizePort(i, dur, meta)
	}
}

// summarizePort fills the summary of the run's i-th port; meta is nil when zmap left no
// metadata.
func (pr *portRun) summarizePort(i int, dur float64, meta *ZmapMeta) {
	ps, in := &pr.pss[i], pr.in
	ps.DurationS = dur
	ps.Replies, ps.BadLines = in.Replies, in.Bad
	ps.ByKind = in.Counts[ps.Port]
	if ps.ByKind == nil {
		ps.ByKind = map[Kind]int64{}
	}
	if pr.multi {
		ps.Replies = countOf(ps.ByKind)
		if i == 0 {
			ps.NoPort = in.NoPort
		}
	}
	if i == 0 {
		ps.Inserted = in.Inserted
	}
	if meta != nil {
		ps.ProbesSent = meta.TotalSent / int64(len(pr.ports))
		ps.PcapDrop, ps.SendFails = meta.PcapDrop, meta.SendToFailures
		// Addresses of the targets zmap excluded through -b (zmap counts everything
		// outside the allowlist as "not allowed" too).
		ps.Blocklisted = max(0, targetSpace(pr.c.Targets, pr.c.InternetWide, pr.c.Testbed)-meta.Allowed)
	}
	hits := ps.ByKind[KindQUICVN]
	if pr.kind == ProbeDNS {
		hits = ps.ByKind[KindDNS]
	}
	if ps.ProbesSent > 0 {
		ps.HitRate = float64(hits) / float64(ps.ProbesSent)
	}
	// zmap's own average send rate (its last status line) is the achieved rate; the
	// wall-clock duration also holds start-up and the cooldown.
	if r, ok := ParseRate(pr.lastStatus.SendRate); ok {
		ps.RatePPS = r / float64(len(pr.ports))
	} else if ps.DurationS > 0 {
		ps.RatePPS = float64(ps.ProbesSent) / ps.DurationS
	}
}

// finish gives the ports the status err says and closes their rows (with a store):
// waiting for the database after a clean run, one attempt after a cancelled one or one
// the database left. It returns the run's error, named by its ports.
func (pr *portRun) finish(ctx context.Context, err error) error {
	wait := pr.c.DBWait
	switch {
	case err == nil:
	case ctx.Err() != nil:
		err = fmt.Errorf("ports %s: %w", rawBase(pr.ports), context.Canceled)
		wait = 0
	case store.IsUnavailable(err):
		err = fmt.Errorf("ports %s: %w", rawBase(pr.ports), store.Unavailable(err))
		wait = 0
	default:
		err = fmt.Errorf("ports %s: %w", rawBase(pr.ports), err)
	}
	runStatus := store.RunStatusOf(ctx, err)
	for i := range pr.pss {
		pr.pss[i].Status = runStatus
	}
	if pr.c.Store != nil {
		ferr := store.Retry(context.WithoutCancel(ctx), dbPolicy(wait), pr.log, "finish port", func(ctx context.Context) error {
			for _, ps := range pr.pss {
				sent, rep, bl := ps.ProbesSent, ps.Replies, ps.Blocklisted
				if err := pr.c.Store.FinishScanRun(ctx, pr.scanID, int32(ps.Port), ps.Status, &sent, &rep, &bl); err != nil {
					return store.Unavailable(err)
				}
			}
			return nil
		})
		if ferr != nil && err == nil {
			for i := range pr.pss {
				pr.pss[i].Status = store.RunStatusOf(ctx, ferr) // the database went away: interrupted
			}
			err = ferr
		}
	}
	for _, ps := range pr.pss {
		pr.log.Info("port done", "port", ps.Port, "status", ps.Status, "sent", ps.ProbesSent, "replies", ps.Replies, "by_kind", ps.ByKind,
			"rows_new", ps.Inserted, "duration_s", ps.DurationS)
	}
	return err
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
