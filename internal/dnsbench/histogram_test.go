package dnsbench

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestBucketsCoverEveryValueOnce(t *testing.T) {
	prevHi := int64(-1)
	for i := 0; i < 40*subCount; i++ {
		lo, hi := bucketRange(i)
		if lo != prevHi+1 || hi < lo {
			t.Fatalf("bucket %d = [%d,%d], previous ended at %d", i, lo, hi, prevHi)
		}
		if bucketOf(lo) != i || bucketOf(hi) != i {
			t.Fatalf("bucket %d: bucketOf(%d)=%d bucketOf(%d)=%d", i, lo, bucketOf(lo), hi, bucketOf(hi))
		}
		prevHi = hi
	}
}

func TestQuantilesWithinPrecision(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var h Histogram
	var vals []time.Duration
	for range 100000 {
		// Log-normal-ish latencies from 10 µs to ~10 s.
		v := time.Duration(float64(10*time.Microsecond) * (1 + r.ExpFloat64()*r.ExpFloat64()*1000))
		vals = append(vals, v)
		h.Record(v)
	}
	slices.Sort(vals)
	for _, q := range []float64{0, 0.5, 0.9, 0.99, 0.999, 1} {
		idx := int(q*float64(len(vals))+0.999999) - 1
		idx = min(max(idx, 0), len(vals)-1)
		want := vals[idx]
		got := h.Quantile(q)
		if rel := float64(got-want) / float64(want); rel > 0.005 || rel < -0.005 {
			t.Errorf("q%.3f = %v, exact %v (%.3f%% off)", q, got, want, rel*100)
		}
	}
	var sum time.Duration
	for _, v := range vals {
		sum += v
	}
	if h.Mean() != sum/time.Duration(len(vals)) || h.Min() != vals[0] || h.Max() != vals[len(vals)-1] {
		t.Errorf("mean/min/max %v %v %v", h.Mean(), h.Min(), h.Max())
	}
	var a, b Histogram
	for i, v := range vals {
		if i%2 == 0 {
			a.Record(v)
		} else {
			b.Record(v)
		}
	}
	a.Merge(&b)
	if a.Quantile(0.99) != h.Quantile(0.99) || a.Count() != h.Count() || a.Mean() != h.Mean() {
		t.Errorf("merged histogram differs: p99 %v vs %v", a.Quantile(0.99), h.Quantile(0.99))
	}
}

func TestEmptyHistogram(t *testing.T) {
	var h Histogram
	if h.Quantile(0.5) != 0 || h.Mean() != 0 || h.Count() != 0 {
		t.Fatal("empty histogram reports values")
	}
	h.Record(-time.Second)
	if h.Max() != 0 {
		t.Fatal("negative value not clamped")
	}
}

// TestBinsHoldEveryValue: the bins of a report partition the values: each recorded value
// lies in the bin that counts it, bins are disjoint and ordered, counts add up, and
// coarser bins (the text histogram's) keep the counts and start at powers of two.
func TestBinsHoldEveryValue(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var h Histogram
	var vals []time.Duration
	for range 20000 {
		v := time.Duration(float64(50*time.Microsecond) * (1 + r.ExpFloat64()*r.ExpFloat64()*200))
		vals = append(vals, v)
		h.Record(v)
	}
	bins := h.Bins(BinsPerOctave)
	var n int64
	for i, b := range bins {
		n += b.Count
		if b.Count == 0 || b.HiMs < b.LoMs || (i > 0 && b.LoMs <= bins[i-1].HiMs) {
			t.Fatalf("bin %d %+v (previous %+v)", i, b, bins[max(i-1, 0)])
		}
	}
	if n != int64(len(vals)) {
		t.Fatalf("bins count %d values, want %d", n, len(vals))
	}
	for _, v := range vals[:2000] {
		ms := float64(v) / 1e6
		i := slices.IndexFunc(bins, func(b Bin) bool { return ms >= b.LoMs && ms <= b.HiMs })
		if i < 0 {
			t.Fatalf("value %v in no bin", v)
		}
		if w := (bins[i].HiMs - bins[i].LoMs) / bins[i].LoMs; w > 1.0/BinsPerOctave {
			t.Fatalf("bin %+v is %.3f wide, want <= 1/%d of its start", bins[i], w, BinsPerOctave)
		}
	}
	coarse := Coarsen(bins, 2)
	var m int64
	for _, b := range coarse {
		m += b.Count
		ns := int64(math.Round(b.LoMs * 1e6))
		if ns&(ns-1) != 0 && (ns*2/3)&(ns*2/3-1) != 0 { // 2^k or 1.5 * 2^k
			t.Errorf("coarse bin starts at %d ns", ns)
		}
	}
	if m != n || len(coarse) >= len(bins) {
		t.Errorf("coarse bins: %d values in %d bins (fine: %d in %d)", m, len(coarse), n, len(bins))
	}
}
