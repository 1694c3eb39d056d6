package probe

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

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

// ReplayResult says what a replay did.
type ReplayResult struct {
	ScanID   int64
	Port     uint16
	Replies  int64
	Inserted int64
	Bad      int64
	ByKind   map[Kind]int64
}

// Replay ingests a raw zmap CSV kept by a scan (RunDir/<port>.csv) into the scan named
// by the manifest next to it. Replaying twice adds nothing the second time.
func Replay(ctx context.Context, s *store.Store, csvPath string, log *slog.Logger) (*ReplayResult, error) {
	dir := filepath.Dir(csvPath)
	mb, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		return nil, fmt.Errorf("replay %s: the scan's manifest.json must be next to it: %w", csvPath, err)
	}
	var man Manifest
	if err := json.Unmarshal(mb, &man); err != nil {
		return nil, fmt.Errorf("replay: manifest: %w", err)
	}
	base := strings.TrimSuffix(filepath.Base(csvPath), ".csv")
	pn, err := strconv.Atoi(base)
	if err != nil || pn < 1 || pn > 65535 {
		return nil, fmt.Errorf("replay %s: file name must be <port>.csv", csvPath)
	}
	port := uint16(pn)
	ports := map[uint16]ProbeKind{}
	for p, k := range man.Ports {
		n, err := strconv.Atoi(p)
		if err != nil {
			return nil, fmt.Errorf("replay: manifest port %q", p)
		}
		ports[uint16(n)] = ProbeKind(k)
	}
	if _, ok := ports[port]; !ok {
		return nil, fmt.Errorf("replay: port %d is not in the scan's manifest", port)
	}
	qb, err := os.ReadFile(filepath.Join(dir, man.QUICProbe))
	if err != nil {
		return nil, err
	}
	q, err := ParseQUICProbe(qb)
	if err != nil {
		return nil, err
	}
	db, err := os.ReadFile(filepath.Join(dir, man.DNSProbe))
	if err != nil {
		return nil, err
	}
	d, err := ParseDNSProbe(db)
	if err != nil {
		return nil, err
	}
	cl, err := NewClassifier(q, d, ports)
	if err != nil {
		return nil, err
	}
	if err := s.EnsureVantage(ctx, store.Vantage{ID: man.Vantage}); err != nil {
		return nil, err
	}
	// Find the scan by its natural key; create it (finished, status ok) if this database
	// never saw it (a replay into another database).
	var scanID int64
	err = s.Pool.QueryRow(ctx, `SELECT scan_id FROM scans WHERE iso_week=$1 AND vantage_id=$2 AND label=$3 AND shard=$4`,
		man.Week, man.Vantage, man.Label, man.Shard).Scan(&scanID)
	if err != nil {
		pv := int64(q.Version)
		var seed *int64
		if man.Seed != nil {
			v := int64(*man.Seed)
			seed = &v
		}
		scanID, _, err = s.StartScan(ctx, store.Scan{ISOWeek: man.Week, VantageID: man.Vantage, Label: man.Label,
			Shard: man.Shard, Shards: man.Shards, Seed: seed, Ports: []int32{int32(port)}, ProbeVersion: &pv,
			Targets: strings.Join(man.Targets, " ")})
		if err != nil {
			return nil, err
		}
		if err := s.FinishScan(ctx, scanID, "ok", nil); err != nil {
			return nil, err
		}
	}
	f, err := os.Open(csvPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	in := NewIngest(s, scanID, cl, log)
	if err := IngestCSV(ctx, f, port, in); err != nil {
		return nil, err
	}
	return &ReplayResult{ScanID: scanID, Port: port, Replies: in.Replies, Inserted: in.Inserted, Bad: in.Bad, ByKind: in.Counts[port]}, nil
}
