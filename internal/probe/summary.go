package probe

import (
	"fmt"
	"io"
	"text/tabwriter"
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
