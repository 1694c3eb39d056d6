package dnsbench

import (
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
