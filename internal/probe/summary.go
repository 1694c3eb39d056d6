package probe

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/doqscan/doqscan/internal/store"
)

// PrintSummary writes a human-readable scan summary.
func PrintSummary(w io.Writer, s *Summary) {
	fmt.Fprintf(w, "scan %d  week %s  vantage %s  label %s  shard %d/%d  sender %s  probe version %s  status %s\n",
		s.ScanID, s.Week, s.Vantage, s.Label, s.Shard, s.Shards, s.Sender, s.Version, s.Status)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "port\tprobe\tstatus\tsent\treplies\t")
	for _, k := range Kinds {
		fmt.Fprintf(tw, "%s\t", k)
	}
	fmt.Fprint(tw, "hit rate\tduration s\trate p/s\t\n")
	for _, p := range s.Ports {
		status := p.Status
		if p.Resumed {
			status += " (earlier run)"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t", p.Port, p.Probe, status, p.ProbesSent, p.Replies)
		for _, k := range Kinds {
			fmt.Fprintf(tw, "%d\t", p.ByKind[k])
		}
		fmt.Fprintf(tw, "%.4f%%\t%.1f\t%.0f\t\n", 100*p.HitRate, p.DurationS, p.RatePPS)
	}
	fmt.Fprintf(tw, "all\t\t%s\t%d\t%d\t", s.Status, s.ProbesSent, s.Replies)
	for _, k := range Kinds {
		fmt.Fprintf(tw, "%d\t", s.ByKind[k])
	}
	hr := 0.0
	if s.ProbesSent > 0 {
		hr = float64(s.ByKind[KindQUICVN]+s.ByKind[KindDNS]) / float64(s.ProbesSent)
	}
	fmt.Fprintf(tw, "%.4f%%\t%.1f\t%.0f\t\n", 100*hr, s.DurationS, s.RatePPS)
	tw.Flush()
}

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
