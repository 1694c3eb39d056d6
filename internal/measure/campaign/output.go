package campaign

import (
	"cmp"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/dnsmsg"
	"github.com/doqscan/doqscan/internal/measure"
	"github.com/doqscan/doqscan/internal/measure/rtt"
	"github.com/doqscan/doqscan/internal/quicver"
	"github.com/doqscan/doqscan/internal/store"
)

// Record is one resolver's results of a round as measure prints them with --json: one
// JSON object per line (zgrab2's shape). Only the measured exchanges are listed (the
// cache-warming ones are stored, not printed); what was not observed is absent or
// null, never a zero that could be read as a fact.
type Record struct {
	IP         string `json:"ip"`
	ServerName string `json:"server_name,omitempty"`
	// CampaignID is the round's campaigns row (absent with --no-store).
	CampaignID   int64           `json:"campaign_id,omitempty"`
	Measurements []Exchange      `json:"measurements"`
	RTT          []RTTRecord     `json:"rtt,omitempty"`
	Features     []FeatureRecord `json:"features,omitempty"`
}

// Exchange is one measured query: the unit (protocol, port, DoH variant, mode, key
// share), its outcome and timings, what the session negotiated, and for a QUIC
// handshake the cause of its round trips.
type Exchange struct {
	Protocol    string    `json:"protocol"`
	Port        int32     `json:"port"`
	Variant     string    `json:"variant,omitempty"`
	Mode        string    `json:"mode"`
	KeyShare    string    `json:"key_share,omitempty"`
	Seq         int16     `json:"seq"`
	StartedAt   time.Time `json:"started_at"`
	Status      string    `json:"status"`
	Error       string    `json:"error,omitempty"`
	HandshakeMS *float64  `json:"handshake_ms"`
	ResolveMS   *float64  `json:"resolve_ms"`
	Rcode       string    `json:"rcode,omitempty"`
	Answers     []string  `json:"answers,omitempty"`
	ALPN        *string   `json:"alpn,omitempty"`
	QUICVersion string    `json:"quic_version,omitempty"`
	TLSVersion  string    `json:"tls_version,omitempty"`
	TLSCipher   string    `json:"tls_cipher,omitempty"`
	Resumed     *bool     `json:"resumed,omitempty"`
	Used0RTT    *bool     `json:"used_0rtt,omitempty"`
	TFO         *bool     `json:"tfo,omitempty"`
	TokenUsed   *bool     `json:"token_used,omitempty"`
	RetrySeen   *bool     `json:"retry_seen,omitempty"`
	VNSeen      *bool     `json:"vn_seen,omitempty"`
	// Cause and RoundTrips explain a QUIC handshake (handshake_analyses); HandshakeRTTs
	// is the handshake time over the path's RTT.
	Cause         string   `json:"cause,omitempty"`
	RoundTrips    *int16   `json:"round_trips,omitempty"`
	HandshakeRTTs *float32 `json:"handshake_rtts,omitempty"`
}

// RTTRecord is the RTT samples of one (transport, port): each in ms, null when the
// probe got no answer.
type RTTRecord struct {
	Transport string     `json:"transport"`
	Port      int32      `json:"port"`
	MedianMS  *float64   `json:"median_ms"`
	SamplesMS []*float64 `json:"samples_ms"`
}

// FeatureRecord is one support check's observation (supported: null when unknown).
type FeatureRecord struct {
	Protocol  string `json:"protocol"`
	Port      int32  `json:"port"`
	Feature   string `json:"feature"`
	Supported *bool  `json:"supported"`
	Detail    string `json:"detail,omitempty"`
}

func msOf(ns *int64) *float64 {
	if ns == nil {
		return nil
	}
	v := float64(*ns/1000) / 1000
	return &v
}

// recordOf is the record of one resolver's rows (a batch of one resolver).
func recordOf(t Target, b *batch) Record {
	r := Record{IP: t.Addr.String(), ServerName: t.ServerName, Measurements: []Exchange{}}
	analyses := map[[16]byte]store.HandshakeAnalysis{}
	for _, a := range b.analyses {
		analyses[a.MeasurementID] = a
	}
	for _, m := range b.meas {
		r.CampaignID = m.CampaignID
		if m.Phase != PhaseMeasured {
			continue
		}
		e := Exchange{Protocol: m.Protocol, Port: m.Port, Variant: m.Variant, Mode: m.Mode, KeyShare: m.KeyShare, Seq: m.Seq,
			StartedAt: m.StartedAt.UTC(), Status: m.Status, Error: m.Error, HandshakeMS: msOf(m.HandshakeNS), ResolveMS: msOf(m.ResolveNS),
			Answers: m.Answers, ALPN: m.ALPN, Resumed: m.Resumed, Used0RTT: m.Used0RTT, TFO: m.TFO, TokenUsed: m.TokenUsed,
			RetrySeen: m.RetrySeen, VNSeen: m.VNSeen}
		if m.Rcode != nil {
			e.Rcode = dnsmsg.RcodeName(int(*m.Rcode))
		}
		if m.QUICVersion != nil {
			e.QUICVersion = quicver.Name(uint32(*m.QUICVersion))
		}
		if m.TLSVersion != nil {
			e.TLSVersion = tls.VersionName(uint16(*m.TLSVersion))
		}
		if m.TLSCipher != nil {
			e.TLSCipher = *m.TLSCipher
		}
		if a, ok := analyses[m.MeasurementID]; ok {
			e.Cause, e.RoundTrips, e.HandshakeRTTs = a.Cause, a.RoundTrips, a.Ratio
		}
		r.Measurements = append(r.Measurements, e)
	}
	byKey := map[rttKey]*RTTRecord{}
	var order []rttKey
	for _, s := range b.rtts {
		k := rttKey{t: rtt.Transport(s.Transport), port: uint16(s.Port)}
		if byKey[k] == nil {
			byKey[k] = &RTTRecord{Transport: s.Transport, Port: s.Port}
			order = append(order, k)
		}
		byKey[k].SamplesMS = append(byKey[k].SamplesMS, msOf(s.RTTNS))
	}
	for _, k := range order {
		rec := byKey[k]
		var ok []int64
		for _, s := range rec.SamplesMS {
			if s != nil {
				ok = append(ok, int64(*s*1e6))
			}
		}
		if len(ok) > 0 {
			med := rtt.MedianNS(ok)
			rec.MedianMS = msOf(&med)
		}
		r.RTT = append(r.RTT, *rec)
	}
	for _, f := range b.features {
		r.Features = append(r.Features, FeatureRecord{Protocol: f.Protocol, Port: f.Port, Feature: f.Feature, Supported: f.Supported, Detail: f.Detail})
	}
	return r
}

// Printer prints each resolver's record as it is measured: a JSON line, or table rows
// (one per measured exchange, written at Close). Safe for concurrent use.
type Printer struct {
	json  *cli.JSONLines
	table *cli.Table
}

// NewPrinter prints JSON lines (asJSON) or a table on w.
func NewPrinter(w io.Writer, asJSON bool) *Printer {
	if asJSON {
		return &Printer{json: cli.NewJSONLines(w)}
	}
	return &Printer{table: cli.NewTable(w, "RESOLVER", "PROTOCOL", "PORT", "VARIANT", "MODE", "KEY SHARE", "STATUS",
		"HANDSHAKE", "RESOLVE", "RTT", "CAUSE", "DETAIL")}
}

// Print prints one resolver.
func (p *Printer) Print(r Record) error {
	if p.json != nil {
		return p.json.Write(r)
	}
	rtts := map[string]*float64{}
	for _, x := range r.RTT {
		rtts[fmt.Sprintf("%s/%d", x.Transport, x.Port)] = x.MedianMS
	}
	ms := func(v *float64) string {
		if v == nil {
			return "-"
		}
		return fmt.Sprintf("%.1f ms", *v)
	}
	for _, e := range r.Measurements {
		detail := e.Error
		if e.Rcode != "" && e.Rcode != "NOERROR" {
			detail = cmp.Or(detail, e.Rcode)
		}
		p.table.Row(r.IP, e.Protocol, fmt.Sprint(e.Port), cmp.Or(e.Variant, "-"), e.Mode, cmp.Or(e.KeyShare, "-"), e.Status,
			ms(e.HandshakeMS), ms(e.ResolveMS), ms(rtts[fmt.Sprintf("%s/%d", measure.Protocol(e.Protocol).Transport(), e.Port)]),
			cmp.Or(e.Cause, "-"), cli.Cut(detail, 60))
	}
	return nil
}

// Close writes the table (a JSON printer has written every line already).
func (p *Printer) Close() error {
	if p.table != nil {
		return p.table.Flush()
	}
	return nil
}

// Log logs the summary as one line with structured fields (statuses per protocol and
// DoQ causes as groups, not Go map strings).
func (s *Summary) Log(log *slog.Logger) {
	byProto := make([]any, 0, len(s.Status))
	for _, p := range slices.Sorted(maps.Keys(s.Status)) {
		byProto = append(byProto, cli.CountsAttr(p, s.Status[p]))
	}
	log.Info("round summary", "campaign", s.CampaignID, "label", s.Label, "planned", s.Planned, "skipped", s.Skipped,
		"partly_stored", s.Resumed, "measured", s.Measured, "rows", s.Rows, "rtt_samples", s.RTTSamples,
		"analyses", s.Analyses, "features", s.Features, "duration_s", s.DurationSecs,
		slog.Group("status", byProto...), cli.CountsAttr("doq_causes", s.Causes))
}

// WriteText prints the summary for a person.
func (s *Summary) WriteText(w io.Writer) {
	if s.CampaignID == 0 {
		fmt.Fprintf(w, "round without a database: %d resolvers measured in %.1f s\n", s.Measured, s.DurationSecs)
	} else {
		fmt.Fprintf(w, "round %d (label %s): %d resolvers planned, %d measured now", s.CampaignID, s.Label, s.Planned, s.Measured)
		if s.Resumed > 0 {
			fmt.Fprintf(w, " (%d of them only the units not stored yet)", s.Resumed)
		}
		fmt.Fprintf(w, ", %d skipped, in %.1f s\n", s.Skipped, s.DurationSecs)
		if s.Skipped > 0 {
			fmt.Fprintf(w, "skipped: %d resolvers already stored in this round with every unit asked for; to measure them again: --rerun (a new attempt) or another --label\n", s.Skipped)
		}
	}
	if len(s.Status) == 0 {
		return
	}
	fmt.Fprintf(w, "\n%-8s %s\n", "protocol", "measured exchanges by status")
	for _, p := range slices.Sorted(maps.Keys(s.Status)) {
		fmt.Fprintf(w, "%-8s", p)
		for _, st := range slices.Sorted(maps.Keys(s.Status[p])) {
			fmt.Fprintf(w, " %s=%d", st, s.Status[p][st])
		}
		fmt.Fprintln(w)
	}
	if len(s.Causes) > 0 {
		fmt.Fprintf(w, "DoQ handshakes by cause:")
		for _, c := range slices.Sorted(maps.Keys(s.Causes)) {
			fmt.Fprintf(w, " %s=%d", c, s.Causes[c])
		}
		fmt.Fprintln(w)
	}
}
