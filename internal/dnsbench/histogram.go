package dnsbench

import (
	"math"
	"math/bits"
	"time"
)

// subBits sets the histogram's precision: 2^subBits buckets per power of two, so a
// recorded value is reported within 1/2^(subBits+1) of itself (0.2 %), as an
// HdrHistogram with 2-3 significant digits would.
const subBits = 8

const subCount = 1 << subBits

// Histogram is a log-linear histogram of durations (HdrHistogram's bucketing: exact
// below 2^(subBits+1) ns, then 2^subBits linear buckets per power of two). The zero
// value is empty and ready; not safe for concurrent use.
type Histogram struct {
	counts   []int64
	n        int64
	sum      time.Duration
	min, max time.Duration
}

func bucketOf(v int64) int {
	if v < 2*subCount {
		return int(v)
	}
	shift := bits.Len64(uint64(v)) - (subBits + 1)
	return (shift+1)*subCount + int(v>>shift) - subCount
}

// bucketRange returns the lowest and highest value of bucket i.
func bucketRange(i int) (lo, hi int64) {
	if i < 2*subCount {
		return int64(i), int64(i)
	}
	shift := i/subCount - 1
	lo = int64(subCount+i%subCount) << shift
	return lo, lo + 1<<shift - 1
}

// Record adds d (negative counts as 0).
func (h *Histogram) Record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	i := bucketOf(int64(d))
	if i >= len(h.counts) {
		h.counts = append(h.counts, make([]int64, i+1-len(h.counts))...)
	}
	h.counts[i]++
	if h.n == 0 || d < h.min {
		h.min = d
	}
	if d > h.max {
		h.max = d
	}
	h.n++
	h.sum += d
}

// Merge adds o's values.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	if len(o.counts) > len(h.counts) {
		h.counts = append(h.counts, make([]int64, len(o.counts)-len(h.counts))...)
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.n += o.n
	h.sum += o.sum
}

// Count is the number of values recorded.
func (h *Histogram) Count() int64 { return h.n }

// Mean is the exact mean (0 when empty).
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return h.sum / time.Duration(h.n)
}

// Min and Max are exact.
func (h *Histogram) Min() time.Duration { return h.min }
func (h *Histogram) Max() time.Duration { return h.max }

// Quantile returns the value at quantile q (0..1): the middle of the bucket holding the
// ceil(q*n)-th smallest value, clamped to [Min, Max]; 0 when empty.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := int64(q*float64(h.n) + 0.999999)
	rank = min(max(rank, 1), h.n)
	var seen int64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			lo, hi := bucketRange(i)
			v := time.Duration(lo + (hi-lo)/2)
			return min(max(v, h.min), h.max)
		}
	}
	return h.max
}

// Bin is a range of a histogram and how many values fell in it: [Lo, Hi], inclusive, in
// milliseconds (Lo and Hi are whole nanoseconds).
type Bin struct {
	LoMs  float64 `json:"lo_ms"`
	HiMs  float64 `json:"hi_ms"`
	Count int64   `json:"count"`
}

// BinsPerOctave is the resolution of the histograms a report carries (JSON, the
// histogram CSV, the plot): 16 bins per power of two, each ~4.4% wide.
const BinsPerOctave = 16

// Bins returns the non-empty bins of h with perOctave bins per power of two (a power of
// two up to 2^subBits), in order: the buckets of h merged, so every value is counted in
// the bin that holds it.
func (h *Histogram) Bins(perOctave int) []Bin {
	var out []Bin
	for i, c := range h.counts {
		if c == 0 {
			continue
		}
		bucketLo, _ := bucketRange(i)
		lo, hi := binOf(bucketLo, perOctave)
		if n := len(out); n > 0 && out[n-1].LoMs == nsToMs(lo) {
			out[n-1].Count += c
			continue
		}
		out = append(out, Bin{LoMs: nsToMs(lo), HiMs: nsToMs(hi), Count: c})
	}
	return out
}

// Coarsen merges bins (of BinsPerOctave or finer) into perOctave bins per power of two.
func Coarsen(bins []Bin, perOctave int) []Bin {
	var out []Bin
	for _, b := range bins {
		lo, hi := binOf(int64(math.Round(b.LoMs*1e6)), perOctave)
		if n := len(out); n > 0 && out[n-1].LoMs == nsToMs(lo) {
			out[n-1].Count += b.Count
			continue
		}
		out = append(out, Bin{LoMs: nsToMs(lo), HiMs: nsToMs(hi), Count: b.Count})
	}
	return out
}

// binOf returns the range of the bin (perOctave per power of two) holding v ns.
func binOf(v int64, perOctave int) (lo, hi int64) {
	if v <= 0 {
		return 0, 0
	}
	o := bits.Len64(uint64(v)) - 1
	base := int64(1) << o
	sub := (v - base) * int64(perOctave) >> o
	lo = base + sub<<o/int64(perOctave)
	hi = base + (sub+1)<<o/int64(perOctave) - 1
	return max(lo, base), max(hi, lo)
}

func nsToMs(ns int64) float64 { return float64(ns) / 1e6 }
