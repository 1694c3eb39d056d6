package dnsbench

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/doqscan/doqscan/internal/cli"
	"github.com/doqscan/doqscan/internal/dnsmsg"
	"github.com/doqscan/doqscan/internal/measure"
)

// Latency summarises a histogram, in milliseconds.
type Latency struct {
	Count int64   `json:"count"`
	Mean  float64 `json:"mean_ms"`
	Min   float64 `json:"min_ms"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P95   float64 `json:"p95_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p999_ms"`
	Max   float64 `json:"max_ms"`
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func latencyOf(h *Histogram) Latency {
	return Latency{Count: h.Count(), Mean: ms(h.Mean()), Min: ms(h.Min()), P50: ms(h.Quantile(.5)),
		P90: ms(h.Quantile(.9)), P95: ms(h.Quantile(.95)), P99: ms(h.Quantile(.99)),
		P999: ms(h.Quantile(.999)), Max: ms(h.Max())}
}

// Second is one second of the timeline, by the queries issued in it.
type Second struct {
	Second   int     `json:"second"`
	Rate     float64 `json:"target_rate,omitempty"` // paced rate at the second's start
	Sent     int64   `json:"sent"`
	Answered int64   `json:"answered"`
	Failed   int64   `json:"failed"`
	MeanMs   float64 `json:"mean_ms"`
	P99Ms    float64 `json:"p99_ms"`
}

// RampResult is what a ramp found.
type RampResult struct {
	Max           float64 `json:"max_rate"`
	LossThreshold float64 `json:"loss_threshold"`
	// MaxQPS: the most answers of a complete second whose loss stayed under the
	// threshold (resperf's maximum throughput); MaxQPSRate the rate offered then.
	MaxQPS     float64 `json:"max_sustained_qps"`
	MaxQPSRate float64 `json:"max_sustained_at_rate"`
	Stopped    bool    `json:"stopped_by_loss"`
	StopSecond int     `json:"stop_second,omitempty"`
	StopRate   float64 `json:"stop_rate,omitempty"`
	StopLoss   float64 `json:"stop_loss,omitempty"`
}

// Report is the outcome of one target's benchmark.
type Report struct {
	RunKey   string  `json:"run_key"` // random, one per target's run: bench_runs.run_key
	Target   string  `json:"target"`
	Protocol string  `json:"protocol"`
	Variant  string  `json:"variant,omitempty"`
	Address  string  `json:"address"`
	Policy   string  `json:"policy"`
	Load     string  `json:"load"`
	Workers  int     `json:"workers"`
	Streams  int     `json:"streams"` // queries outstanding per worker (persistent policy)
	Rate     float64 `json:"rate,omitempty"`
	Label    string  `json:"label,omitempty"`
	// PathLoss is the emulated per-direction loss a sweep set on the path (nil: none set).
	PathLoss *float64  `json:"path_loss,omitempty"`
	Started  time.Time `json:"started"`
	// Elapsed: from the first query issued to the last outcome (answer or timeout).
	Elapsed     float64 `json:"elapsed_s"`
	Sent        int64   `json:"sent"`
	Answered    int64   `json:"answered"` // valid responses, any rcode
	QPS         float64 `json:"qps"`      // Answered / Elapsed
	SuccessRate float64 `json:"success_rate"`
	// Latency: resolve time of answered queries, from the query's first packet to the
	// kernel's receive stamp of the answer. Total: from the moment the query was issued,
	// including a session's set-up (the cold latency of fresh sessions).
	Latency Latency `json:"latency"`
	Total   Latency `json:"total"`
	// Histogram and TotalHistogram are the distributions of Latency and Total: the
	// non-empty bins, BinsPerOctave per power of two.
	Histogram      []Bin                     `json:"histogram"`
	TotalHistogram []Bin                     `json:"total_histogram"`
	Rcodes         map[string]int64          `json:"rcodes"`
	Statuses       map[measure.Status]int64  `json:"statuses"` // every outcome, by class ("ok" included)
	ErrorSamples   map[measure.Status]string `json:"error_samples,omitempty"`
	Timeline       []Second                  `json:"timeline"`
	Ramp           *RampResult               `json:"ramp,omitempty"`
}

func (b *bench) report() *Report {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := &Report{RunKey: b.runKey, Target: b.t.String(), Protocol: string(b.t.Protocol), Variant: b.t.Variant,
		Address: b.t.Addr.String(), Policy: string(b.c.Policy), Load: b.c.Load, Workers: b.c.Workers, Streams: b.c.Streams,
		Label: b.c.Label, Started: b.start.UTC(), Sent: b.sent, Answered: b.ok,
		Latency: latencyOf(&b.lat), Total: latencyOf(&b.total), Histogram: b.lat.Bins(BinsPerOctave),
		TotalHistogram: b.total.Bins(BinsPerOctave), Rcodes: maps.Clone(b.rcodes),
		Statuses: maps.Clone(b.statuses), ErrorSamples: maps.Clone(b.errSample), Ramp: b.ramp}
	for rc, n := range b.rcodeN {
		if n > 0 {
			r.Rcodes[dnsmsg.RcodeName(rc)] += n
		}
	}
	if b.ok > 0 {
		r.Statuses[measure.StatusOK] = b.ok
	}
	if b.c.Load == LoadRate {
		r.Rate = b.c.Rate
	} else if b.c.Load == LoadRamp {
		r.Rate = b.c.RampMax
	}
	if !b.lastDone.IsZero() {
		r.Elapsed = b.lastDone.Sub(b.start).Seconds()
	}
	if r.Elapsed > 0 {
		r.QPS = float64(b.ok) / r.Elapsed
	}
	if b.sent > 0 {
		r.SuccessRate = float64(b.ok) / float64(b.sent)
	}
	for i, s := range b.seconds {
		r.Timeline = append(r.Timeline, Second{Second: i, Rate: s.rate, Sent: s.sent, Answered: s.ok,
			Failed: s.done - s.ok, MeanMs: ms(s.lat.Mean()), P99Ms: ms(s.lat.Quantile(.99))})
	}
	return r
}

// WriteJSON writes the reports as JSON lines: one object per report (one per target,
// and per policy or loss level of a comparison or sweep).
func WriteJSON(w io.Writer, rs []*Report) error {
	out := cli.NewJSONLines(w)
	for _, r := range rs {
		if err := out.Write(r); err != nil {
			return err
		}
	}
	return nil
}

// histogramBar is the widest bar of a text histogram, in characters.
const histogramBar = 40

// writeHistogram writes bins as a text histogram: one line per bin (two per power of
// two) with its range, count, share and a bar.
func writeHistogram(sb *strings.Builder, title string, bins []Bin) {
	bins = Coarsen(bins, 2)
	var total, most int64
	for _, b := range bins {
		total += b.Count
		most = max(most, b.Count)
	}
	if total == 0 {
		return
	}
	fmt.Fprintf(sb, "  %s histogram:\n", title)
	for _, b := range bins {
		bar := int((b.Count*histogramBar + most - 1) / most)
		fmt.Fprintf(sb, "    %9.3f - %9.3f ms %9d %6.2f%% %s\n", b.LoMs, b.HiMs, b.Count, 100*float64(b.Count)/float64(total), strings.Repeat("#", bar))
	}
}

// WriteText writes a human summary of each report.
func WriteText(w io.Writer, rs []*Report) error {
	var sb strings.Builder
	for _, r := range rs {
		fmt.Fprintf(&sb, "%s  policy=%s load=%s workers=%d", r.Target, r.Policy, r.Load, r.Workers)
		if r.Streams > 1 {
			fmt.Fprintf(&sb, " streams=%d", r.Streams)
		}
		if r.Rate > 0 {
			fmt.Fprintf(&sb, " rate=%.0f/s", r.Rate)
		}
		fmt.Fprintf(&sb, "\n  sent %d  answered %d  success %.2f%%  %.1f queries/s over %.2fs\n",
			r.Sent, r.Answered, 100*r.SuccessRate, r.QPS, r.Elapsed)
		l := r.Latency
		fmt.Fprintf(&sb, "  resolve ms: mean %.3f  min %.3f  p50 %.3f  p90 %.3f  p99 %.3f  p99.9 %.3f  max %.3f\n",
			l.Mean, l.Min, l.P50, l.P90, l.P99, l.P999, l.Max)
		fmt.Fprintf(&sb, "  total ms (incl. session set-up): mean %.3f  p50 %.3f  p99 %.3f\n", r.Total.Mean, r.Total.P50, r.Total.P99)
		writeHistogram(&sb, "resolve time", r.Histogram)
		sb.WriteString("  rcodes:")
		for _, k := range slices.Sorted(maps.Keys(r.Rcodes)) {
			fmt.Fprintf(&sb, " %s=%d", k, r.Rcodes[k])
		}
		sb.WriteString("\n  outcomes:")
		for _, k := range slices.Sorted(maps.Keys(r.Statuses)) {
			fmt.Fprintf(&sb, " %s=%d", k, r.Statuses[k])
		}
		sb.WriteString("\n")
		for _, k := range slices.Sorted(maps.Keys(r.ErrorSamples)) {
			fmt.Fprintf(&sb, "  e.g. %s: %s\n", k, r.ErrorSamples[k])
		}
		if rp := r.Ramp; rp != nil {
			fmt.Fprintf(&sb, "  ramp to %.0f/s, loss threshold %.1f%%: max sustained %.0f answers/s (offered %.0f/s)",
				rp.Max, 100*rp.LossThreshold, rp.MaxQPS, rp.MaxQPSRate)
			if rp.Stopped {
				fmt.Fprintf(&sb, "; stopped at second %d, rate %.0f/s, loss %.1f%%", rp.StopSecond, rp.StopRate, 100*rp.StopLoss)
			}
			sb.WriteString("\n")
		}
	}
	_, err := io.WriteString(w, sb.String())
	return err
}

// ReadJSON reads what WriteJSON wrote: one report per line.
func ReadJSON(r io.Reader) ([]*Report, error) {
	dec := json.NewDecoder(r)
	var out []*Report
	for {
		var rep Report
		if err := dec.Decode(&rep); err == io.EOF {
			return out, nil
		} else if err != nil {
			return out, err
		}
		out = append(out, &rep)
	}
}
