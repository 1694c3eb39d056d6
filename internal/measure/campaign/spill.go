package campaign

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/doqscan/doqscan/internal/store"
)

// A spill file holds measured results that could not be stored yet (the database was
// unavailable and the in-memory buffer full, or the round gave up waiting): JSON lines,
// first the campaign's id and natural key, then one line per batch of resolvers with
// their rows exactly as they would have been written, and, when the round ended
// without its database, a last line with the campaign's final status. The file is
// appended and fsynced batch by batch under an exclusive flock; the next round (of any
// hour) writes every spill file it finds before it starts, with the same idempotent
// COPY as a normal write (natural keys, UUIDv5 ids), and deletes it.

// spillPrefix and spillSuffix name spill files in the spill directory.
const (
	spillPrefix = "measure-campaign-"
	spillSuffix = ".jsonl"
)

type spillCampaign struct {
	CampaignID int64     `json:"campaign_id"`
	VantageID  string    `json:"vantage_id"`
	Label      string    `json:"label"`
	RoundHour  time.Time `json:"round_hour"`
}

type spillBatch struct {
	Resolvers    int                       `json:"resolvers"`
	Qlogs        []store.Qlog              `json:"qlogs,omitempty"`
	Measurements []store.Measurement       `json:"measurements,omitempty"`
	RTTSamples   []store.RTTSample         `json:"rtt_samples,omitempty"`
	Analyses     []store.HandshakeAnalysis `json:"handshake_analyses,omitempty"`
	Features     []store.ResolverFeature   `json:"resolver_features,omitempty"`
}

type spillFinish struct {
	Status  store.RunStatus `json:"status"`
	Summary json.RawMessage `json:"summary"`
}

type spillRecord struct {
	Campaign *spillCampaign `json:"campaign,omitempty"`
	Batch    *spillBatch    `json:"batch,omitempty"`
	Finish   *spillFinish   `json:"finish,omitempty"`
}

// spillWriter appends to one spill file it holds locked.
type spillWriter struct {
	f         *os.File
	path      string
	resolvers int // in the file
}

func createSpill(dir string, c spillCampaign) (*spillWriter, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("spill: %w", err)
	}
	name := fmt.Sprintf("%s%d-%s-%d%s", spillPrefix, c.CampaignID, time.Now().UTC().Format("20060102T150405.000000000"),
		os.Getpid(), spillSuffix)
	path := filepath.Join(dir, name)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("spill: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("spill: lock %s: %w", path, err)
	}
	w := &spillWriter{f: f, path: path}
	if err := w.append(spillRecord{Campaign: &c}); err != nil {
		w.close()
		os.Remove(path)
		return nil, err
	}
	return w, nil
}

func (w *spillWriter) append(r spillRecord) error {
	line, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("spill: %w", err)
	}
	if _, err := w.f.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("spill %s: %w", w.path, err)
	}
	if err := w.f.Sync(); err != nil {
		return fmt.Errorf("spill %s: %w", w.path, err)
	}
	return nil
}

func (w *spillWriter) add(b *batch) error {
	if err := w.append(spillRecord{Batch: &spillBatch{Resolvers: b.targets, Qlogs: b.qlogs, Measurements: b.meas,
		RTTSamples: b.rtts, Analyses: b.analyses, Features: b.features}}); err != nil {
		return err
	}
	w.resolvers += b.targets
	return nil
}

func (w *spillWriter) close() error { return w.f.Close() }

// errPartialRecord says a spill file ends inside a record: the process died while
// appending it (every complete record before it is read).
var errPartialRecord = errors.New("spill file ends inside a record")

// readSpill reads a spill file: its campaign, then each batch (passed to onBatch in
// file order), then its final status if it has one. A last line without its newline
// (a crash while appending) is reported as errPartialRecord after the complete records.
func readSpill(r io.Reader, onBatch func(spillCampaign, *batch) error) (spillCampaign, *spillFinish, error) {
	br := bufio.NewReader(r)
	var hdr spillCampaign
	var fin *spillFinish
	for n := 0; ; n++ {
		line, err := br.ReadBytes('\n')
		if err == io.EOF {
			if len(bytes.TrimSpace(line)) > 0 {
				return hdr, fin, errPartialRecord
			}
			if n == 0 {
				return hdr, nil, errors.New("empty spill file")
			}
			return hdr, fin, nil
		}
		if err != nil {
			return hdr, fin, err
		}
		var rec spillRecord
		if err := json.Unmarshal(line, &rec); err != nil {
			return hdr, fin, fmt.Errorf("record %d: %w", n+1, err)
		}
		switch {
		case n == 0:
			if rec.Campaign == nil || rec.Campaign.CampaignID <= 0 {
				return hdr, nil, errors.New("record 1 does not name a campaign")
			}
			hdr = *rec.Campaign
		case fin != nil:
			return hdr, fin, fmt.Errorf("record %d follows the final status", n+1)
		case rec.Batch != nil:
			sb := rec.Batch
			b := &batch{qlogs: sb.Qlogs, meas: sb.Measurements, rtts: sb.RTTSamples, analyses: sb.Analyses,
				features: sb.Features, targets: sb.Resolvers}
			if err := b.check(hdr.CampaignID); err != nil {
				return hdr, fin, fmt.Errorf("record %d: %w", n+1, err)
			}
			b.fillHour(hdr.RoundHour)
			if err := onBatch(hdr, b); err != nil {
				return hdr, fin, err
			}
		case rec.Finish != nil:
			if rec.Finish.Status == "" {
				return hdr, fin, fmt.Errorf("record %d: final status without a status", n+1)
			}
			fin = rec.Finish
		default:
			return hdr, fin, fmt.Errorf("record %d is neither a batch nor a final status", n+1)
		}
	}
}

// check rejects a batch whose rows belong to another campaign than the file's.
func (b *batch) check(cid int64) error {
	for _, err := range []error{
		otherCampaign(b.meas, func(m store.Measurement) int64 { return m.CampaignID }, "measurement", cid),
		otherCampaign(b.qlogs, func(q store.Qlog) int64 { return q.CampaignID }, "qlog", cid),
		otherCampaign(b.rtts, func(r store.RTTSample) int64 { return r.CampaignID }, "rtt sample", cid),
		otherCampaign(b.features, func(f store.ResolverFeature) int64 { return f.CampaignID }, "feature", cid),
	} {
		if err != nil {
			return err
		}
	}
	if b.targets < 0 {
		return fmt.Errorf("negative resolver count %d", b.targets)
	}
	return nil
}

// fillHour sets the partition key of rows spilled without one (files written before
// the tables were partitioned): the campaign's hour.
func (b *batch) fillHour(h time.Time) {
	for i := range b.qlogs {
		if b.qlogs[i].RoundHour.IsZero() {
			b.qlogs[i].RoundHour = h
		}
	}
	for i := range b.meas {
		if b.meas[i].RoundHour.IsZero() {
			b.meas[i].RoundHour = h
		}
	}
	for i := range b.rtts {
		if b.rtts[i].RoundHour.IsZero() {
			b.rtts[i].RoundHour = h
		}
	}
	for i := range b.analyses {
		if b.analyses[i].RoundHour.IsZero() {
			b.analyses[i].RoundHour = h
		}
	}
}

// otherCampaign rejects the first of rows (each a what) that belongs to another campaign
// than cid.
func otherCampaign[T any](rows []T, campaignID func(T) int64, what string, cid int64) error {
	for _, r := range rows {
		if id := campaignID(r); id != cid {
			return fmt.Errorf("%s of campaign %d in a spill file of campaign %d", what, id, cid)
		}
	}
	return nil
}

// spillFiles lists the spill files in dir, oldest first.
func spillFiles(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("spill directory: %w", err)
	}
	var out []string
	for _, e := range ents {
		if n := e.Name(); e.Type().IsRegular() && strings.HasPrefix(n, spillPrefix) && strings.HasSuffix(n, spillSuffix) {
			out = append(out, filepath.Join(dir, n))
		}
	}
	sort.Strings(out)
	return out, nil
}

// errSpillInUse says another process holds a spill file (a round still appending).
var errSpillInUse = errors.New("spill file in use by a running round")

// replaySpillFile writes one spill file's batches (and its final status) and deletes
// it. onStored is called after each batch is stored. A database that stays unavailable
// past the policy's deadline gives an error wrapping store.ErrUnavailable; the file is
// then kept, as it is for any other failure.
func replaySpillFile(ctx context.Context, s *store.Store, path string, p store.RetryPolicy, log *slog.Logger,
	onStored func(*batch)) (resolvers int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return 0, errSpillInUse
		}
		return 0, err
	}
	checked := false
	hdr, fin, rerr := readSpill(f, func(hdr spillCampaign, b *batch) error {
		if !checked {
			if err := checkSpillCampaign(ctx, s, hdr, p, log); err != nil {
				return err
			}
			checked = true
		}
		if err := store.Retry(ctx, p, log, "write spilled results", func(ctx context.Context) error {
			return write(ctx, s, b)
		}); err != nil {
			return err
		}
		resolvers += b.targets
		if onStored != nil {
			onStored(b)
		}
		return nil
	})
	if rerr != nil && !errors.Is(rerr, errPartialRecord) {
		return resolvers, rerr
	}
	if errors.Is(rerr, errPartialRecord) {
		log.Warn("spill file ends inside a record (the process died while appending it): that batch is not in the file "+
			"and is measured again if its round is resumed", "file", path)
	}
	if fin != nil {
		if !checked {
			if err := checkSpillCampaign(ctx, s, hdr, p, log); err != nil {
				return resolvers, err
			}
		}
		if err := store.Retry(ctx, p, log, "record the final status of a spilled round", func(ctx context.Context) error {
			return s.FinishCampaign(ctx, hdr.CampaignID, fin.Status, fin.Summary)
		}); err != nil {
			return resolvers, err
		}
	}
	if err := os.Remove(path); err != nil {
		return resolvers, err
	}
	return resolvers, nil
}

// checkSpillCampaign makes sure the database holds the spill file's campaign under the
// same natural key: a spill file written against another database must not add rows to
// an unrelated campaign that happens to have the same id.
func checkSpillCampaign(ctx context.Context, s *store.Store, c spillCampaign, p store.RetryPolicy, log *slog.Logger) error {
	var vantage, label string
	var hour time.Time
	var found bool
	err := store.Retry(ctx, p, log, "look up a spilled round's campaign", func(ctx context.Context) error {
		err := s.Pool.QueryRow(ctx, `SELECT vantage_id, label, round_hour FROM campaigns WHERE campaign_id = $1`,
			c.CampaignID).Scan(&vantage, &label, &hour)
		found = err == nil
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		return err
	})
	if err != nil {
		return err
	}
	if !found || vantage != c.VantageID || label != c.Label || !hour.Equal(c.RoundHour) {
		return fmt.Errorf("spill file is for campaign %d (%s/%s/%s), which this database does not hold: "+
			"written against another database?", c.CampaignID, c.VantageID, c.Label, c.RoundHour.UTC().Format(time.RFC3339))
	}
	return nil
}

// ReplaySpill writes the results that spill files in dir hold (left by rounds whose
// database was unavailable) and deletes each file written; it returns how many
// resolvers it stored. A file another running round holds, or one that cannot be
// written for a reason other than the database's absence, is kept and logged. A
// database that stays unavailable past the policy's deadline ends it with an error
// wrapping store.ErrUnavailable.
func ReplaySpill(ctx context.Context, s *store.Store, dir string, p store.RetryPolicy, log *slog.Logger) (int, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	files, err := spillFiles(dir)
	if err != nil {
		return 0, err
	}
	total := 0
	for _, path := range files {
		n, err := replaySpillFile(ctx, s, path, p, log, nil)
		total += n
		switch {
		case err == nil:
			log.Warn("results spilled by an earlier round are stored now", "file", path, "resolvers", n)
		case errors.Is(err, errSpillInUse):
			log.Info("spill file in use by a running round: left to it", "file", path)
		case errors.Is(err, store.ErrUnavailable):
			return total, err
		default:
			log.Error("spill file not written: kept for a later round (or an operator)", "file", path,
				"resolvers_written", n, "err", err)
		}
	}
	return total, nil
}
