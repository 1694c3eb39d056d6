package qlogs

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/doqscan/doqscan/internal/store"
)

// ErrNoCampaign: the campaign asked for is not in the database.
var ErrNoCampaign = errors.New("no such campaign")

// ExportConfig selects the stored qlogs to export.
type ExportConfig struct {
	CampaignID int64     // a campaign by id, or
	Vantage    string    // (Vantage, Label, Hour): the campaign of that hourly round
	Label      string    //
	Hour       time.Time //
	Out        string    // directory to write into (created)
}

// exportRow is a stored qlog with the measurement it belongs to.
type exportRow struct {
	QlogID   [16]byte
	Address  netip.Addr
	Port     int32
	ODCID    []byte
	Encoding string
	Format   string
	Data     []byte
	Protocol string
	Mode     string
	KeyShare string
	Variant  string
	Phase    string
}

// Export writes every qlog of a campaign into cfg.Out and returns the files written.
// A qlog of one trace is written as quic-go wrote it, JSON-SEQ, as <name>.sqlog; one of
// several traces (Version Negotiation made quic-go start a new connection) becomes one
// qlog JSON document with one trace per attempt, <name>.qlog. qvis opens both. Names:
// <address>-<port>-<protocol>-<mode>-<key share>[-<variant>]-<phase>-<odcid>. Exporting
// again rewrites the same files.
func Export(ctx context.Context, s *store.Store, cfg ExportConfig, log *slog.Logger) ([]string, error) {
	cid := cfg.CampaignID
	if cid == 0 {
		err := s.Pool.QueryRow(ctx, `SELECT campaign_id FROM campaigns WHERE vantage_id = $1 AND label = $2 AND round_hour = $3`,
			cfg.Vantage, cfg.Label, cfg.Hour).Scan(&cid)
		if err != nil {
			return nil, fmt.Errorf("%w: vantage %q label %q hour %s (%v)", ErrNoCampaign, cfg.Vantage, cfg.Label, cfg.Hour.Format(time.RFC3339), err)
		}
	} else {
		var one int
		if err := s.Pool.QueryRow(ctx, `SELECT 1 FROM campaigns WHERE campaign_id = $1`, cid).Scan(&one); err != nil {
			return nil, fmt.Errorf("%w: id %d (%v)", ErrNoCampaign, cid, err)
		}
	}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return nil, err
	}
	rows, err := s.Pool.Query(ctx, `
		SELECT q.qlog_id, q.address, q.port, q.odcid, q.encoding, q.format, q.data,
		       coalesce(m.protocol, ''), coalesce(m.mode, ''), coalesce(m.key_share, ''), coalesce(m.variant, ''), coalesce(m.phase, '')
		FROM qlogs q
		LEFT JOIN measurements m ON m.qlog_id = q.qlog_id AND m.campaign_id = q.campaign_id AND m.seq = 0
		WHERE q.campaign_id = $1
		ORDER BY q.address, q.port, q.qlog_id`, cid)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var written []string
	seen := map[[16]byte]bool{}
	start := time.Now()
	for rows.Next() {
		var r exportRow
		if err := rows.Scan(&r.QlogID, &r.Address, &r.Port, &r.ODCID, &r.Encoding, &r.Format, &r.Data,
			&r.Protocol, &r.Mode, &r.KeyShare, &r.Variant, &r.Phase); err != nil {
			return written, err
		}
		if seen[r.QlogID] {
			continue
		}
		seen[r.QlogID] = true
		name, data, err := exportFile(r)
		if err != nil {
			// One bad row does not stop the export: say which and go on.
			log.Warn("qlog not exported", "qlog_id", store.UUIDString(r.QlogID), "err", err)
			continue
		}
		path := filepath.Join(cfg.Out, name)
		if err := writeFileAtomic(path, data); err != nil {
			return written, err
		}
		written = append(written, path)
		if len(written)%1000 == 0 {
			log.Info("progress", "files", len(written), "elapsed", time.Since(start).Round(time.Second))
		}
	}
	if err := rows.Err(); err != nil {
		return written, err
	}
	log.Info("exported", "campaign_id", cid, "files", len(written), "dir", cfg.Out)
	return written, nil
}

// Decode returns the qlog file a stored qlogs row holds (qlogs.encoding, qlogs.data):
// gzip inflated (at most 64 MB), identity as is.
func Decode(encoding string, stored []byte) ([]byte, error) {
	switch encoding {
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(stored))
		if err != nil {
			return nil, err
		}
		data, err := io.ReadAll(io.LimitReader(zr, maxFileSize+1))
		if err != nil {
			return nil, err
		}
		if len(data) > maxFileSize {
			return nil, fmt.Errorf("inflates to more than %d bytes", maxFileSize)
		}
		return data, nil
	case "identity":
		return stored, nil
	}
	return nil, fmt.Errorf("encoding %q not supported", encoding)
}

// exportFile decodes a stored qlog and names the file it becomes.
func exportFile(r exportRow) (name string, data []byte, err error) {
	if data, err = Decode(r.Encoding, r.Data); err != nil {
		return "", nil, err
	}
	odcid := hex.EncodeToString(r.ODCID)
	if odcid == "" {
		odcid = store.UUIDString(r.QlogID)
	}
	parts := []string{strings.ReplaceAll(r.Address.String(), ":", "_"), fmt.Sprint(r.Port)}
	for _, p := range []string{r.Protocol, r.Mode, r.KeyShare, r.Variant, r.Phase} {
		if p != "" {
			parts = append(parts, p)
		}
	}
	stem := strings.Join(append(parts, odcid), "-")
	if r.Format == "qlog" {
		return stem + ".qlog", data, nil
	}
	traces := splitTraces(data)
	if len(traces) <= 1 {
		return stem + ".sqlog", data, nil
	}
	doc, err := jsonDocument(traces)
	if err != nil {
		return "", nil, err
	}
	return stem + ".qlog", doc, nil
}

// splitTraces splits JSON-SEQ records into traces: each starts at a header record (one
// with "trace" and no "name"). Records before the first header form a trace of their own.
func splitTraces(b []byte) [][][]byte {
	var out [][][]byte
	for _, rec := range bytes.Split(b, []byte{0x1e}) {
		rec = bytes.TrimSpace(rec)
		if len(rec) == 0 {
			continue
		}
		var h struct {
			Name  string          `json:"name"`
			Trace json.RawMessage `json:"trace"`
		}
		if (json.Unmarshal(rec, &h) == nil && h.Name == "" && h.Trace != nil) || len(out) == 0 {
			out = append(out, nil)
		}
		out[len(out)-1] = append(out[len(out)-1], rec)
	}
	return out
}

// jsonDocument turns JSON-SEQ traces into one qlog JSON document (qlog 0.3 §5, the
// "JSON" serialisation): {"qlog_format":"JSON", "traces":[{...header's trace, "events":[...]}]}.
// A record that is not valid JSON (the cut end of a truncated qlog) is left out.
func jsonDocument(traces [][][]byte) ([]byte, error) {
	type doc struct {
		Version string            `json:"qlog_version"`
		Format  string            `json:"qlog_format"`
		Title   string            `json:"title,omitempty"`
		Traces  []json.RawMessage `json:"traces"`
	}
	d := doc{Version: "0.3", Format: "JSON"}
	for _, tr := range traces {
		trace := map[string]json.RawMessage{}
		var events []json.RawMessage
		for i, rec := range tr {
			if !json.Valid(rec) {
				continue
			}
			if i == 0 {
				var h struct {
					Title string                     `json:"title"`
					Trace map[string]json.RawMessage `json:"trace"`
				}
				if json.Unmarshal(rec, &h) == nil && h.Trace != nil {
					trace = h.Trace
					if d.Title == "" {
						d.Title = h.Title
					}
					continue
				}
			}
			events = append(events, rec)
		}
		if events == nil {
			events = []json.RawMessage{}
		}
		ev, err := json.Marshal(events)
		if err != nil {
			return nil, err
		}
		trace["events"] = ev
		t, err := json.Marshal(trace)
		if err != nil {
			return nil, err
		}
		d.Traces = append(d.Traces, t)
	}
	return json.Marshal(d)
}

// writeFileAtomic writes path through a temporary file and a rename, so that an
// interrupted export leaves no half-written file under the final name.
func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".export-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}
