package probe

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/quicver"
	"github.com/doqscan/doqscan/internal/store"
)

// ReplyRecord is one classified reply of a scan as zprobe prints it with --json: one JSON
// object per line, one per (address, port) that replied (zmap and zgrab2 print only
// what answered). What the reply did not show is absent.
type ReplyRecord struct {
	IP           string    `json:"ip"`
	Port         int32     `json:"port"`
	ReplyKind    string    `json:"reply_kind"`
	Sport        *int32    `json:"sport,omitempty"`
	QUICVersions []string  `json:"quic_versions,omitempty"`
	GreaseCount  *int16    `json:"grease_count,omitempty"`
	VNCIDMatch   *bool     `json:"vn_cid_match,omitempty"`
	DNSRcode     *int16    `json:"dns_rcode,omitempty"`
	DNSAnswers   *int16    `json:"dns_answers,omitempty"`
	DNSRA        *bool     `json:"dns_ra,omitempty"`
	ICMPType     *int16    `json:"icmp_type,omitempty"`
	ICMPCode     *int16    `json:"icmp_code,omitempty"`
	PayloadLen   *int32    `json:"payload_len,omitempty"`
	ReceivedAt   time.Time `json:"received_at"`
}

// WriteReplies writes the replies the scan holds (every run of it) to w, one JSON
// object a line in (port, address) order, and returns how many.
func WriteReplies(ctx context.Context, s *store.Store, scanID int64, w io.Writer) (int, error) {
	rows, err := store.Select[store.ScanReply](ctx, s, `SELECT * FROM scan_replies WHERE scan_id = $1 ORDER BY port, address`, scanID)
	if err != nil {
		return 0, fmt.Errorf("replies of scan %d: %w", scanID, err)
	}
	out := cli.NewJSONLines(w)
	for _, r := range rows {
		rep := ReplyRecord{IP: r.Address.String(), Port: r.Port, ReplyKind: r.ReplyKind, Sport: r.Sport, GreaseCount: r.GreaseCount,
			VNCIDMatch: r.VNCIDMatch, DNSRcode: r.DNSRcode, DNSAnswers: r.DNSAnswers, DNSRA: r.DNSRA, ICMPType: r.ICMPType,
			ICMPCode: r.ICMPCode, PayloadLen: r.PayloadLen, ReceivedAt: r.ReceivedAt.UTC()}
		for _, v := range r.QUICVersions {
			rep.QUICVersions = append(rep.QUICVersions, quicver.Name(uint32(v)))
		}
		if err := out.Write(rep); err != nil {
			return 0, err
		}
	}
	return len(rows), nil
}

// Log logs the summary as one line with structured fields (replies by kind as a group).
func (s *Summary) Log(log *slog.Logger) {
	byKind := map[string]int{}
	for k, n := range s.ByKind {
		byKind[string(k)] = int(n)
	}
	log.Info("scan summary", "scan_id", s.ScanID, "week", s.Week, "vantage", s.Vantage, "label", s.Label, "shard", s.Shard,
		"shards", s.Shards, "probes_sent", s.ProbesSent, "replies", s.Replies, "duration_s", s.DurationS, "status", s.Status,
		cli.CountsAttr("replies_by_kind", byKind))
}
