package probe

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/doqscan/doqscan/internal/listfile"
	"github.com/doqscan/doqscan/internal/store"
)

// ParseQUICProbe reads a probe built by QUICProbe.Build back into its parameters.
func ParseQUICProbe(b []byte) (QUICProbe, error) {
	var p QUICProbe
	if len(b) < 7 || b[0]&headerFormLong == 0 {
		return p, errors.New("quic probe file: not a long-header packet")
	}
	p.Version = binary.BigEndian.Uint32(b[1:])
	dl := int(b[5])
	if len(b) < 7+dl {
		return p, errors.New("quic probe file: truncated")
	}
	p.DCID = b[6 : 6+dl]
	sl := int(b[6+dl])
	if len(b) < 7+dl+sl {
		return p, errors.New("quic probe file: truncated")
	}
	p.SCID = b[7+dl : 7+dl+sl]
	p.Size = len(b)
	return p, p.Validate()
}

// ParseDNSProbe reads a DNS probe built by DNSProbe.Build back into its parameters.
func ParseDNSProbe(b []byte) (DNSProbe, error) {
	var p DNSProbe
	if len(b) < dnsHeaderLen+5 {
		return p, errors.New("dns probe file: too short")
	}
	p.ID = binary.BigEndian.Uint16(b)
	var labels []string
	for i := dnsHeaderLen; i < len(b); {
		l := int(b[i])
		if l == 0 {
			break
		}
		if l > dnsMaxLabel || i+1+l > len(b) {
			return p, errors.New("dns probe file: bad name")
		}
		labels = append(labels, string(b[i+1:i+1+l]))
		i += 1 + l
	}
	p.QName = strings.Join(labels, ".") + "."
	return p, nil
}

// ReplayResult says what a replay did and found.
type ReplayResult struct {
	ScanID     int64
	Port       uint16
	Ports      []uint16        // the ports of the raw file (several: a zmap 4.x run); Port is the first
	NoPort     int64           // replies of a several-port run that name no port (not stored)
	Lines      int64           // data lines read (the header not counted)
	Replies    int64           // replies classified and stored
	Inserted   int64           // rows new in the database
	Bad        int64           // lines that did not parse
	BadLines   []int64         // line numbers of the first bad lines (1 = the header)
	Truncated  bool            // the last line was cut off (no newline) and not parsed
	Complete   bool            // zmap finished the port (its metadata file is next to the CSV)
	Status     store.RunStatus // the port's scan_runs status after the replay
	ScanStatus store.RunStatus // the scan's status after the replay
	ByKind     map[Kind]int64
}

// ErrNothingRecovered says a raw file held no data line and zmap did not finish its port
// (no metadata file): an empty file of a cut run, not a scan without replies.
var ErrNothingRecovered = errors.New("no reply recovered")

// Replay ingests a raw zmap CSV kept by a scan (RunDir/<port>.csv) into the scan named
// by the manifest next to it. Replaying twice adds nothing the second time. It settles
// the port's run: 'ok' when zmap finished the port (its <port>.meta.json exists, which
// zmap writes at its end) and the file's last line is whole, else 'interrupted' (an 'ok'
// run stays 'ok'); then the scan: 'ok' when every port is, else a scan left 'running'
// becomes 'interrupted'. A file with no data line of a port zmap did not finish returns
// the result and ErrNothingRecovered. A missing file or manifest wraps os.ErrNotExist.
//
// Its steps: readReplayManifest, the scan's lock, planReplay (the file's ports and the
// scan's probes), openRows (the scan's and ports' rows), ingest, and settle (the ports'
// and the scan's status).
func Replay(ctx context.Context, s *store.Store, csvPath string, log *slog.Logger) (_ *ReplayResult, retErr error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	man, err := readReplayManifest(csvPath)
	if err != nil {
		return nil, err
	}
	// Not while a run of the same scan sends: its ports are not settled yet.
	ctx, release, err := holdScanLock(ctx, s, ScanLockKey(man.Week, man.Vantage, man.Label, man.Shard), log)
	if err != nil {
		return nil, err
	}
	defer func() {
		if lost := release(); lost != nil {
			retErr = errors.Join(retErr, lost)
		}
	}()
	rp, err := planReplay(csvPath, man)
	if err != nil {
		return nil, err
	}
	meta, metaErr := ReadZmapMeta(metaFor(csvPath))
	res := &ReplayResult{Port: rp.filePorts[0], Ports: rp.filePorts, Complete: metaErr == nil}
	runs, err := rp.openRows(ctx, s, res)
	if err != nil {
		return nil, err
	}
	in, err := rp.ingest(ctx, s, res, log)
	if err != nil {
		return nil, err
	}
	if err := rp.settle(ctx, s, res, runs, in, meta); err != nil {
		return nil, err
	}
	if res.Lines == 0 && !res.Complete {
		return res, fmt.Errorf("%w: %s has no data line and zmap did not finish the port (no %s): its output was lost "+
			"or zmap never ran; port %d is marked %s, re-run the scan to send it again", ErrNothingRecovered, csvPath,
			filepath.Base(metaFor(csvPath)), res.Port, res.Status)
	}
	return res, nil
}

// readReplayManifest checks that the raw file can be read and reads the manifest of
// its scan, next to it.
func readReplayManifest(csvPath string) (Manifest, error) {
	var man Manifest
	if f, err := listfile.Open(csvPath); err != nil {
		return man, fmt.Errorf("replay: %w", err)
	} else {
		f.Close()
	}
	mb, err := listfile.ReadAll(filepath.Join(filepath.Dir(csvPath), "manifest.json"), 0)
	if err != nil {
		return man, fmt.Errorf("replay %s: the scan's manifest.json must be next to it: %w", csvPath, err)
	}
	if err := json.Unmarshal(mb, &man); err != nil {
		return man, fmt.Errorf("replay: manifest: %w", err)
	}
	return man, nil
}

// replayPlan is what a replay reads a raw file with: the file's ports, the scan's
// probes and its classifier.
type replayPlan struct {
	csvPath   string
	man       Manifest
	filePorts []uint16             // from the file's name; the first is the port of single-port rows
	kinds     map[uint16]ProbeKind // the scan's ports (the manifest's)
	qb, db    []byte               // the QUIC and DNS probes' bytes
	q         QUICProbe
	cl        *Classifier
}

// planReplay reads the ports from the raw file's name (each must be a port of the
// manifest) and the scan's probes kept next to it, and builds the classifier.
func planReplay(csvPath string, man Manifest) (*replayPlan, error) {
	rp := &replayPlan{csvPath: csvPath, man: man, kinds: map[uint16]ProbeKind{}}
	var err error
	if rp.filePorts, _, err = ParseRawName(csvPath); err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	for p, k := range man.Ports {
		n, err := strconv.Atoi(p)
		if err != nil {
			return nil, fmt.Errorf("replay: manifest port %q", p)
		}
		rp.kinds[uint16(n)] = ProbeKind(k)
	}
	for _, p := range rp.filePorts {
		if _, ok := rp.kinds[p]; !ok {
			return nil, fmt.Errorf("replay: port %d is not in the scan's manifest", p)
		}
	}
	dir := filepath.Dir(csvPath)
	if rp.qb, rp.q, err = readProbe(filepath.Join(dir, man.QUICProbe), ParseQUICProbe); err != nil {
		return nil, err
	}
	var d DNSProbe
	if rp.db, d, err = readProbe(filepath.Join(dir, man.DNSProbe), ParseDNSProbe); err != nil {
		return nil, err
	}
	if rp.cl, err = NewClassifier(rp.q, d, rp.kinds); err != nil {
		return nil, err
	}
	return rp, nil
}

// openRows records the vantage point, finds the scan by its natural key (res.ScanID)
// or creates it if this database never saw it (a replay into another database), and
// opens a row for each of the file's ports that has none. It returns the ports' runs.
func (rp *replayPlan) openRows(ctx context.Context, s *store.Store, res *ReplayResult) (map[uint16]store.ScanRunState, error) {
	man := rp.man
	if err := s.EnsureVantage(ctx, store.Vantage{ID: man.Vantage}); err != nil {
		return nil, store.Unavailable(err)
	}
	st, found, err := s.FindScan(ctx, man.Week, man.Vantage, man.Label, man.Shard)
	if err != nil {
		return nil, store.Unavailable(err)
	}
	if found {
		res.ScanID = st.ID
	} else if res.ScanID, err = rp.startScan(ctx, s); err != nil {
		return nil, err
	}
	runs := map[uint16]store.ScanRunState{}
	for _, p := range rp.filePorts {
		run, hasRun := st.Runs[int32(p)]
		if !hasRun {
			pkt := rp.qb
			if rp.kinds[p] == ProbeDNS {
				pkt = rp.db
			}
			h := sha256.Sum256(pkt)
			abs, _ := filepath.Abs(rp.csvPath)
			if err := s.StartScanRun(ctx, store.ScanRun{ScanID: res.ScanID, Port: int32(p), ProbeKind: string(rp.kinds[p]),
				ProbeSHA256: h[:], RawOutput: abs}); err != nil {
				return nil, store.Unavailable(err)
			}
			run = store.ScanRunState{Port: int32(p), Status: store.RunRunning}
		}
		runs[p] = run
	}
	return runs, nil
}

// startScan opens the scan's row from the manifest.
func (rp *replayPlan) startScan(ctx context.Context, s *store.Store) (int64, error) {
	man := rp.man
	pv := int64(rp.q.Version)
	var seed *int64
	if man.Seed != nil {
		v := int64(*man.Seed)
		seed = &v
	}
	var all []int32
	for p := range rp.kinds {
		all = append(all, int32(p))
	}
	slices.Sort(all)
	id, _, err := s.StartScan(ctx, store.Scan{ISOWeek: man.Week, VantageID: man.Vantage, Label: man.Label,
		Shard: man.Shard, Shards: man.Shards, Seed: seed, Ports: all, ProbeVersion: &pv,
		Targets: strings.Join(man.Targets, " ")})
	if err != nil {
		return 0, store.Unavailable(err)
	}
	return id, nil
}

// ingest classifies and stores the raw file's replies into the scan and counts them
// in res.
func (rp *replayPlan) ingest(ctx context.Context, s *store.Store, res *ReplayResult, log *slog.Logger) (*Ingest, error) {
	f, err := listfile.Open(rp.csvPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	in := NewIngest(s, res.ScanID, rp.cl, log)
	if len(rp.filePorts) > 1 {
		in.Ports = rp.filePorts
	}
	if err := IngestCSV(ctx, f, res.Port, in); err != nil {
		return nil, err
	}
	res.Lines, res.Replies, res.Inserted, res.Bad, res.BadLines, res.Truncated = in.Lines, in.Replies, in.Inserted, in.Bad, in.BadLines, in.Truncated
	res.ByKind = in.Counts[res.Port]
	res.NoPort = in.NoPort
	return in, nil
}

// settle closes the file's ports' rows ('ok' when the run was, or when zmap finished
// the port and the file is whole, else 'interrupted'; the probes sent from zmap's
// metadata, shared by the ports) and settles the scan's status.
func (rp *replayPlan) settle(ctx context.Context, s *store.Store, res *ReplayResult, runs map[uint16]store.ScanRunState, in *Ingest, meta *ZmapMeta) error {
	for i, p := range rp.filePorts {
		run := runs[p]
		status := store.RunInterrupted
		if run.Status == store.RunOK || (res.Complete && !res.Truncated) {
			status = store.RunOK
		}
		if i == 0 {
			res.Status = status
		}
		sent := run.ProbesSent
		if meta != nil {
			share := meta.TotalSent / int64(len(rp.filePorts))
			sent = &share
		}
		replies := res.Replies
		if len(rp.filePorts) > 1 {
			replies = countOf(in.Counts[p])
		}
		if err := s.FinishScanRun(ctx, res.ScanID, int32(p), status, sent, &replies, run.Blocklisted); err != nil {
			return store.Unavailable(err)
		}
	}
	var err error
	if res.ScanStatus, err = s.SettleScan(ctx, res.ScanID); err != nil {
		return store.Unavailable(err)
	}
	return nil
}

// readProbe reads a probe file kept with a scan and returns its bytes and the probe
// parsed from them.
func readProbe[T any](path string, parse func([]byte) (T, error)) ([]byte, T, error) {
	b, err := listfile.ReadAll(path, 0)
	if err != nil {
		var zero T
		return nil, zero, err
	}
	p, err := parse(b)
	return b, p, err
}
